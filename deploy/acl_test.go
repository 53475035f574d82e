package deploy

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/internal/redistest"
)

// A lock whose slot migrates is taken under README's least-privilege user as under the
// default one: go-redis follows the slot's ASK to its new node with ASKING (which the user's
// Cluster rules allow), the attempt is retried through TRYAGAIN, and Lock gets the lock once
// the slot has moved — not a NOPERM for ASKING at once.
func TestClusterLockWhileItsSlotMigratesUnderLeastPrivilege(t *testing.T) {
	c := redistest.NeedCluster(t, 3, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, a := range c.Addrs() {
		rc := redis.NewClient(&redis.Options{Addr: a})
		err := rc.ACLSetUser(ctx, "dlock", redistest.ACLRules("pw", redistest.ACLCommands, redistest.ACLClusterCommands)...).Err()
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	cl := c.Client(func(o *redis.ClusterOptions) { o.Username, o.Password = "dlock", "pw" })
	defer cl.Close()
	g, err := dlock.NewGenerator(cl, dlock.WithDefaultLease(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(context.Background())
	l, err := g.Gen("ACLMIG", "{mg}a")
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.BeginMigration(l.Config().UniqueKey()) // (a free lock: no key on the source, so it answers ASK)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		o, err := l.Lock(ctx)
		if err == nil {
			err = o.Unlock()
		}
		got <- err
	}()
	time.Sleep(300 * time.Millisecond) // (its attempts meet the migration)
	if err := m.Finish(); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("Lock of a lock whose slot migrated: %v", err)
	}
	// (the ACL refused nothing)
	for _, a := range c.Addrs() {
		rc := redis.NewClient(&redis.Options{Addr: a})
		log, err := rc.Do(ctx, "ACL", "LOG").Slice()
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(log) > 0 {
			t.Errorf("%s refused the user: %v", a, log)
		}
	}
}

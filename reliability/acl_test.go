package reliability_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/internal/redistest"
)

// Least privilege: dlock works as a Redis ACL user allowed only the commands it sends, on its
// own keys and release channels.
//
// What is sent, read from the code (processor/redis.go, processor/lua/, dlock/notify.go) and
// checked with MONITOR and INFO commandstats:
//   - the scripts lock.lua, renew.lua, release.lua and leave.lua by EVALSHA, with EVAL when the
//     server lacks the script (go-redis Script.Run); inside them SET, GET, DEL, PEXPIRE, PTTL,
//     PUBLISH and TIME, ZADD, ZREM and ZRANGE for the line of waiting processes, and HSET,
//     HGET and HDEL for the attempts they wait with, which ACLs check too;
//   - SUBSCRIBE and UNSUBSCRIBE of the release channels, and PING, dlock's health check of its
//     subscription connection after 5 s of silence;
//   - on connect, go-redis sends HELLO 3 AUTH (allowed to every user), then CLIENT SETINFO
//     (twice) and CLIENT MAINT_NOTIFICATIONS, whose refusal it ignores (Redis 7.0 does not know
//     these subcommands; on 7.2 and later add +client|setinfo to keep the ACL log quiet).
//
// Keys: DLOCK_<type>_<target> and, beside it, {DLOCK_<type>_<target>}:fence, :line,
// :want, :gap, :done:<owner>, :check:<owner> and :forced:<owner>, or
// DLOCK_<type>_<target>:fence (and so on) when the key holds a hash tag of its own; the release
// channels are {DLOCK_<type>_<target>}:released:<mark>, one per process, or
// DLOCK_<type>_<target>:released:<mark> likewise.
//
// The set is redistest.ACLCommands (and ACLFamilyCommands for the read-write lock and the
// semaphore), which TestACLListsAreTheREADMEs holds README to. The two tests below fail when
// the code drifts from it: TestACLLeastPrivilege when dlock is refused a command or does not use
// one it is allowed, TestACLEveryCommandNeeded when a command could be dropped.

const aclUser, aclPassword = "dlock", "dlock-acl-test-password"

// aclSetup starts a server with the dlock user allowed commands; it returns an admin client
// (default user) and the options of a dlock-user client.
func aclSetup(t *testing.T, commands []string) (*redis.Client, *redis.Options) {
	t.Helper()
	s := realServer(t)
	admin := redis.NewClient(&redis.Options{Addr: s.Addr})
	t.Cleanup(func() { _ = admin.Close() })
	ctx := context.Background()
	if err := admin.ACLSetUser(ctx, aclUser, redistest.ACLRules(aclPassword, commands)...).Err(); err != nil {
		t.Fatalf("ACL SETUSER: %v", err)
	}
	if err := admin.ACLLogReset(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	return admin, &redis.Options{Addr: s.Addr, Username: aclUser, Password: aclPassword}
}

// aclDenials returns the ACL log entries of the dlock user, as "reason:context:object".
func aclDenials(t *testing.T, admin *redis.Client) []string {
	t.Helper()
	entries, err := admin.ACLLog(context.Background(), 100).Result()
	if err != nil {
		t.Fatalf("ACL LOG: %v", err)
	}
	var out []string
	for _, e := range entries {
		if e.Username != aclUser {
			continue
		}
		if e.Reason == "command" && strings.HasPrefix(e.Object, "client|") {
			continue // CLIENT SETINFO and the like on connect: go-redis ignores a refusal
		}
		out = append(out, e.Reason+":"+e.Context+":"+e.Object)
	}
	return out
}

func commandStats(t *testing.T, admin *redis.Client) map[string]string {
	t.Helper()
	info, err := admin.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	stats := map[string]string{}
	for _, line := range strings.Split(info, "\r\n") {
		if name, rest, ok := strings.Cut(line, ":"); ok && strings.HasPrefix(name, "cmdstat_") {
			calls, _, _ := strings.Cut(rest, ",")
			stats[strings.TrimPrefix(name, "cmdstat_")] = strings.TrimPrefix(calls, "calls=")
		}
	}
	return stats
}

// refused reports whether err is an ACL refusal, at the top level or inside a script.
func refused(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "NOPERM") ||
		strings.Contains(err.Error(), "The user executing the script can't"))
}

// The dlock user runs a real scenario (contention between two generators with notifications,
// on a plain key and on one with a hash tag; a renewal; a TryLock; a lost lease) without a
// single refusal, and is refused everything else.
func TestACLLeastPrivilege(t *testing.T) {
	admin, opt := aclSetup(t, redistest.ACLCommands)
	dur := soak(t, 2*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), dur+time.Minute) // turns a hang into a failure
	defer cancel()
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// (A renewal has 500 ms to spare: a stall of this process, or a renewal run late on a
	// loaded machine, must not lose a holding; what is checked here is that nothing is refused.)
	const lease = 2 * time.Second
	g1, c1 := netGenerator(t, opt, dlock.WithDefaultLease(lease))
	g2, _ := netGenerator(t, opt, dlock.WithDefaultLease(lease))

	// Contention: 4+4 goroutines on a plain key and on a hash-tagged one.
	var counts [2]netCounts
	var wg sync.WaitGroup
	for i, target := range []string{"k", "{acct}:7"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			contention{
				gens: [2]*dlock.Generator{g1, g2}, typ: "ACL", target: target, goroutines: 4,
				// (a Lock call may wait for every other goroutine's long hold, 7 × 1.8 s, and
				// more on a loaded machine: 10 s timed one out in the suite under load)
				until: time.Now().Add(dur), lockTimeout: 30 * time.Second,
				longEvery: 25, longHold: lease * 9 / 10,
			}.run(t, &counts[i])
		}()
	}
	wg.Wait()
	for i, target := range []string{"k", "{acct}:7"} {
		n := &counts[i]
		t.Logf("as ACL user %q, target %q, %v: %v", aclUser, target, dur, n)
		if n.overlaps.Load() != 0 || n.lost.Load() != 0 || n.timeouts.Load() != 0 || n.lockErrs.Load() != 0 ||
			n.unlockErrs.Load() != 0 || n.unlockLost.Load() != 0 {
			t.Errorf("target %q: %v", target, n)
		}
		if n.byGen[0].Load() == 0 || n.byGen[1].Load() == 0 {
			t.Errorf("target %q: a generator never acquired: %v", target, n)
		}
	}

	// A hold longer than the lease is kept by renewals.
	l, _ := g1.Gen("ACL", "renew")
	owned, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(lease * 2)
	if owned.Err() != nil {
		t.Fatalf("lost while renewing: %v", context.Cause(owned))
	}
	if err := l.Unlock(owned); err != nil {
		t.Fatal(err)
	}

	// TryLock: refused while held elsewhere, granted once free.
	held, _ := g1.Gen("ACL", "try")
	try, _ := g2.Gen("ACL", "try")
	hctx, err := held.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if o, ok, err := try.TryLock(ctx); ok || err != nil || o != nil {
		t.Fatalf("TryLock while held elsewhere = %v, %v, %v; want nil, false, nil", o, ok, err)
	}
	if st, err := try.State(ctx); err != nil || !st.Held() { // (as an operator's tool reads it)
		t.Fatalf("State while held = %+v, %v", st, err)
	}
	if err := held.Unlock(hctx); err != nil {
		t.Fatal(err)
	}
	o, ok, err := try.TryLock(ctx)
	if !ok || err != nil {
		t.Fatalf("TryLock on a free lock = %v, %v", ok, err)
	}
	if err := try.Unlock(o); err != nil {
		t.Fatal(err)
	}

	// Lost lease: the key is taken behind the holder's back.
	lost, _ := g1.Gen("ACL", "lost")
	lctx, err := lost.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	key := lost.Config().UniqueKey()
	if err := admin.Set(ctx, key, "intruder", 10*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the holder was not told that its key was taken")
	}
	if cause := context.Cause(lctx); !errors.Is(cause, dlock.ErrLockLost) {
		t.Fatalf("cause %v, want ErrLockLost", cause)
	}
	if err := lost.Unlock(lctx); !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("Unlock of a lost lock = %v, want ErrLockLost", err)
	}
	if v := admin.Get(ctx, key).Val(); v != "intruder" {
		t.Fatalf("the lost holder's Unlock touched the key: %q", v)
	}

	// Not one refusal for what dlock did, and every allowed command but PING was used (PING is
	// sent only after 5 s of silence on the subscription connection). UNSUBSCRIBE follows a
	// second after the last wait (a subscription lingers): wait for it.
	stats := commandStats(t, admin)
	for deadline := time.Now().Add(10 * time.Second); stats["unsubscribe"] == "" && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		stats = commandStats(t, admin)
	}
	if d := aclDenials(t, admin); len(d) != 0 {
		t.Errorf("ACL refusals for %s: %v", aclUser, d)
	}
	for _, c := range redistest.ACLCommands {
		if stats[c] == "" && c != "ping" {
			t.Errorf("%s was allowed but not used", c)
		}
	}
	t.Logf("commandstats (calls): %v", stats)
	t.Logf("ACL SETUSER %s %s", aclUser, strings.Join(redistest.ACLRules(aclPassword, redistest.ACLCommands), " "))

	// The restriction is real.
	for _, cmd := range [][]any{
		{"flushall"},
		{"acl", "whoami"},
		{"keys", "*"},
		{"get", "other:key"},
		{"set", "other:key", "x"},
		{"del", "{DLOCK_ACL_k}:fence"}, // DEL is allowed, on its own keys
		{"publish", "other-channel", "x"},
		{"subscribe", "other-channel"},
		{"config", "get", "maxmemory"},
		{"script", "flush"},
		{"eval", "return redis.call('get', KEYS[1])", "1", "other:key"},
		{"eval", "return redis.call('incr', KEYS[1])", "1", "DLOCK_x"},
	} {
		err := c1.Do(ctx, cmd...).Err()
		allowed := cmd[0] == "del"
		switch {
		case allowed && err != nil:
			t.Errorf("%v as %s: %v, want it allowed", cmd, aclUser, err)
		case !allowed && !refused(err):
			t.Errorf("%v as %s: %v, want it refused", cmd, aclUser, err)
		}
	}
}

// Each command of the set is needed: without it, a small scenario (a holder that renews, a
// waiter in another generator that polls and subscribes, a release that publishes, scripts not
// yet loaded) is refused it. (The ACL log entry is what is checked: dlock itself may carry on,
// the poller covering a refused SUBSCRIBE, for instance.)
func TestACLEveryCommandNeeded(t *testing.T) {
	for _, missing := range redistest.ACLCommands {
		if missing == "ping" {
			continue // sent only after 5 s of silence on the subscription; see TestACLLeastPrivilege
		}
		t.Run(missing, func(t *testing.T) {
			var commands []string
			for _, c := range redistest.ACLCommands {
				if c != missing {
					commands = append(commands, c)
				}
			}
			admin, opt := aclSetup(t, commands)
			const lease = 100 * time.Millisecond
			g1, _ := netGenerator(t, opt, dlock.WithDefaultLease(lease))
			g2, _ := netGenerator(t, opt, dlock.WithDefaultLease(lease))
			var d []string
			refusedIt := func() bool {
				d = aclDenials(t, admin)
				for _, e := range d {
					if strings.HasSuffix(e, ":"+missing) {
						return true
					}
				}
				return false
			}
			// A round may miss the command on a loaded machine (g1's 100 ms lease runs out
			// before its release, which then publishes nothing): up to three rounds, each on
			// a key of its own.
			for round := 0; round < 3 && !refusedIt(); round++ {
				aclRound(t, admin, g1, g2, "k"+strconv.Itoa(round), refusedIt)
			}
			if !refusedIt() {
				t.Errorf("without %s nothing was refused it; refusals: %v", missing, d)
			}
		})
	}
}

// aclRound runs TestACLEveryCommandNeeded's scenario once on the key of target: g1 holds
// (renewals), g2 waits (its attempt, polls, the subscription), then g1 releases and g2 takes
// the lock; it stops early once refusedIt.
func aclRound(t *testing.T, admin *redis.Client, g1, g2 *dlock.Generator, target string, refusedIt func() bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l1, _ := g1.Gen("ACLNEED", target)
	l2, _ := g2.Gen("ACLNEED", target)
	// Until the command is refused, or for at most 2 s: g1 holds (renewals), g2 waits
	// (its attempt, polls, the subscription), then g1 releases and g2 takes the lock.
	// Not a timing assertion: on a loaded machine the scenario simply runs longer.
	lctx, lcancel := context.WithTimeout(ctx, 2*time.Second) // bounds the wait, not the hold
	seen := make(chan struct{})
	go func() { // a refused request may keep Lock waiting: stop it once seen
		defer close(seen)
		for lctx.Err() == nil && len(aclDenials(t, admin)) == 0 {
			time.Sleep(20 * time.Millisecond)
		}
		lcancel()
	}()
	owned, err := l1.Lock(lctx)
	if err != nil {
		<-seen
	}
	lcancel()
	<-seen
	done := make(chan struct{})
	wctx, wcancel := context.WithTimeout(ctx, 4*time.Second)
	defer wcancel()
	go func() {
		defer close(done)
		if o, err := l2.Lock(wctx); err == nil {
			_ = l2.Unlock(o)
		}
	}()
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end) && !refusedIt(); {
		time.Sleep(20 * time.Millisecond)
	}
	if err == nil {
		_ = l1.Unlock(owned)
	}
	if refusedIt() {
		wcancel() // seen: the waiter need not wait for a release that may never come
	}
	<-done
	// Some commands (UNSUBSCRIBE, for one) are sent in the background: wait for them.
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end) && !refusedIt(); {
		time.Sleep(20 * time.Millisecond)
	}
}

// familyTurns has g1 and g2 take turns on a read-write lock (a reader of g1 that outlives two
// leases, a writer of g2 that waits for it) and on a semaphore of one permit, each wait
// bounded by ctx. It returns the first error.
func familyTurns(ctx context.Context, g1, g2 *dlock.Generator, lease time.Duration) error {
	rw1, err := g1.GenRW("ACLFAM", "rw")
	if err != nil {
		return err
	}
	rw2, _ := g2.GenRW("ACLFAM", "rw")
	r, err := rw1.RLock(ctx)
	if err != nil {
		return fmt.Errorf("RLock: %w", err)
	}
	wrote := make(chan error, 1)
	go func() {
		w, err := rw2.Lock(ctx)
		if err == nil {
			err = w.Unlock()
		}
		wrote <- err
	}()
	time.Sleep(2 * lease) // renewed meanwhile
	if err := r.Unlock(); err != nil {
		return fmt.Errorf("RUnlock: %w", err)
	}
	if err := <-wrote; err != nil {
		return fmt.Errorf("the writer: %w", err)
	}
	s1, err := g1.GenSemaphore("ACLFAM", "sem", 1)
	if err != nil {
		return err
	}
	s2, _ := g2.GenSemaphore("ACLFAM", "sem", 1)
	p, err := s1.Acquire(ctx, 1)
	if err != nil {
		return fmt.Errorf("Acquire: %w", err)
	}
	took := make(chan error, 1)
	go func() {
		q, err := s2.Acquire(ctx, 1)
		if err == nil {
			err = q.Unlock()
		}
		took <- err
	}()
	if err := p.Unlock(); err != nil {
		return fmt.Errorf("Release: %w", err)
	}
	if err := <-took; err != nil {
		return err
	}
	// State of each, as an operator's tool reads it
	if _, err := rw1.State(ctx); err != nil {
		return fmt.Errorf("the read-write lock's State: %w", err)
	}
	if _, err := s1.State(ctx); err != nil {
		return fmt.Errorf("the semaphore's State: %w", err)
	}
	return nil
}

// The read-write lock and the semaphore work under the user allowed the mutex's commands and
// the family's (redistest.ACLFamilyCommands), without a refusal, and each of the family's
// commands is needed: without it the same turns are refused it. (The turns that must all
// succeed hold with a 2 s lease, renewed with a quarter of it left: a stall of this process
// must not lose the reader; those that look for a refusal only, with 300 ms.)
func TestACLFamilyCommands(t *testing.T) {
	const lease, short = 2 * time.Second, 300 * time.Millisecond
	all := append(slices.Clone(redistest.ACLCommands), redistest.ACLFamilyCommands...)
	admin, opt := aclSetup(t, all)
	g1, _ := netGenerator(t, opt, dlock.WithDefaultLease(lease))
	g2, _ := netGenerator(t, opt, dlock.WithDefaultLease(lease))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // turns a hang into a failure
	defer cancel()
	if err := familyTurns(ctx, g1, g2, lease); err != nil {
		t.Fatal(err)
	}
	if d := aclDenials(t, admin); len(d) != 0 {
		t.Errorf("ACL refusals for %s: %v", aclUser, d)
	}
	stats := commandStats(t, admin)
	for _, c := range redistest.ACLFamilyCommands {
		if stats[c] == "" {
			t.Errorf("%s was allowed but not used", c)
		}
	}
	for _, missing := range redistest.ACLFamilyCommands {
		t.Run("without "+missing, func(t *testing.T) {
			admin, opt := aclSetup(t, slices.DeleteFunc(slices.Clone(all), func(c string) bool { return c == missing }))
			g1, _ := netGenerator(t, opt, dlock.WithDefaultLease(short))
			g2, _ := netGenerator(t, opt, dlock.WithDefaultLease(short))
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second) // a refused request may keep a wait going
			defer cancel()
			_ = familyTurns(ctx, g1, g2, short)
			for _, e := range aclDenials(t, admin) {
				if strings.HasSuffix(e, ":"+missing) {
					return
				}
			}
			t.Errorf("without %s nothing was refused it", missing)
		})
	}
}

// A request Redis refuses for good ends a Lock at once, waiting or not, with ErrNotObtained and
// the refusal, which points to README's rules: here a command that lock.lua calls (HGET) is not
// allowed to the user, so every attempt fails inside the script, and no wait mends that.
func TestACLRefusalInsideAScriptEndsTheWait(t *testing.T) {
	admin, opt := aclSetup(t, slices.DeleteFunc(slices.Clone(redistest.ACLCommands), func(c string) bool { return c == "hget" }))
	g, _ := netGenerator(t, opt, dlock.WithDefaultLease(time.Second))
	l, err := g.Gen("ACLREFUSED", "k")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := l.Lock(context.Background())
		done <- err
	}()
	select {
	case err := <-done:
		var pe *dlock.RedisProcessError
		if !errors.Is(err, dlock.ErrNotObtained) || !errors.As(err, &pe) || !strings.Contains(err.Error(), "can't run this command") || !strings.Contains(err.Error(), `README's "Least privilege"`) {
			t.Fatalf("Lock = %v; want ErrNotObtained with the refusal, and where the rules are listed (Redis 7.0 does not name the command)", err)
		}
	case <-time.After(30 * time.Second): // turns a hang into a failure
		t.Fatal("Lock kept waiting on a refusal")
	}
	if d := aclDenials(t, admin); len(d) == 0 {
		t.Fatal("nothing was refused")
	}
}

// TestACLRefusedNotificationIsWarnedOnce: a user that may not subscribe, or may not publish
// (so that nobody is told a release), still gets the lock (by its polls), and the Generator
// says why its waiters are slow, once at Warn, with Redis's refusal: where it used to be
// logged at Debug only (the subscription), or not at all (the publish: the scripts' are
// refused unseen, and the notifier's probe found its connection deaf every two seconds).
func TestACLRefusedNotificationIsWarnedOnce(t *testing.T) {
	for _, tc := range []struct {
		drop, says string
		again      string // logged at Debug each time the refusal recurs
	}{
		{"subscribe", "refused the subscription", "subscription connection failed"},
		{"publish", "refused the publish of a probe", "deaf to its probe"},
	} {
		t.Run(tc.drop, func(t *testing.T) {
			commands := slices.DeleteFunc(slices.Clone(redistest.ACLCommands), func(c string) bool { return c == tc.drop })
			_, opt := aclSetup(t, commands)
			const lease = 300 * time.Millisecond
			core, logs := observer.New(zap.DebugLevel)
			g1, _ := netGenerator(t, opt, dlock.WithDefaultLease(lease))
			g2, _ := netGenerator(t, opt, dlock.WithDefaultLease(lease), dlock.WithLogger(zap.New(core)))
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			l1, _ := g1.Gen("ACLSUB", "k")
			l2, _ := g2.Gen("ACLSUB", "k")
			o1, err := l1.Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan error, 1)
			go func() {
				o2, err := l2.Lock(ctx)
				if err == nil {
					err = o2.Unlock()
				}
				got <- err
			}()
			warned := func() *observer.ObservedLogs {
				return logs.FilterLevelExact(zap.WarnLevel).FilterMessageSnippet(tc.says)
			}
			for logs.FilterLevelExact(zap.DebugLevel).FilterMessageSnippet(tc.again).Len() < 2 && ctx.Err() == nil {
				time.Sleep(10 * time.Millisecond) // (g1 holds on: the refusal recurs)
			}
			if warned().Len() == 0 {
				t.Fatalf("no Warn of the refused %s; logged: %v", tc.drop, logs.All())
			}
			if err := o1.Unlock(); err != nil {
				t.Fatal(err)
			}
			if err := <-got; err != nil {
				t.Fatalf("the waiter refused %s: %v; want the lock by its polls", tc.drop, err)
			}
			if n := warned().Len(); n != 1 {
				t.Errorf("the refusal was logged at Warn %d times; want once per Generator", n)
			}
			if e := warned().All()[0]; !strings.Contains(e.ContextMap()["error"].(string), "NOPERM") {
				t.Errorf("the Warn does not carry Redis's refusal: %v", e.ContextMap())
			}
		})
	}
}

// TestACLWithoutWaitGivesTheWriteBack: with WithReplicaAck, a user without +wait gets an error
// at once that matches ErrNotReplicated and carries Redis's NOPERM, as README says, and the
// acquisition Redis ran is given back: the key is free again well before its lease runs out.
func TestACLWithoutWaitGivesTheWriteBack(t *testing.T) {
	_, opt := aclSetup(t, redistest.ACLCommands)
	const lease = time.Minute
	g, _ := netGenerator(t, opt, dlock.WithDefaultLease(lease), dlock.WithReplicaAck(1, 50*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, _ := g.Gen("ACLWAIT", "k")
	_, ok, err := l.TryLock(ctx)
	if ok || !errors.Is(err, dlock.ErrNotReplicated) || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("TryLock without +wait = %v, %v; want an error matching ErrNotReplicated that carries NOPERM", ok, err)
	}
	if _, err := l.Lock(ctx); !errors.Is(err, dlock.ErrNotReplicated) || ctx.Err() != nil {
		t.Fatalf("Lock without +wait = %v (context %v); want ErrNotReplicated at once", err, ctx.Err())
	}
	for {
		st, err := l.State(ctx)
		if err == nil && !st.Held() {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("the key stays held after the refused WAIT (%+v, %v): its write was not given back", st, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

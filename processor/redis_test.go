package processor_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/domain"
	dlerrors "github.com/dlockgo/dlock/errors"
	"github.com/dlockgo/dlock/internal/redistest"
	"github.com/dlockgo/dlock/processor"
)

var srv *redistest.Server

func TestMain(m *testing.M) {
	os.Exit(redistest.Main(m, func(s *redistest.Server) { srv = s }))
}

// backends runs f on the shared server and on a fresh miniredis, so the scripts are known to
// behave the same on both.
func backends(t *testing.T, f func(t *testing.T, c *redis.Client)) {
	t.Run("server", func(t *testing.T) {
		c := srv.Client()
		defer c.Close()
		f(t, c)
	})
	t.Run("miniredis", func(t *testing.T) {
		m := miniredis.RunT(t)
		c := redis.NewClient(&redis.Options{Addr: m.Addr()})
		defer c.Close()
		f(t, c)
	})
}

func cfg(t *testing.T, target string) domain.DLockConfig {
	c, err := domain.NewDLockConfig("PROC", target+"-"+t.Name(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestNilClient(t *testing.T) {
	if _, err := processor.NewRedisLockProcessor(nil, processor.Options{Publish: true}); !errors.Is(err, dlerrors.ErrInvalidConfig) {
		t.Fatalf("err = %v, want ErrInvalidConfig", err)
	}
}

func TestLifecycle(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		p, _ := processor.NewRedisLockProcessor(c, processor.Options{Publish: true, Mark: "p1"})
		lc := cfg(t, "life")
		a := &domain.DLockEntity{Locker: "a"}
		b := &domain.DLockEntity{Locker: "b"}

		if free, err := p.IsFree(ctx, lc); err != nil || !free {
			t.Fatalf("IsFree = %v, %v; want true", free, err)
		}
		if err := p.Lock(ctx, a, lc, true); err != nil {
			t.Fatal(err)
		}
		if a.Token == 0 {
			t.Fatal("no fencing token")
		}
		if err := p.Lock(ctx, b, lc, true); !errors.Is(err, dlerrors.ErrOptimisticLocking) {
			t.Fatalf("second Lock err = %v, want ErrOptimisticLocking", err)
		}
		if e, err := p.Load(ctx, lc); err != nil || e == nil || e.Locker != "a" || e.Status != domain.StatusProcessing {
			t.Fatalf("Load = %+v, %v", e, err)
		}
		if free, _ := p.IsFree(ctx, lc); free {
			t.Fatal("IsFree on a held key")
		}
		if err := p.ExpandLease(ctx, b, lc); !errors.Is(err, dlerrors.ErrOptimisticLocking) {
			t.Fatalf("expand by non-owner err = %v", err)
		}
		if err := p.Unlock(ctx, b, lc); !errors.Is(err, dlerrors.ErrOptimisticLocking) {
			t.Fatalf("unlock by non-owner err = %v", err)
		}
		if err := p.ExpandLease(ctx, a, lc); err != nil {
			t.Fatal(err)
		}
		if ttl := c.PTTL(ctx, lc.UniqueKey()).Val(); ttl <= 0 || ttl > time.Second {
			t.Fatalf("PTTL after expand = %v", ttl)
		}
		if err := p.Unlock(ctx, a, lc); err != nil {
			t.Fatal(err)
		}
		if e, err := p.Load(ctx, lc); err != nil || e != nil {
			t.Fatalf("Load after unlock = %+v, %v", e, err)
		}
		if err := p.Unlock(ctx, a, lc); !errors.Is(err, dlerrors.ErrOptimisticLocking) {
			t.Fatalf("second unlock err = %v", err)
		}
		if err := p.ExpandLease(ctx, a, lc); !errors.Is(err, dlerrors.ErrOptimisticLocking) {
			t.Fatalf("expand after unlock err = %v", err)
		}
		if err := p.Lock(ctx, b, lc, true); err != nil || b.Token <= a.Token {
			t.Fatalf("relock: err %v, token %d after %d", err, b.Token, a.Token)
		}
	})
}

func TestTokensIncreaseWhenCounterIsLost(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		p, _ := processor.NewRedisLockProcessor(c, processor.Options{})
		lc := cfg(t, "fence")
		var last uint64
		for i := 0; i < 50; i++ {
			e := &domain.DLockEntity{Locker: "x"}
			if err := p.Lock(ctx, e, lc, false); err != nil {
				t.Fatal(err)
			}
			if e.Token <= last {
				t.Fatalf("token %d after %d", e.Token, last)
			}
			last = e.Token
			if err := p.Unlock(ctx, e, lc); err != nil {
				t.Fatal(err)
			}
			if i%10 == 9 { // as if Redis had restarted empty
				c.Del(ctx, processor.FenceKey(lc))
			}
		}
	})
}

func TestUnlockPublishes(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		lc := cfg(t, "pub")
		ps := c.Subscribe(ctx, processor.ReleaseChannel(lc))
		defer ps.Close()
		if _, err := ps.Receive(ctx); err != nil { // subscription confirmation
			t.Fatal(err)
		}
		p, _ := processor.NewRedisLockProcessor(c, processor.Options{Publish: true, Mark: "p1"})
		e := &domain.DLockEntity{Locker: "pub-locker"}
		if err := p.Lock(ctx, e, lc, false); err != nil {
			t.Fatal(err)
		}
		if err := p.Unlock(ctx, e, lc); err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		msg, err := ps.ReceiveMessage(rctx)
		if err != nil {
			t.Fatal(err)
		}
		if locker, ok := processor.ParseMessage(msg.Payload); !ok || locker != "pub-locker" {
			t.Fatalf("message %q", msg.Payload)
		}
	})
}

func TestRedisDown(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	p, _ := processor.NewRedisLockProcessor(c, processor.Options{Publish: true, Mark: "p1"})
	lc := cfg(t, "down")
	err := p.Lock(context.Background(), &domain.DLockEntity{Locker: "x"}, lc, false)
	var pe *dlerrors.RedisProcessError
	if !errors.As(err, &pe) || pe.Op != "lock" || pe.Key != lc.UniqueKey() || pe.Err == nil {
		t.Fatalf("err = %#v, want RedisProcessError naming op and key", err)
	}
}

func TestSideKeysShareTheSlot(t *testing.T) {
	for _, key := range []string{"DLOCK_T_order 42", "DLOCK_T_{user}7", "DLOCK_T_{x"} {
		lc := key
		fence := domain.SideKey(lc, "fence")
		if redisSlot(fence) != redisSlot(lc) {
			t.Errorf("%q and %q hash to different slots", lc, fence)
		}
	}
}

// redisSlot is the Redis Cluster hash slot (CRC16 of the hash tag, mod 16384).
func redisSlot(key string) uint16 {
	for i := 0; i < len(key); i++ {
		if key[i] == '{' {
			for j := i + 1; j < len(key); j++ {
				if key[j] == '}' {
					if j > i+1 {
						key = key[i+1 : j]
					}
					break
				}
			}
			break
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}

func TestHandOver(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		p1, _ := processor.NewRedisLockProcessor(c, processor.Options{Publish: true, Mark: "p1"})
		p2, _ := processor.NewRedisLockProcessor(c, processor.Options{Publish: true, Mark: "p2"})
		lc := cfg(t, "handover")
		a, b, x := &domain.DLockEntity{Locker: "p1-1"}, &domain.DLockEntity{Locker: "p1-2"}, &domain.DLockEntity{Locker: "p1-3"}
		if err := p1.Lock(ctx, a, lc, true); err != nil {
			t.Fatal(err)
		}
		long, _ := lc.WithLease(30 * time.Second)
		if err := p1.HandOver(ctx, a, b, long, true); err != nil || b.Token <= a.Token || b.Lease != long.Lease() {
			t.Fatalf("hand-over: %v, token %d after %d, lease %v", err, b.Token, a.Token, b.Lease)
		}
		if v := c.Get(ctx, lc.UniqueKey()).Val(); v != "p1-2" {
			t.Fatalf("key holds %q after the hand-over", v)
		}
		if ttl := c.PTTL(ctx, lc.UniqueKey()).Val(); ttl <= lc.Lease() {
			t.Fatalf("PTTL %v after a hand-over with a 30 s lease", ttl)
		}
		if err := p1.HandOver(ctx, &domain.DLockEntity{Locker: "p1-9"}, x, lc, false); !errors.Is(err, dlerrors.ErrOptimisticLocking) {
			t.Fatalf("hand-over by a locker that does not hold the key: %v", err)
		}
		// A's hand-over sent again: A is settled (handed over), and the key holds b, so it
		// answers as a repeat, never as a second hand-over.
		if err := p1.HandOver(ctx, a, x, lc, false); err == nil {
			t.Fatal("a settled holder handed the key over again")
		}
		if v := c.Get(ctx, lc.UniqueKey()).Val(); v != "p1-2" {
			t.Fatalf("key holds %q after a repeated hand-over", v)
		}
		// Our own mark does not make us yield.
		if err := p1.Lock(ctx, x, lc, true); !errors.Is(err, dlerrors.ErrOptimisticLocking) {
			t.Fatal(err)
		}
		if err := p1.HandOver(ctx, b, x, lc, true); err != nil {
			t.Fatalf("hand-over with only our own mark: %v", err)
		}
		// Another process's probe (or failed attempt) does: the key is deleted for it to take.
		if free, err := p2.IsFree(ctx, lc); free || err != nil {
			t.Fatalf("IsFree on a held key: %v %v", free, err)
		}
		if mark := c.Get(ctx, processor.WantKey(lc)).Val(); mark != "p2" {
			t.Fatalf("waiting mark %q, want p2's", mark)
		}
		y := &domain.DLockEntity{Locker: "p1-4"}
		if err := p1.HandOver(ctx, x, y, lc, false); err != nil {
			t.Fatalf("hand-over without yield: %v", err)
		}
		z := &domain.DLockEntity{Locker: "p1-5"}
		if err := p1.HandOver(ctx, y, z, lc, true); !errors.Is(err, processor.ErrYielded) {
			t.Fatalf("hand-over with another process waiting: %v", err)
		}
		if v := c.Get(ctx, lc.UniqueKey()).Val(); v != "reserved|p2" {
			t.Fatalf("the key holds %q after the yield, want a reservation for p2", v)
		}
		if v := c.Get(ctx, processor.WantKey(lc)).Val(); v != "p1" {
			t.Fatalf("the mark holds %q after the yield, want the yielding process's", v)
		}
		if ttl := c.PTTL(ctx, lc.UniqueKey()).Val(); ttl <= 0 || ttl > processor.ReserveTTL(lc) {
			t.Fatalf("reservation PTTL %v", ttl)
		}
		// Nobody else can take it, the yielding process included; a release of the old
		// locker does not touch it.
		p3, _ := processor.NewRedisLockProcessor(c, processor.Options{Publish: true, Mark: "p3"})
		for _, q := range []*processor.RedisLockProcessor{p1, p3} {
			if err := q.Lock(ctx, &domain.DLockEntity{Locker: "px-9"}, lc, false); !errors.Is(err, dlerrors.ErrOptimisticLocking) {
				t.Fatalf("another process took a reservation: %v", err)
			}
		}
		_ = p1.Unlock(ctx, y, lc) // settled by the yield already: answers as a repeat
		if v := c.Get(ctx, lc.UniqueKey()).Val(); v != "reserved|p2" {
			t.Fatalf("a release of the yielding locker left %q", v)
		}
		if free, err := p2.IsFree(ctx, lc); !free || err != nil {
			t.Fatalf("the reserved process's probe: %v %v", free, err)
		}
		// The waiting process takes it with its own attempt (a TryLock too), which serves its
		// mark; the lease is its own.
		w := &domain.DLockEntity{Locker: "p2-1"}
		if err := p2.Lock(ctx, w, lc, false); err != nil || w.Token <= b.Token {
			t.Fatalf("the waiting process's attempt: %v, token %d", err, w.Token)
		}
		if v := c.Get(ctx, lc.UniqueKey()).Val(); v != "p2-1" {
			t.Fatalf("key holds %q", v)
		}
		if ttl := c.PTTL(ctx, lc.UniqueKey()).Val(); ttl <= processor.ReserveTTL(lc) {
			t.Fatalf("PTTL %v after taking a reservation, want the taker's lease", ttl)
		}
		if v := c.Get(ctx, processor.WantKey(lc)).Val(); v != "p1" {
			t.Fatalf("mark %q after p2 took the key, want p1's (it waits to get the key back)", v)
		}
	})
}

// Every script that writes may run twice (a client sends it again after a lost reply) or late
// (after its acquisition was released or given back): neither may leave the key to nobody.
func TestScriptsRunTwiceOrLate(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		p, _ := processor.NewRedisLockProcessor(c, processor.Options{Publish: true, Mark: "p1-"})
		lc := cfg(t, "twice")
		key, done := lc.UniqueKey(), processor.DoneKey(lc, "p1-")

		// A lock sent again after its reply was lost: ours, with a new token.
		a := &domain.DLockEntity{Locker: "p1-1"}
		if err := p.Lock(ctx, a, lc, true); err != nil {
			t.Fatal(err)
		}
		again := &domain.DLockEntity{Locker: "p1-1"}
		if err := p.Lock(ctx, again, lc, true); err != nil || again.Token <= a.Token {
			t.Fatalf("a lock sent twice: %v, token %d after %d", err, again.Token, a.Token)
		}
		// A hand-over sent twice: the second finds the new locker and answers as the first.
		b := &domain.DLockEntity{Locker: "p1-2"}
		if err := p.HandOver(ctx, a, b, lc, false); err != nil {
			t.Fatal(err)
		}
		b2 := &domain.DLockEntity{Locker: "p1-2"}
		if err := p.HandOver(ctx, a, b2, lc, false); err != nil || b2.Token <= b.Token {
			t.Fatalf("a hand-over sent twice: %v, token %d after %d", err, b2.Token, b.Token)
		}
		// The hand-over settled a: a late copy of its lock fails.
		if err := p.Lock(ctx, &domain.DLockEntity{Locker: "p1-1"}, lc, true); !errors.Is(err, dlerrors.ErrOptimisticLocking) {
			t.Fatalf("a late lock of a handed-over acquisition: %v", err)
		}
		// Releasing b settles it: a copy of its lock arriving later fails, twice over.
		if err := p.Unlock(ctx, b, lc); err != nil {
			t.Fatal(err)
		}
		if v := c.Get(ctx, done).Val(); v != "2" {
			t.Fatalf("settled mark %q after releasing p1-2", v)
		}
		// A release sent again after its reply was lost says so, not that the lock was lost.
		if err := p.Unlock(ctx, b, lc); err != nil {
			t.Fatalf("a release sent twice: %v", err)
		}
		for i := 0; i < 2; i++ {
			if err := p.Lock(ctx, &domain.DLockEntity{Locker: "p1-2"}, lc, true); !errors.Is(err, dlerrors.ErrOptimisticLocking) {
				t.Fatalf("late lock %d of a released acquisition: %v", i, err)
			}
		}
		// A give-back of an attempt not yet run (Unlock finds no key) settles it too.
		if err := p.Unlock(ctx, &domain.DLockEntity{Locker: "p1-5"}, lc); !errors.Is(err, dlerrors.ErrOptimisticLocking) {
			t.Fatalf("give-back of an attempt not yet run: %v", err)
		}
		if err := p.Lock(ctx, &domain.DLockEntity{Locker: "p1-5"}, lc, true); !errors.Is(err, dlerrors.ErrOptimisticLocking) {
			t.Fatalf("late lock after its give-back: %v", err)
		}
		if c.Exists(ctx, key).Val() != 0 {
			t.Fatal("a late lock took the key")
		}
		// Another owner is not held back by p1's mark; a newer p1 acquisition is not either.
		if err := p.Lock(ctx, &domain.DLockEntity{Locker: "p2-1"}, lc, false); err != nil {
			t.Fatalf("another owner: %v", err)
		}
		if err := p.Unlock(ctx, &domain.DLockEntity{Locker: "p2-1"}, lc); err != nil {
			t.Fatal(err)
		}
		d := &domain.DLockEntity{Locker: "p1-6"}
		if err := p.Lock(ctx, d, lc, false); err != nil {
			t.Fatalf("a newer acquisition: %v", err)
		}
		// A hand-over whose new locker was given back (its reply was lost) fails if it comes
		// late, and leaves the holder in place.
		e := &domain.DLockEntity{Locker: "p1-7"}
		_ = p.Unlock(ctx, e, lc)
		if err := p.HandOver(ctx, d, e, lc, false); !errors.Is(err, dlerrors.ErrOptimisticLocking) {
			t.Fatalf("late hand-over: %v", err)
		}
		if v := c.Get(ctx, key).Val(); v != "p1-6" {
			t.Fatalf("key holds %q after a late hand-over, want the holder's", v)
		}
		// A TryLock-style attempt (no wait) leaves no mark.
		if err := p.Lock(ctx, &domain.DLockEntity{Locker: "p2-2"}, lc, false); !errors.Is(err, dlerrors.ErrOptimisticLocking) {
			t.Fatal(err)
		}
		if c.Exists(ctx, processor.WantKey(lc)).Val() != 0 {
			t.Fatal("an attempt without wait left a mark")
		}
		if err := p.Unlock(ctx, d, lc); err != nil {
			t.Fatalf("the holder's release: %v", err)
		}
	})
}

func TestSplitLocker(t *testing.T) {
	for _, tc := range []struct{ in, owner, seq string }{
		{"10.0.0.1-42-abcdef-17", "10.0.0.1-42-abcdef-", "17"},
		{"p1-0", "p1-", "0"},
		{"p1-x", "p1-x", ""},
		{"p1-", "p1-", ""},
		{"plain", "plain", ""},
		{"p1-1234567890123456", "p1-1234567890123456", ""}, // too long for an exact number in Lua
	} {
		if owner, seq := processor.SplitLocker(tc.in); owner != tc.owner || seq != tc.seq {
			t.Errorf("SplitLocker(%q) = %q, %q; want %q, %q", tc.in, owner, seq, tc.owner, tc.seq)
		}
	}
}

// Nothing stays beyond a few leases: the fencing counter lives two leases after the last
// acquisition or renewal, a mark half a lease, a settled mark two leases.
func TestSideKeysExpire(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		p, _ := processor.NewRedisLockProcessor(c, processor.Options{Publish: true, Mark: "p1-"})
		q, _ := processor.NewRedisLockProcessor(c, processor.Options{Publish: true, Mark: "p2-"})
		lc := cfg(t, "expire")
		a := &domain.DLockEntity{Locker: "p1-1"}
		if err := p.Lock(ctx, a, lc, true); err != nil {
			t.Fatal(err)
		}
		if err := q.Lock(ctx, &domain.DLockEntity{Locker: "p2-1"}, lc, true); !errors.Is(err, dlerrors.ErrOptimisticLocking) {
			t.Fatal(err)
		}
		if err := p.Unlock(ctx, a, lc); err != nil {
			t.Fatal(err)
		}
		for k, limit := range map[string]time.Duration{
			processor.FenceKey(lc):       processor.FenceTTL(lc),
			processor.WantKey(lc):        processor.MarkTTL(lc),
			processor.DoneKey(lc, "p1-"): processor.DoneTTL(lc),
		} {
			if ttl := c.PTTL(ctx, k).Val(); ttl <= 0 || ttl > limit {
				t.Errorf("%s: PTTL %v, want in (0, %v]", k, ttl, limit)
			}
		}
		if processor.FenceTTL(lc) > 2*lc.Lease() || processor.DoneTTL(lc) > 2*lc.Lease() || processor.MarkTTL(lc) > lc.Lease() {
			t.Error("a side key outlives two leases")
		}
	})
}

func TestParseMessage(t *testing.T) {
	for _, tc := range []struct {
		in     string
		locker string
		ok     bool
	}{
		{"R|a-1", "a-1", true},
		{"R|", "", true},
		{"G|b-2|17", "", false},
		{"a-1", "", false},
	} {
		locker, ok := processor.ParseMessage(tc.in)
		if locker != tc.locker || ok != tc.ok {
			t.Errorf("ParseMessage(%q) = %q %v", tc.in, locker, ok)
		}
	}
}

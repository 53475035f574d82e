package processor_test

import (
	"context"
	"errors"
	"os"
	"strings"
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
		p, _ := processor.NewRedisLockProcessor(c, processor.Options{Publish: true, Process: "p1"})
		lc := cfg(t, "life")
		a := &domain.DLockEntity{Locker: "a"}
		b := &domain.DLockEntity{Locker: "b"}

		if free, err := p.IsFree(ctx, lc); err != nil || !free {
			t.Fatalf("IsFree = %v, %v; want true", free, err)
		}
		if err := p.Lock(ctx, a, lc); err != nil {
			t.Fatal(err)
		}
		if a.Token == 0 {
			t.Fatal("no fencing token")
		}
		if err := p.Lock(ctx, b, lc); !errors.Is(err, dlerrors.ErrOptimisticLocking) {
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
		if err := p.Lock(ctx, b, lc); err != nil || b.Token <= a.Token {
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
			if err := p.Lock(ctx, e, lc); err != nil {
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
		p, _ := processor.NewRedisLockProcessor(c, processor.Options{Publish: true, Process: "p1"})
		e := &domain.DLockEntity{Locker: "pub-locker"}
		if err := p.Lock(ctx, e, lc); err != nil {
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
		if locker, _, granted, ok := processor.ParseMessage(msg.Payload); !ok || granted || locker != "pub-locker" {
			t.Fatalf("message %q", msg.Payload)
		}
	})
}

func TestRedisDown(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	p, _ := processor.NewRedisLockProcessor(c, processor.Options{Publish: true, Process: "p1"})
	lc := cfg(t, "down")
	err := p.Lock(context.Background(), &domain.DLockEntity{Locker: "x"}, lc)
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
		p1, _ := processor.NewRedisLockProcessor(c, processor.Options{Publish: true, Process: "p1"})
		p2, _ := processor.NewRedisLockProcessor(c, processor.Options{Publish: true, Process: "p2"})
		lc := cfg(t, "handover")
		a, b, x := &domain.DLockEntity{Locker: "p1-a"}, &domain.DLockEntity{Locker: "p1-b"}, &domain.DLockEntity{Locker: "p1-x"}
		if err := p1.Lock(ctx, a, lc); err != nil {
			t.Fatal(err)
		}
		if err := p1.HandOver(ctx, a, b, lc, true); err != nil || b.Token <= a.Token {
			t.Fatalf("hand-over: %v, token %d after %d", err, b.Token, a.Token)
		}
		if v := c.Get(ctx, lc.UniqueKey()).Val(); v != "p1-b" {
			t.Fatalf("key holds %q after the hand-over", v)
		}
		if err := p1.HandOver(ctx, a, x, lc, false); !errors.Is(err, dlerrors.ErrOptimisticLocking) {
			t.Fatalf("hand-over by a former holder: %v", err)
		}
		// Our own mark does not make us yield.
		if err := p1.Lock(ctx, x, lc); !errors.Is(err, dlerrors.ErrOptimisticLocking) {
			t.Fatal(err)
		}
		if err := p1.HandOver(ctx, b, x, lc, true); err != nil {
			t.Fatalf("hand-over with only our own mark: %v", err)
		}
		// Another process's probe (or failed attempt) does: the lock is granted to its mark.
		if free, err := p2.IsFree(ctx, lc); free || err != nil {
			t.Fatalf("IsFree on a held key: %v %v", free, err)
		}
		mark := c.Get(ctx, processor.WantKey(lc)).Val()
		if !strings.HasPrefix(mark, "p2w") {
			t.Fatalf("waiting mark %q, want a p2 locker", mark)
		}
		y := &domain.DLockEntity{Locker: "p1-y"}
		if err := p1.HandOver(ctx, x, y, lc, false); err != nil {
			t.Fatalf("hand-over without yield: %v", err)
		}
		z := &domain.DLockEntity{Locker: "p1-z"}
		if err := p1.HandOver(ctx, y, z, lc, true); !errors.Is(err, processor.ErrYielded) {
			t.Fatalf("hand-over with another process waiting: %v", err)
		}
		if v := c.Get(ctx, lc.UniqueKey()).Val(); v != mark || c.Exists(ctx, processor.WantKey(lc)).Val() != 0 {
			t.Fatalf("after the yield the key holds %q, want the grant to %q and no mark", v, mark)
		}
		granted := &domain.DLockEntity{Locker: mark}
		if err := p2.Unlock(ctx, granted, lc); err != nil {
			t.Fatalf("the grantee cannot release: %v", err)
		}
	})
}

func TestUnlockGrantsToTheWaitingMark(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		lc := cfg(t, "grant")
		ps := c.Subscribe(ctx, processor.ReleaseChannel(lc))
		defer ps.Close()
		if _, err := ps.Receive(ctx); err != nil {
			t.Fatal(err)
		}
		p1, _ := processor.NewRedisLockProcessor(c, processor.Options{Publish: true, Process: "p1-"})
		p2, _ := processor.NewRedisLockProcessor(c, processor.Options{Publish: true, Process: "p2-"})
		a := &domain.DLockEntity{Locker: "p1-a"}
		if err := p1.Lock(ctx, a, lc); err != nil {
			t.Fatal(err)
		}
		if err := p2.Lock(ctx, &domain.DLockEntity{Locker: "p2-b"}, lc); !errors.Is(err, dlerrors.ErrOptimisticLocking) {
			t.Fatal(err)
		}
		if err := p1.Unlock(ctx, a, lc); err != nil {
			t.Fatal(err)
		}
		grantee := c.Get(ctx, lc.UniqueKey()).Val()
		if !strings.HasPrefix(grantee, "p2-w") {
			t.Fatalf("key holds %q after the release, want a grant to p2's mark", grantee)
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		msg, err := ps.ReceiveMessage(rctx)
		if err != nil {
			t.Fatal(err)
		}
		locker, token, granted, ok := processor.ParseMessage(msg.Payload)
		if !ok || !granted || locker != grantee || token <= a.Token {
			t.Fatalf("message %q", msg.Payload)
		}
		// A grantee that missed the message takes the grant with Lock.
		b := &domain.DLockEntity{Locker: "p2-b2"}
		if err := p2.Lock(ctx, b, lc); err != nil || b.Locker != grantee || b.Token != token {
			t.Fatalf("taking the grant: %v, %+v", err, b)
		}
		// A mark withdrawn is not granted to.
		if err := p1.Lock(ctx, &domain.DLockEntity{Locker: "p1-c"}, lc); !errors.Is(err, dlerrors.ErrOptimisticLocking) {
			t.Fatal(err)
		}
		if err := p1.Unmark(ctx, lc); err != nil {
			t.Fatal(err)
		}
		if err := p2.Unlock(ctx, b, lc); err != nil {
			t.Fatal(err)
		}
		if c.Exists(ctx, lc.UniqueKey()).Val() != 0 {
			t.Fatal("granted to a withdrawn mark")
		}
	})
}

func TestParseMessage(t *testing.T) {
	for _, tc := range []struct {
		in      string
		locker  string
		token   uint64
		granted bool
		ok      bool
	}{
		{"R|a-1", "a-1", 0, false, true},
		{"G|b-2|17", "b-2", 17, true, true},
		{"G|b|2|17", "b|2", 17, true, true},
		{"G|b-2", "", 0, false, false},
		{"G|b-2|x", "", 0, false, false},
		{"a-1", "", 0, false, false},
	} {
		locker, token, granted, ok := processor.ParseMessage(tc.in)
		if locker != tc.locker || token != tc.token || granted != tc.granted || ok != tc.ok {
			t.Errorf("ParseMessage(%q) = %q %d %v %v", tc.in, locker, token, granted, ok)
		}
	}
}

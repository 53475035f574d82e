package dlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/internal/redistest"
)

// WithReplicaAck: with the replica up every acquisition, hand-over and renewal is acknowledged;
// with it gone, TryLock reports ErrNotReplicated and leaves the key free, Lock keeps waiting,
// and a holder whose renewals go unacknowledged loses the lock when its lease runs out.
func TestReplicaAck(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	c, replica := masterAndReplica(t, ctx)

	g := ackGen(t, c)
	l, _ := g.Gen("ACK", target(t))

	// replica up: acquisitions, a local hand-over and renewals are acknowledged
	owned, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		o, err := l.Lock(ctx)
		if err == nil {
			time.Sleep(time.Second) // renewed, acknowledged
			if cause := context.Cause(o); cause != nil {
				err = cause
			} else {
				err = l.Unlock(o)
			}
		}
		got <- err
	}()
	waitFor(t, func() bool { return g.Waiters(l.Config().UniqueKey()) })
	if err := l.Unlock(owned); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("with the replica up: %v", err)
	}

	// a holder whose renewals stop being acknowledged loses the lock with its lease
	owned, err = l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	replica.Kill()
	select {
	case <-owned.Done():
		if !errors.Is(context.Cause(owned), dlock.ErrLockLost) {
			t.Fatalf("cause %v", context.Cause(owned))
		}
	case <-ctx.Done():
		t.Fatal("no loss with unacknowledged renewals")
	}
	if err := l.Unlock(owned); !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("Unlock after loss: %v", err)
	}

	// replica gone: TryLock fails with ErrNotReplicated and leaves the key free (once the
	// lost holding's key has been given back, in the background)
	waitFor(t, func() bool { s, err := l.State(ctx); return err == nil && !s.Held() })
	_, ok, err := l.TryLock(ctx)
	var pe *dlock.RedisProcessError
	if ok || !errors.Is(err, dlock.ErrNotReplicated) || !errors.As(err, &pe) {
		t.Fatalf("TryLock without the replica: ok %v err %v", ok, err)
	}
	// one right after it, with that attempt's give-back maybe still on its way, is refused
	// the same way, not answered held by the attempt given back
	if _, ok, err := l.TryLock(ctx); ok || !errors.Is(err, dlock.ErrNotReplicated) {
		t.Fatalf("TryLock right after one refused for the replicas: ok %v err %v", ok, err)
	}
	waitFor(t, func() bool { s, err := l.State(ctx); return err == nil && !s.Held() })
	// Lock keeps trying until its deadline, and says why
	wctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if _, err := l.Lock(wctx); !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, dlock.ErrNotReplicated) {
		t.Fatalf("Lock without the replica: %v", err)
	}
	// a deadline shorter than the replicas' timeout ends the call while WAIT waits, after the
	// script took the key on the master: the call fails, and the attempt is given back (within
	// waitFor's bound, well before its lease could end)
	l, _ = g.GenWithLease("ACK", target(t), time.Minute)
	for _, try := range []bool{false, true} {
		sctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		if try {
			_, ok, err := l.TryLock(sctx)
			if ok || !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("TryLock with a deadline below the replicas' timeout: ok %v err %v", ok, err)
			}
		} else if _, err := l.Lock(sctx); !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Lock with a deadline below the replicas' timeout: %v", err)
		}
		cancel()
		waitFor(t, func() bool { s, err := l.State(ctx); return err == nil && !s.Held() })
	}
}

// masterAndReplica starts a master and its replica, and returns a client of the master and
// the replica (both closed when t ends).
func masterAndReplica(t *testing.T, ctx context.Context) (*redis.Client, *redistest.Server) {
	t.Helper()
	srv.NeedReal(t)
	master, err := redistest.StartReal()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(master.Close)
	replica, err := redistest.StartReal()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(replica.Close)
	rc := replica.Client()
	t.Cleanup(func() { rc.Close() })
	c := master.Client()
	t.Cleanup(func() { c.Close() })
	if err := c.ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err(); err != nil {
		t.Fatal(err)
	}
	host, port, _ := strings.Cut(master.Addr, ":")
	if err := rc.Do(ctx, "replicaof", host, port).Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		info, _ := c.Info(ctx, "replication").Result()
		return strings.Contains(info, "connected_slaves:1") && strings.Contains(info, "state=online")
	})
	return c, replica
}

// ackGen returns a Generator on c whose writes wait for one replica (200 ms at most), with a
// 600 ms lease, closed with the test.
// WithReplicaAck and a key granted by another process's release (whose script waits for no
// replica): the grantee holds it only once its own renewal of it is acknowledged. With the
// replica up a cross-process hand-off works; with it gone the waiter is not handed an Owner
// of a write no replica has — its Lock goes on waiting, and gives up with the replicas'
// failure.
func TestReplicaAckGrantFromAnotherProcess(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	c, replica := masterAndReplica(t, ctx)
	mk := func() *dlock.Generator {
		g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(4*time.Second), dlock.WithReplicaAck(1, 200*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { g.Close(context.Background()) })
		return g
	}
	ga, gb := mk(), mk()
	tg := target(t)
	la, _ := ga.Gen("ACK", tg)
	lb, _ := gb.Gen("ACK", tg)
	handOff := func(wait time.Duration) (*dlock.Owner, error) {
		owned, err := la.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		got := make(chan error, 1)
		var ob *dlock.Owner
		go func() { o, err := lb.Lock(wctx); ob = o; got <- err }()
		waitFor(t, func() bool { s, _ := la.State(ctx); return len(s.Waiting) == 1 })
		if wait < 10*time.Second { // (the replica goes as the other process waits in line)
			replica.Kill()
			waitFor(t, func() bool { info, _ := c.Info(ctx, "replication").Result(); return !strings.Contains(info, "slave0:") })
		}
		if err := la.Unlock(owned); err != nil {
			t.Fatal(err)
		}
		err = recv(t, got, "the waiter's Lock")
		return ob, err
	}
	ob, err := handOff(30 * time.Second)
	if err != nil {
		t.Fatalf("hand-off with the replica up: %v", err)
	}
	if err := ob.Unlock(); err != nil {
		t.Fatal(err)
	}
	if ob, err := handOff(3 * time.Second); err == nil || !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, dlock.ErrNotReplicated) {
		t.Fatalf("the waiter's Lock after a release with no replica = %v, %v; want ErrNotObtained and ErrNotReplicated (no Owner of a write no replica acknowledged)", ob, err)
	}
}

func ackGen(t *testing.T, c *redis.Client) *dlock.Generator {
	t.Helper()
	g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(time.Second), dlock.WithReplicaAck(1, 200*time.Millisecond)) // (a renewal has 250 ms to spare on a loaded machine)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close(context.Background()) })
	return g
}

// WithReplicaAck on the read-write lock and the semaphore: their renewals are acknowledged
// too, so a holding whose renewals no replica acknowledges is lost when its lease runs out, as
// the mutex's is (the holder is told before its key can expire on a promoted replica that
// missed the renewals). A read-hold's, a write-hold's and a permit's renewals were sent
// without WAIT (only takes and token refills were acknowledged): with the replica gone they
// were held on and on, and a SENTINEL FAILOVER could give them a second owner as without the
// option.
func TestReplicaAckFamily(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	c, replica := masterAndReplica(t, ctx)
	g := ackGen(t, c)
	rwR, _ := g.GenRW("ACK", target(t)+"-r")
	rwW, _ := g.GenRW("ACK", target(t)+"-w")
	sem, _ := g.GenSemaphore("ACK", target(t)+"-s", 2)
	var owners []*dlock.Owner
	for _, take := range []func(context.Context) (*dlock.Owner, error){
		rwR.RLock, rwW.Lock, func(ctx context.Context) (*dlock.Owner, error) { return sem.Acquire(ctx, 1) },
	} {
		o, err := take(ctx)
		if err != nil {
			t.Fatal(err)
		}
		owners = append(owners, o)
	}
	time.Sleep(time.Second) // renewed, acknowledged
	for i, o := range owners {
		if cause := context.Cause(o); cause != nil {
			t.Fatalf("holding %d with the replica up: %v", i, cause)
		}
	}
	replica.Kill()
	for i, o := range owners {
		select {
		case <-o.Done():
			if !errors.Is(context.Cause(o), dlock.ErrLockLost) {
				t.Fatalf("holding %d: cause %v", i, context.Cause(o))
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("holding %d kept with its renewals unacknowledged", i)
		}
		if err := o.Unlock(); !errors.Is(err, dlock.ErrLockLost) {
			t.Fatalf("holding %d: Unlock after the loss: %v", i, err)
		}
	}
	// with the replica gone every try is refused for it, one right after another too (the
	// attempt of the first given back, maybe still on its way)
	for i, try := range []func(context.Context) (*dlock.Owner, bool, error){
		rwR.TryRLock, rwW.TryLock, func(ctx context.Context) (*dlock.Owner, bool, error) { return sem.TryAcquire(ctx, 2) },
	} {
		for n := range 2 {
			if _, ok, err := try(ctx); ok || !errors.Is(err, dlock.ErrNotReplicated) {
				t.Fatalf("kind %d, try %d without the replica: ok %v err %v", i, n, ok, err)
			}
		}
	}
}

// WithReplicaAck with the replicas refusing to acknowledge: every goroutine of the process
// that gives up names the refusal, not only the one its process's attempt asked for. The
// others wait behind that attempt (the cohort: its failures are theirs), and Lock's doc says
// that a wait that ends while Redis fails wraps the last failure. (No replica here: WAIT
// counts none, as with replicas that stopped acknowledging.)
func TestReplicaAckEveryWaiterOfAProcessNamesTheRefusal(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	// (a 3 s lease: a take is bounded by a third of it, which a stall of the process must not
	// outrun, or the last failure a waiter names is that take's, unanswered)
	g, _ := newGen(t, dlock.WithDefaultLease(3*time.Second), dlock.WithReplicaAck(1, 50*time.Millisecond))
	rw, _ := g.GenRW("ACK", target(t)+"-r")
	rww, _ := g.GenRW("ACK", target(t)+"-w")
	sem, _ := g.GenSemaphore("ACK", target(t)+"-s", 3)
	mu, _ := g.Gen("ACK", target(t)+"-m")
	held := func(s dlock.SharedState, err error) bool { return err == nil && len(s.Holds) > 0 }
	for _, c := range []struct {
		name string
		take func(context.Context) error
		held func() bool // the first waiter's attempt ran in Redis (unacknowledged)
	}{
		{"read", func(ctx context.Context) error { _, err := rw.RLock(ctx); return err }, func() bool { return held(rw.State(ctx)) }},
		{"write", func(ctx context.Context) error { _, err := rww.Lock(ctx); return err }, func() bool { return held(rww.State(ctx)) }},
		{"permits", func(ctx context.Context) error { _, err := sem.Acquire(ctx, 2); return err }, func() bool { return held(sem.State(ctx)) }},
		{"mutex", func(ctx context.Context) error { _, err := mu.Lock(ctx); return err }, func() bool {
			s, err := mu.State(ctx)
			return err == nil && s.Held()
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			// the first waits longest: the others wait behind its attempt all their wait
			first := make(chan error, 1)
			fctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			go func() { first <- c.take(fctx) }()
			waitFor(t, c.held)
			others := make(chan error, 2)
			for range 2 {
				go func() {
					octx, cancel := context.WithTimeout(ctx, time.Second)
					defer cancel()
					others <- c.take(octx)
				}()
			}
			for i := range 2 {
				if err := recv(t, others, "a waiter's Lock"); !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, dlock.ErrNotReplicated) {
					t.Errorf("waiter %d of the cohort: %v", i, err)
				}
			}
			if err := recv(t, first, "the first waiter's Lock"); !errors.Is(err, dlock.ErrNotReplicated) {
				t.Errorf("the first waiter: %v", err)
			}
		})
	}
}

// WithReplicaAck and a reader that waits on its process's read-hold, which has less than half
// its lease left and lends to nobody new until renewed: when the replicas stop acknowledging,
// the renewal it waits on fails, and the reader that gives up names that refusal, as a waiter
// behind a take that fails does (Lock's doc: the last Redis failure).
func TestReplicaAckReaderWaitingOnARefusedRenewalNamesIt(t *testing.T) {
	ctx := ctxT(t, 90*time.Second)
	const lease = 4 * time.Second // (the reader gives up long before the holding's lease runs out)
	// The holding is past half its lease, and still held, from half its lease until the lease
	// runs out (its renewals refused): a stall of the test over that whole window (a loaded
	// machine) misses it. Then the test starts again, on new servers.
	for attempt := 1; ; attempt++ {
		c, replica := masterAndReplica(t, ctx)
		g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(lease), dlock.WithReplicaAck(1, 200*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close(context.Background()) //nolint:errcheck
		rw, _ := g.GenRW("ACK", target(t))
		o, err := rw.RLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		replica.Kill()
		stale := false
		waitFor(t, func() bool { // past half its lease: it lends to a new reader only once renewed
			for _, b := range g.SharedBelief(rw.Config().UniqueKey()) {
				if time.Until(b.Until) < lease/2-100*time.Millisecond {
					stale = o.Err() == nil // (SharedBelief lists live holdings)
					return stale
				}
			}
			return o.Err() != nil
		})
		if !stale {
			if attempt == 3 {
				t.Fatalf("the holding ended before it was seen past half its lease, %d times: %v", attempt, context.Cause(o))
			}
			t.Logf("attempt %d: the holding ended before it was seen past half its lease (%v); again", attempt, context.Cause(o))
			continue
		}
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if r, err := rw.RLock(wctx); err == nil {
			t.Fatalf("a reader was lent the holding (held %v) with its renewal refused", rw.HoldCount(r))
		} else if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, dlock.ErrNotReplicated) {
			t.Fatalf("the reader that gave up: %v; want ErrNotObtained naming the refused renewal (ErrNotReplicated)", err)
		}
		if cause := context.Cause(o); cause != nil {
			t.Logf("the holder (a stall of the machine?): %v", cause)
		}
		return
	}
}

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/dlock"
)

// allImpls lists the implementations in the order they are run and drawn.
var allImpls = []string{"dlock", "dlock-poll", "dlock-hold", "tradition", "redislock", "redsync", "dlock-rw", "redisson-rw", "dlock-sem", "redisson-sem", "local-rw", "floor"}

// scenarioImpls lists, for each scenario, the implementations that can run it: the read-write
// scenario needs a lock with a read side (the mutex runs it with its one side, as a baseline),
// the semaphore one a semaphore.
var scenarioImpls = map[string][]string{
	"rw":  {"dlock-rw", "dlock", "redisson-rw", "local-rw"},
	"sem": {"dlock-sem", "redisson-sem"},
}

// ceilings are the rows that are not locks but bounds (local-rw: no Redis; floor: a fair grant
// with none of a lock's safeguards); the plots draw them apart.
var ceilings = []string{"local-rw", "floor"}

// crossOnly are the implementations that run only with one goroutine per process (the cross
// and handoff scenarios): floor, and dlock-hold (dlock with WithHoldOver, which changes
// nothing where a process's goroutines queue for the lock: they pass it among them anyway).
var crossOnly = []string{"floor", "dlock-hold"}

// runs reports whether implementation impl can run scenario sc.
func runs(sc, impl string) bool {
	if own, ok := scenarioImpls[sc]; ok {
		return slices.Contains(own, impl)
	}
	if slices.Contains(crossOnly, impl) {
		return sc == "cross" || sc == "handoff"
	}
	return !slices.Contains(familyOnly, impl)
}

// familyOnly are the implementations that run only the lock family's scenarios.
var familyOnly = []string{"dlock-rw", "redisson-rw", "dlock-sem", "redisson-sem", "local-rw"}

// Locker takes the benchmark's one lock. Each goroutine has its own Locker.
type Locker interface {
	// Lock blocks until it holds the lock or ctx ends, and returns the function that
	// releases it.
	Lock(ctx context.Context) (unlock func() error, err error)
}

// Impl is one implementation set up for one process: it hands out a Locker per goroutine.
type Impl interface {
	// NewLocker returns a Locker for one goroutine.
	NewLocker() Locker
	// Close releases what the implementation holds (not the Redis client).
	Close() error
}

// errRetry marks a Lock failure that the worker retries and counts apart from errors
// (redsync giving up after its tries while the row still runs).
var errRetry = errors.New("lock attempts exhausted; retrying")

// newImpl sets up implementation name over client for locks with the given lease, and dlock's
// with the hand-off limit handOff (0: its default).
func newImpl(name string, client *redis.Client, lease, handOff time.Duration) (Impl, error) {
	switch name {
	case "dlock", "dlock-poll", "dlock-hold":
		opts := []dlock.Option{dlock.WithDefaultLease(lease)}
		if handOff > 0 {
			opts = append(opts, dlock.WithLocalHandOff(handOff))
		}
		if name == "dlock-poll" {
			opts = append(opts, dlock.WithNotifications(false))
		}
		if name == "dlock-hold" {
			opts = append(opts, dlock.WithHoldOver(true))
		}
		g, err := dlock.NewGenerator(client, opts...)
		if err != nil {
			return nil, err
		}
		lk, err := g.Gen("BENCH", "lock")
		if err != nil {
			return nil, err
		}
		return &dlockImpl{g: g, lk: lk}, nil
	case "tradition":
		t := &tradition{client: client, key: "bench:tradition", lease: lease,
			prefix: fmt.Sprintf("%d-%d-", os.Getpid(), time.Now().UnixNano())}
		if err := releaseScript.Load(context.Background(), client).Err(); err != nil {
			return nil, err
		}
		return t, nil
	case "redislock":
		return &redislockImpl{c: redislock.New(client), lease: lease}, nil
	case "redsync":
		return &redsyncImpl{rs: redsync.New(goredis.NewPool(client)), lease: lease}, nil
	case "dlock-rw", "dlock-sem":
		g, err := dlock.NewGenerator(client, dlock.WithDefaultLease(lease))
		if err != nil {
			return nil, err
		}
		if name == "dlock-sem" {
			s, err := g.GenSemaphore("BENCH", "sem", semPermits)
			if err != nil {
				return nil, err
			}
			return &dlockSem{g: g, s: s}, nil
		}
		l, err := g.GenRW("BENCH", "rw")
		if err != nil {
			return nil, err
		}
		return &dlockRW{g: g, l: l}, nil
	case "redisson-rw":
		return newRedissonRW(client, lease)
	case "redisson-sem":
		return newRedissonSem(client, lease)
	case "local-rw":
		return &localRW{}, nil
	case "floor":
		return newFloor(client, lease)
	}
	return nil, fmt.Errorf("unknown implementation %q (want one of %v)", name, allImpls)
}

// dlockImpl is this library: one Generator per process and one handle shared by its
// goroutines.
type dlockImpl struct {
	g  *dlock.Generator
	lk *dlock.DistributedReentrantLock
}

func (d *dlockImpl) NewLocker() Locker { return d }

func (d *dlockImpl) Lock(ctx context.Context) (func() error, error) {
	owned, err := d.lk.Lock(ctx)
	if err != nil {
		return nil, err
	}
	return func() error { return d.lk.Unlock(owned) }, nil
}

func (d *dlockImpl) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return d.g.Close(ctx)
}

// dlockRW is this library's read-write lock: one Generator per process.
type dlockRW struct {
	g *dlock.Generator
	l *dlock.RWLock
}

func (d *dlockRW) NewLocker() Locker { return d }

func (d *dlockRW) Lock(ctx context.Context) (func() error, error) {
	o, err := d.l.Lock(ctx)
	if err != nil {
		return nil, err
	}
	return o.Unlock, nil
}

func (d *dlockRW) RLock(ctx context.Context) (func() error, error) {
	o, err := d.l.RLock(ctx)
	if err != nil {
		return nil, err
	}
	return o.Unlock, nil
}

func (d *dlockRW) Close() error { return closeGen(d.g) }

// localRW is no distributed lock at all: a sync.RWMutex (whose waiting writer holds off new
// readers, as dlock-rw's does) shared by the goroutines of one process. Run in one process
// with every goroutine of a row, it is the row's ceiling: what the mix of reads and writes and
// their holds allow when passing the lock costs nothing.
type localRW struct{ mu sync.RWMutex }

func (l *localRW) NewLocker() Locker { return l }

func (l *localRW) Lock(context.Context) (func() error, error) {
	l.mu.Lock()
	return func() error { l.mu.Unlock(); return nil }, nil
}

func (l *localRW) RLock(context.Context) (func() error, error) {
	l.mu.RLock()
	return func() error { l.mu.RUnlock(); return nil }, nil
}

func (l *localRW) Close() error { return nil }

// dlockSem is this library's semaphore: each acquisition takes one permit.
type dlockSem struct {
	g *dlock.Generator
	s *dlock.Semaphore
}

func (d *dlockSem) NewLocker() Locker { return d }

func (d *dlockSem) Lock(ctx context.Context) (func() error, error) {
	o, err := d.s.Acquire(ctx, 1)
	if err != nil {
		return nil, err
	}
	return o.Unlock, nil
}

func (d *dlockSem) Close() error { return closeGen(d.g) }

func closeGen(g *dlock.Generator) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return g.Close(ctx)
}

// releaseScript deletes the key only if it still holds the caller's value.
var releaseScript = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then
	return redis.call("del", KEYS[1])
end
return 0`)

// tradition is the usual hand-written lock: SET NX PX, a fixed 10 ms sleep between
// attempts, and a compare-and-delete script to release.
type tradition struct {
	client *redis.Client
	key    string
	lease  time.Duration
	prefix string
	seq    atomic.Uint64
}

func (t *tradition) NewLocker() Locker { return t }

func (t *tradition) Lock(ctx context.Context) (func() error, error) {
	val := t.prefix + strconv.FormatUint(t.seq.Add(1), 10)
	for {
		ok, err := t.client.SetNX(ctx, t.key, val, t.lease).Result()
		if err != nil {
			return nil, err
		}
		if ok {
			return func() error {
				n, err := releaseScript.Run(context.Background(), t.client, []string{t.key}, val).Int64()
				if err == nil && n != 1 {
					err = errors.New("tradition: lock expired before release")
				}
				return err
			}, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (t *tradition) Close() error { return nil }

// redislockImpl is github.com/bsm/redislock with a linear 10 ms back-off.
type redislockImpl struct {
	c     *redislock.Client
	lease time.Duration
}

var redislockOpts = &redislock.Options{RetryStrategy: redislock.LinearBackoff(10 * time.Millisecond)}

func (r *redislockImpl) NewLocker() Locker { return r }

func (r *redislockImpl) Lock(ctx context.Context) (func() error, error) {
	l, err := r.c.Obtain(ctx, "bench:redislock", r.lease, redislockOpts)
	if err != nil {
		return nil, err
	}
	return func() error { return l.Release(context.Background()) }, nil
}

func (r *redislockImpl) Close() error { return nil }

// redsyncImpl is github.com/go-redsync/redsync/v4 over one go-redis pool, default options
// but the expiry. Each goroutine has its own Mutex.
type redsyncImpl struct {
	rs    *redsync.Redsync
	lease time.Duration
}

func (r *redsyncImpl) NewLocker() Locker {
	return &redsyncLocker{m: r.rs.NewMutex("bench:redsync", redsync.WithExpiry(r.lease))}
}

func (r *redsyncImpl) Close() error { return nil }

type redsyncLocker struct{ m *redsync.Mutex }

func (r *redsyncLocker) Lock(ctx context.Context) (func() error, error) {
	if err := r.m.LockContext(ctx); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w: %w", errRetry, err)
	}
	return func() error {
		ok, err := r.m.UnlockContext(context.Background())
		if err == nil && !ok {
			err = errors.New("redsync: lock expired before release")
		}
		return err
	}, nil
}

// counter is a go-redis hook that counts every command a client sends; a pipeline counts
// its commands. Pub/Sub commands do not pass through hooks.
type counter struct{ n atomic.Int64 }

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

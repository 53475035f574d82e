package dlock

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/dlockgo/dlock/domain"
	"github.com/dlockgo/dlock/processor"
)

// Option configures a Generator.
type Option interface{ apply(*options) error }

type optionFunc func(*options) error

func (f optionFunc) apply(o *options) error { return f(o) }

type options struct {
	logger       *zap.Logger                        // default zap.NewNop()
	fifo         bool                               // default false: newcomers may barge
	notify       bool                               // default true
	handOff      time.Duration                      // default DefaultHandOff
	holdOver     bool                               // default false
	leases       map[domain.DLockType]time.Duration // default none
	defaultLease time.Duration                      // default 0: unconfigured types are an error
	observer     Observer                           // default NopObserver
	replicas     int                                // default 0: no WAIT
	replicaWait  time.Duration
	gapEvery     time.Duration // default 0: a release always grants the key to the first live process in line
	gapWindow    time.Duration
	writeBlock   uint64                   // fencing tokens a read-write lock's write-hold reserves at a time: writeBlock (tests set fewer)
	reentering   func()                   // default nil; tests set it: run as a read-write lock's or semaphore's re-entry begins
	lent         func()                   // default nil; tests set it: run as an acquisition got the lock, before its Owner is made
	unlocking    func()                   // default nil; tests set it: run as an Unlock found its holding, before it takes the holding's mutex
	forceCounted func(key, locker string) // default nil; tests set it: run as a ForceRelease of this process's locker is counted (forces), under the state's mutex
}

// WithObserver reports what the locks do to o (see Observer). The default reports nothing.
func WithObserver(o Observer) Option {
	return optionFunc(func(opts *options) error {
		if o == nil || nilValueReceiver(o) {
			return fmt.Errorf("%w: nil observer", ErrInvalidConfig)
		}
		opts.observer = o
		return nil
	})
}

// nilValueReceiver reports whether o is a nil pointer to a type whose Observer methods take
// it by value: each call would panic, in the library's goroutines too. (A nil pointer whose
// methods take the pointer may handle nil, as otelobs's Observer does.)
func nilValueReceiver(o Observer) bool {
	v := reflect.ValueOf(o)
	return v.Kind() == reflect.Pointer && v.IsNil() && v.Type().Elem().Implements(reflect.TypeFor[Observer]())
}

// WithReplicaAck makes every acquisition and every renewal wait until n replicas of the
// key's master have acknowledged it (Redis WAIT, sent with the write on the same connection),
// for at most timeout. A key granted by another process's release is no exception: it is
// held only once this process's own renewal of it is acknowledged. An acquisition not
// acknowledged in time counts as a failed attempt: TryLock gives it back and returns a
// *RedisProcessError matching ErrNotReplicated; Lock goes on waiting, and the key stays its
// attempt's (each ask renews it and waits for the replicas again) until it is acknowledged or
// Lock gives up, when it is given back. A renewal not acknowledged in time is retried as a
// failed renewal, and the holding is lost if none is acknowledged before its lease runs out.
//
// It narrows, but does not close, the window in which a failover to a replica that had not
// received the acquisition lets a second owner in (see docs/deployments.md): Redis
// replication stays asynchronous, and WAIT does not make a write durable. n must be ≥ 1 and
// at most the number of replicas the master has (else nothing is ever acknowledged); timeout
// must be at least a millisecond (WAIT counts whole milliseconds, and takes 0 as no bound)
// and below the client's ReadTimeout — well below: the client reads the script's reply and
// WAIT's under one deadline, which must also cover the round trip and the script. Keep it
// below the deadlines callers give Lock and TryLock as well: a call whose context ends while
// WAIT waits fails as a request that got no answer (its attempt settled like any such), not
// with ErrNotReplicated.
func WithReplicaAck(n int, timeout time.Duration) Option {
	return optionFunc(func(o *options) error {
		if n < 1 || timeout < time.Millisecond {
			return fmt.Errorf("%w: replica acknowledgement of %d replicas within %v", ErrInvalidConfig, n, timeout)
		}
		o.replicas, o.replicaWait = n, timeout
		return nil
	})
}

// WithLogger logs through l: an Owner the garbage collector released (dropped without its
// final Unlock) at Error; lost locks, a renewal before a take slower than half the lease (once
// per lock), and requests failed by the client's read timeout and releases Redis failed (each
// at most once a minute), at Warn; the decisions that matter (a Lock that gave up, a
// give-back, a yield to another process) and the other failures at Debug. The default logs
// nothing. docs/observability.md lists every line.
func WithLogger(l *zap.Logger) Option {
	return optionFunc(func(o *options) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", ErrInvalidConfig)
		}
		o.logger = l
		return nil
	})
}

// WithFIFO makes each process's local queue strictly first-in first-out: a newcomer (Lock or
// TryLock) never takes the lock ahead of a queued goroutine of the same process. By default a
// newcomer may barge, as in Java DLock, unless the first waiter has waited more than a
// millisecond (the starvation guard of sync.Mutex).
func WithFIFO() Option {
	return optionFunc(func(o *options) error { o.fifo = true; return nil })
}

// WithNotifications turns release notifications on (the default) or off for this process's
// waiters. On, a waiting process listens on its channel of the key and is woken by the message
// that grants it the key; off, it does not subscribe, and learns of releases only from its
// retry poller, every lease/6, as Java DLock does. Either way this process's releases grant
// the key to the first live process in line and tell it, so processes of both settings can
// share a key.
func WithNotifications(on bool) Option {
	return optionFunc(func(o *options) error { o.notify = on; return nil })
}

// DefaultHandOff is the default of WithLocalHandOff.
const DefaultHandOff = 50 * time.Millisecond

// WithLocalHandOff sets how long this process may keep the key in Redis while another process
// waits for it. While the process holds the key (a tenure) and its goroutines queue for the
// lock, an Unlock passes the lock to the next of them with no Redis command, each pass a new
// acquisition with its own fencing token. Once the tenure has lasted max (the default is
// DefaultHandOff) since it began or last found nobody waiting, not counting the wait for its
// first renewal (a process far from Redis passes the key as long as a near one), the next pass
// first checks Redis (one command): if another process is in line, the key goes to the first
// of them and this process joins the line again; else the tenure goes on for another max.
// With max = 0 there are no passes: every final Unlock lets the key go in Redis, as Java
// DLock does.
func WithLocalHandOff(max time.Duration) Option {
	return optionFunc(func(o *options) error {
		if max < 0 {
			return fmt.Errorf("%w: negative hand-off limit %v", ErrInvalidConfig, max)
		}
		o.handOff = max
		return nil
	})
}

// WithHoldOver (default off) trades strict turns between processes for throughput on a key
// that goroutines of several processes lock again and again. Without it, an Unlock with no
// goroutine of its process waiting lets the key go in Redis: to the first process in line, or
// free. With it, a process whose goroutines take the key again at once (a Lock came within
// 1 ms of the key's last release in it, and the process watches its channel of the key: it
// waited in line before) keeps the key after such an Unlock for up to 2 ms (a sixth of the
// lease at most), and the goroutine that comes back takes it with no Redis command, as a
// goroutine that queued would. The process then gives the key to the next process in line at
// the hand-off limit (WithLocalHandOff), as it does for goroutines that queue; with
// WithLocalHandOff(0), or notifications off, there is no hold-over.
//
// What it costs: a process in line waits up to a hand-off limit for each process before it,
// rather than one hand-off (a wait tail of the number of processes times the limit, 50 ms by
// default; a shorter limit, as WithLocalHandOff(20*time.Millisecond), shortens it, at more
// turns between processes); and a hold-over that no goroutine comes back for leaves the key
// idle for its 2 ms, after which the process makes none for a second. Exclusion, fencing and
// the leases are as without it (a removal of the key behind the process's back reaches the
// goroutine that comes back as it would one that queued: README, Limits). An Unlock that keeps
// the key asks Redis nothing, so it returns nil for a holding whose key was removed behind its
// back before it: until a goroutine takes the key, the release that lets it go, or a renewal,
// finds that loss, logs it at Warn and tells the Observer, as a retried release does (once one
// took it, the loss is that goroutine's; a removal after a renewal sent after the Unlock
// renewed the key is no loss of that holding).
func WithHoldOver(on bool) Option {
	return optionFunc(func(o *options) error { o.holdOver = on; return nil })
}

// WithForeignWindow is for a fleet where Java DLock processes share keys with this library.
// They never stand in the line of waiting processes: they take a key only when it is free,
// polling for it every sixth of their lease, and a release here grants the key to the next
// process in line without leaving it free — so under continuous contention from this library
// they would wait for ever. With this option, at most once every every, a release leaves the
// key free for window instead of granting it (a process that keeps the key for goroutines that
// never stop wanting it lets it go for the window at its next hand-off limit, WithLocalHandOff;
// with no limit it keeps the key until they stop): processes in line do not take it meanwhile, and
// a process that polls within the window takes it with its SET NX; no TryLock of this library
// takes it either (it does not stand in line), and a ForceRelease of a foreign holder grants
// the key to the line at once. A window a little longer than the foreign processes' poll
// period — their poll interval plus a round trip to Redis — gives one of them the key at every
// window (a Java process then waits at most every, times the number of them that compete); one
// exactly as long lets a poll miss a window now and then. Each window costs the
// processes in line up to window of idle key. A Java process that takes the key again as soon
// as it lets it go keeps it while it wants it: nothing tells this library's processes that it
// let go, and their polls rarely land in the gap (docs/design.md). Both must be whole milliseconds, 0 < window <
// every. The default is no window.
func WithForeignWindow(every, window time.Duration) Option {
	return optionFunc(func(o *options) error {
		if err := processor.CheckWindow(every, window); err != nil {
			return err
		}
		o.gapEvery, o.gapWindow = every, window
		return nil
	})
}

// WithLeases sets the lease of each lock type, as DLock's config-dlock.properties does (see
// ParseLeases and LoadLeases). Each type and lease is validated, in the types' order, so that
// a map with several bad entries gets the same error every time.
func WithLeases(leases map[string]time.Duration) Option {
	return optionFunc(func(o *options) error {
		for _, t := range slices.Sorted(maps.Keys(leases)) {
			if err := domain.ValidateType(domain.DLockType(t)); err != nil {
				return err
			}
			if err := domain.ValidateLease(leases[t]); err != nil {
				return fmt.Errorf("%w (type %s)", err, t)
			}
			o.leases[domain.DLockType(t)] = leases[t]
		}
		return nil
	})
}

// WithDefaultLease sets the lease of lock types that WithLeases does not name. Without it,
// Gen with such a type returns ErrInvalidConfig. A lease is from domain.MinLease (30 ms) to
// domain.MaxLease (a week), in whole milliseconds, here and in WithLeases; NewGenerator
// refuses any other with ErrInvalidConfig.
func WithDefaultLease(d time.Duration) Option {
	return optionFunc(func(o *options) error {
		if err := domain.ValidateLease(d); err != nil {
			return err
		}
		o.defaultLease = d
		return nil
	})
}

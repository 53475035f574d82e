package main

// The peers of the lock family's scenarios (issue 21), written here the way Redisson keeps a
// read-write lock and a permit-expirable semaphore in Redis: one script per acquisition and
// per release, and a pub/sub channel that wakes every waiter to try again. They are what
// dlock's read-write lock and semaphore are to be measured against.

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// SharedLocker is a Locker that can also take the shared (read) side.
type SharedLocker interface {
	Locker
	// RLock blocks until it holds the read side or ctx ends, and returns the function that
	// releases it.
	RLock(ctx context.Context) (unlock func() error, err error)
}

// wakeups is a process's subscription to a channel: every message wakes every goroutine that
// waits on it, and each tries again (as Redisson's waiters do, each on its own semaphore).
type wakeups struct {
	ps   *redis.PubSub
	mu   sync.Mutex
	next chan struct{} // closed at the next message
	done chan struct{}
}

func newWakeups(client *redis.Client, channel string) (*wakeups, error) {
	ps := client.Subscribe(context.Background(), channel)
	if _, err := ps.Receive(context.Background()); err != nil {
		ps.Close()
		return nil, err
	}
	w := &wakeups{ps: ps, next: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for range ps.Channel() {
			w.mu.Lock()
			close(w.next)
			w.next = make(chan struct{})
			w.mu.Unlock()
		}
	}()
	return w, nil
}

// wait waits for the next message, at most d, or for ctx to end.
func (w *wakeups) wait(ctx context.Context, d time.Duration) error {
	w.mu.Lock()
	next := w.next
	w.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-next:
	case <-t.C:
	}
	return nil
}

func (w *wakeups) close() error {
	err := w.ps.Close()
	<-w.done
	return err
}

// ttlWait is how long a waiter waits for a message before it tries again: the holder's
// remaining life as the script told it, bounded so a lost message costs little.
func ttlWait(ttl int64) time.Duration {
	return min(max(time.Duration(ttl)*time.Millisecond, time.Millisecond), 100*time.Millisecond)
}

// A read-write lock kept as Redisson keeps one: a hash at the lock's name with the mode
// ("read" or "write") and a hold count per holder (a client id and its thread), and for every
// read hold a key of its own that carries that hold's expiry; the hash lives as long as its
// longest hold. A release that leaves it empty publishes; there is no writer preference.
var (
	rwReadLock = redis.NewScript(`
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
  redis.call('hset', KEYS[1], 'mode', 'read')
  redis.call('hset', KEYS[1], ARGV[2], 1)
  redis.call('set', KEYS[2] .. ':1', 1, 'PX', ARGV[1])
  redis.call('pexpire', KEYS[1], ARGV[1])
  return -1
end
if mode == 'read' or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then
  local n = redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('set', KEYS[2] .. ':' .. n, 1, 'PX', ARGV[1])
  redis.call('pexpire', KEYS[1], math.max(redis.call('pttl', KEYS[1]), tonumber(ARGV[1])))
  return -1
end
return redis.call('pttl', KEYS[1])`)
	rwReadUnlock = redis.NewScript(`
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
  redis.call('publish', KEYS[3], 'r')
  return 1
end
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
  return 0
end
local n = redis.call('hincrby', KEYS[1], ARGV[1], -1)
if n == 0 then
  redis.call('hdel', KEYS[1], ARGV[1])
end
redis.call('del', KEYS[2] .. ':' .. (n + 1))
if redis.call('hlen', KEYS[1]) > 1 then
  local longest = -3
  for _, holder in ipairs(redis.call('hkeys', KEYS[1])) do
    local count = tonumber(redis.call('hget', KEYS[1], holder))
    if count then
      for i = count, 1, -1 do
        longest = math.max(longest, redis.call('pttl', ARGV[2] .. holder .. ':rwlock_timeout:' .. i))
      end
    end
  end
  if longest > 0 then
    redis.call('pexpire', KEYS[1], longest)
    return 1
  end
  if mode == 'write' then
    return 1
  end
end
redis.call('del', KEYS[1])
redis.call('publish', KEYS[3], 'r')
return 1`)
	rwWriteLock = redis.NewScript(`
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
  redis.call('hset', KEYS[1], 'mode', 'write')
  redis.call('hset', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return -1
end
if mode == 'write' and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], redis.call('pttl', KEYS[1]) + ARGV[1])
  return -1
end
return redis.call('pttl', KEYS[1])`)
	rwWriteUnlock = redis.NewScript(`
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
  redis.call('publish', KEYS[2], 'w')
  return 1
end
if mode ~= 'write' or redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
  return 0
end
if redis.call('hincrby', KEYS[1], ARGV[1], -1) > 0 then
  return 1
end
redis.call('hdel', KEYS[1], ARGV[1])
if redis.call('hlen', KEYS[1]) == 1 then
  redis.call('del', KEYS[1])
  redis.call('publish', KEYS[2], 'w')
else
  redis.call('hset', KEYS[1], 'mode', 'read') -- readers the writer let in stay
end
return 1`)
)

// redissonRW is the Redisson-style read-write lock: every read and every write is a script
// in Redis, and every release that frees the lock wakes every waiter of every process.
type redissonRW struct {
	client *redis.Client
	name   string // the hash; its other keys share its hash tag
	lease  time.Duration
	id     string // this client's id, as Redisson's connection manager id
	seq    atomic.Uint64
	wake   *wakeups
}

const rwName = "{bench:rw}"

func newRedissonRW(client *redis.Client, lease time.Duration) (*redissonRW, error) {
	for _, s := range []*redis.Script{rwReadLock, rwReadUnlock, rwWriteLock, rwWriteUnlock} {
		if err := s.Load(context.Background(), client).Err(); err != nil {
			return nil, err
		}
	}
	w, err := newWakeups(client, "redisson_rwlock:"+rwName)
	if err != nil {
		return nil, err
	}
	return &redissonRW{client: client, name: rwName, lease: lease, wake: w,
		id: fmt.Sprintf("%d-%d", os.Getpid(), time.Now().UnixNano())}, nil
}

// NewLocker returns a goroutine's locker: a thread of this client.
func (r *redissonRW) NewLocker() Locker {
	return &redissonRWThread{r: r, thread: r.id + ":" + strconv.FormatUint(r.seq.Add(1), 10)}
}

func (r *redissonRW) Close() error { return r.wake.close() }

type redissonRWThread struct {
	r      *redissonRW
	thread string
}

// acquire runs script until it answers -1 (taken), waiting for a message or the holder's
// remaining life between tries.
func (t *redissonRWThread) acquire(ctx context.Context, script *redis.Script, keys []string, args ...any) error {
	for {
		ttl, err := script.Run(ctx, t.r.client, keys, args...).Int64()
		if err != nil {
			return err
		}
		if ttl == -1 {
			return nil
		}
		if err := t.r.wake.wait(ctx, ttlWait(ttl)); err != nil {
			return err
		}
	}
}

// Lock takes the write side.
func (t *redissonRWThread) Lock(ctx context.Context) (func() error, error) {
	r := t.r
	writer := t.thread + ":write"
	if err := t.acquire(ctx, rwWriteLock, []string{r.name}, r.lease.Milliseconds(), writer); err != nil {
		return nil, err
	}
	return func() error {
		n, err := rwWriteUnlock.Run(context.Background(), r.client, []string{r.name, "redisson_rwlock:" + r.name}, writer).Int64()
		if err == nil && n != 1 {
			err = fmt.Errorf("redisson-rw: write side lost before its release")
		}
		return err
	}, nil
}

// RLock takes the read side.
func (t *redissonRWThread) RLock(ctx context.Context) (func() error, error) {
	r := t.r
	timeouts := r.name + ":" + t.thread + ":rwlock_timeout"
	if err := t.acquire(ctx, rwReadLock, []string{r.name, timeouts}, r.lease.Milliseconds(), t.thread, t.thread+":write"); err != nil {
		return nil, err
	}
	return func() error {
		n, err := rwReadUnlock.Run(context.Background(), r.client, []string{r.name, timeouts, "redisson_rwlock:" + r.name},
			t.thread, r.name+":").Int64()
		if err == nil && n != 1 {
			err = fmt.Errorf("redisson-rw: read side lost before its release")
		}
		return err
	}, nil
}

// A permit-expirable semaphore kept as Redisson keeps one: a counter of available permits,
// and a sorted set of the permits handed out, each by its expiry (the client's clock), which
// every acquisition first reclaims when they are past it.
var (
	semAcquire = redis.NewScript(`
local expired = redis.call('zrangebyscore', KEYS[2], 0, ARGV[3], 'limit', 0, 16)
if #expired > 0 then
  redis.call('zrem', KEYS[2], unpack(expired))
  local value = redis.call('incrby', KEYS[1], #expired)
  redis.call('publish', KEYS[3], value)
end
local value = tonumber(redis.call('get', KEYS[1]) or '0')
if value >= 1 then
  redis.call('decr', KEYS[1])
  redis.call('zadd', KEYS[2], ARGV[2], ARGV[1])
  return -1
end
local first = redis.call('zrange', KEYS[2], 0, 0, 'WITHSCORES')
if first[2] then
  return math.max(tonumber(first[2]) - tonumber(ARGV[3]), 1)
end
return 1`)
	semRelease = redis.NewScript(`
if redis.call('zrem', KEYS[2], ARGV[1]) ~= 1 then
  return 0
end
local value = redis.call('incr', KEYS[1])
redis.call('publish', KEYS[3], value)
return 1`)
)

// semPermits is the sem scenario's number of permits.
const semPermits = 4

// redissonSem is the Redisson-style permit-expirable semaphore: every permit taken and given
// back is a script in Redis, and every release wakes every waiter of every process.
type redissonSem struct {
	client *redis.Client
	keys   []string
	lease  time.Duration
	id     string
	seq    atomic.Uint64
	wake   *wakeups
}

func newRedissonSem(client *redis.Client, lease time.Duration) (*redissonSem, error) {
	ctx := context.Background()
	keys := []string{"{bench:sem}", "{bench:sem}:timeout", "redisson_sc:{bench:sem}"}
	for _, s := range []*redis.Script{semAcquire, semRelease} {
		if err := s.Load(ctx, client).Err(); err != nil {
			return nil, err
		}
	}
	if err := client.SetNX(ctx, keys[0], semPermits, 0).Err(); err != nil { // trySetPermits
		return nil, err
	}
	w, err := newWakeups(client, keys[2])
	if err != nil {
		return nil, err
	}
	return &redissonSem{client: client, keys: keys, lease: lease, wake: w,
		id: fmt.Sprintf("%d-%d-", os.Getpid(), time.Now().UnixNano())}, nil
}

func (s *redissonSem) NewLocker() Locker { return s }

// Lock takes one permit.
func (s *redissonSem) Lock(ctx context.Context) (func() error, error) {
	id := s.id + strconv.FormatUint(s.seq.Add(1), 10)
	for {
		now := time.Now()
		wait, err := semAcquire.Run(ctx, s.client, s.keys, id, now.Add(s.lease).UnixMilli(), now.UnixMilli()).Int64()
		if err != nil {
			return nil, err
		}
		if wait == -1 {
			break
		}
		if err := s.wake.wait(ctx, ttlWait(wait)); err != nil {
			return nil, err
		}
	}
	return func() error {
		n, err := semRelease.Run(context.Background(), s.client, s.keys, id).Int64()
		if err == nil && n != 1 {
			err = fmt.Errorf("redisson-sem: permit expired before its release")
		}
		return err
	}, nil
}

func (s *redissonSem) Close() error { return s.wake.close() }

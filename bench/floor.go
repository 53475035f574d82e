package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/redis/go-redis/v9"
)

// floorImpl is the ceiling of a fair lock across processes on Redis, as issue 20 describes
// its floor: the process that releases grants the key to the first process in a line kept in
// Redis, in the same script, and publishes to it; that process holds the key when the message
// comes, with no further command, and reads its subscription on the goroutine that waits (no
// hop). Strict turns, like dlock's. It is not a lock to use: no renewal, no fencing, nothing
// against a late or repeated request, a crashed process or a lost message beyond a poll each
// lease. One per process, for one goroutine: it runs the cross and handoff scenarios only.
type floorImpl struct {
	client     *redis.Client
	ps         *redis.PubSub
	me, prefix string
	lease      time.Duration
}

const floorKey, floorLine = "bench:floor", "bench:floor:line"

// floorLock takes the key if it is free (or already this process's), else puts the process in
// line once: {1} held, {0, ticket} waiting with the ticket its grant will carry.
var floorLock = redis.NewScript(`local h = redis.call('get', KEYS[1])
if not h or h == ARGV[1] then
	redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])
	redis.call('zrem', KEYS[2], ARGV[1])
	return {1}
end
local t = redis.call('zscore', KEYS[2], ARGV[1])
if not t then
	t = redis.call('incr', KEYS[2] .. ':n')
	redis.call('zadd', KEYS[2], t, ARGV[1])
end
return {0, tostring(t)}`)

// floorRelease grants the key to the first in line and tells it, or frees it.
var floorRelease = redis.NewScript(`if redis.call('get', KEYS[1]) ~= ARGV[1] then
	return 0
end
local next = redis.call('zpopmin', KEYS[2])
if next[1] then
	redis.call('set', KEYS[1], next[1], 'PX', ARGV[2])
	redis.call('publish', ARGV[3] .. next[1], next[2])
	return 1
end
redis.call('del', KEYS[1])
return 1`)

func newFloor(client *redis.Client, lease time.Duration) (Impl, error) {
	ctx := context.Background()
	f := &floorImpl{client: client, me: fmt.Sprintf("%d-%d", os.Getpid(), time.Now().UnixNano()),
		prefix: floorKey + ":to:", lease: lease}
	for _, s := range []*redis.Script{floorLock, floorRelease} {
		if err := s.Load(ctx, client).Err(); err != nil {
			return nil, err
		}
	}
	f.ps = client.Subscribe(ctx, f.prefix+f.me)
	if _, err := f.ps.Receive(ctx); err != nil { // the subscription's confirmation
		_ = f.ps.Close()
		return nil, err
	}
	return f, nil
}

func (f *floorImpl) NewLocker() Locker { return f }

func (f *floorImpl) Lock(ctx context.Context) (func() error, error) {
	unlock := func() error {
		n, err := floorRelease.Run(context.Background(), f.client, []string{floorKey, floorLine},
			f.me, f.lease.Milliseconds(), f.prefix).Int64()
		if err == nil && n != 1 {
			err = errors.New("floor: the key expired before its release")
		}
		return err
	}
	for {
		r, err := floorLock.Run(ctx, f.client, []string{floorKey, floorLine}, f.me, f.lease.Milliseconds()).Slice()
		if err != nil {
			return nil, err
		}
		if len(r) < 2 {
			return unlock, nil
		}
		// Wait for the grant on this goroutine (a message that carries this wait's ticket:
		// one for an earlier wait may still be unread); after a lease without one (a lost
		// message, a holder that let its key expire), ask again.
		for {
			m, err := f.ps.ReceiveTimeout(ctx, f.lease)
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if err != nil {
				break
			}
			if msg, ok := m.(*redis.Message); ok && msg.Payload == r[1] {
				return unlock, nil
			}
		}
	}
}

func (f *floorImpl) Close() error { return f.ps.Close() }

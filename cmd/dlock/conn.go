package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/dlock"
)

// defaultAddr is --redis when it is not given: $DLOCK_REDIS, else localhost:6379.
func defaultAddr() string {
	if a := os.Getenv("DLOCK_REDIS"); a != "" {
		return a
	}
	return "localhost:6379"
}

// defaultTimeout is the default of --timeout.
const defaultTimeout = 5 * time.Second

// inspectLease is the lease of the handles status and release make: they take no lock, but
// the library needs a lease to make a handle.
const inspectLease = 30 * time.Second

// redisFlags are the flags of every command that talks to Redis.
type redisFlags struct {
	addr    *string
	timeout *time.Duration
}

// addRedisFlags defines --redis and --timeout on fs.
func addRedisFlags(fs *flagSet) redisFlags {
	return redisFlags{
		addr:    fs.String("redis", "ADDR", defaultAddr(), "Redis host:port; $DLOCK_REDIS if set"),
		timeout: fs.Duration("timeout", defaultTimeout, "bound on each Redis call of the tool"),
	}
}

// check validates the flags.
func (r redisFlags) check() error {
	if *r.addr == "" {
		return usageErrorf("--redis is empty")
	}
	if *r.timeout <= 0 {
		return usageErrorf("--timeout must be positive")
	}
	return nil
}

// conn is a Redis client and a Generator over it, for one command.
type conn struct {
	addr    string
	timeout time.Duration
	client  *redis.Client
	gen     *dlock.Generator
}

// connect makes a client for r's address and a Generator whose default lease is lease; it
// does not talk to Redis yet (see ping).
func connect(r redisFlags, lease time.Duration) (*conn, error) {
	client := newClient(*r.addr, *r.timeout)
	gen, err := dlock.NewGenerator(client, dlock.WithDefaultLease(lease))
	if err != nil {
		client.Close()
		return nil, classify(*r.addr, *r.timeout, err)
	}
	return &conn{addr: *r.addr, timeout: *r.timeout, client: client, gen: gen}, nil
}

// newClient returns a client for addr whose requests honour their contexts' deadlines, so
// that --timeout bounds every call, dialling included. It dials twice, not go-redis's five
// times, per attempt: a command-line tool should say soon that Redis is down.
func newClient(addr string, timeout time.Duration) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:                  addr,
		DialTimeout:           timeout,
		DialerRetries:         2,
		ContextTimeoutEnabled: true,
	})
}

// ctx returns a context bounded by --timeout.
func (c *conn) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), c.timeout)
}

// ping checks that Redis answers, so that an unreachable Redis is reported as such (status
// 69) before anything else is tried.
func (c *conn) ping() error {
	ctx, cancel := c.ctx()
	defer cancel()
	if err := c.client.Ping(ctx).Err(); err != nil {
		return unreachable(c.addr, c.timeout, err)
	}
	return nil
}

// lock returns the handle on typ/target with lease; an invalid type or target is a usage
// error.
func (c *conn) lock(typ, target string, lease time.Duration) (*dlock.DistributedReentrantLock, error) {
	l, err := c.gen.GenWithLease(typ, target, lease)
	if err != nil {
		return nil, classify(c.addr, c.timeout, err)
	}
	return l, nil
}

// inspect checks r, connects, makes the handle on typ/target (with inspectLease) and checks
// that Redis answers: what status and release need before their one call. The caller closes
// the conn.
func inspect(r redisFlags, typ, target string) (*conn, *dlock.DistributedReentrantLock, error) {
	if err := r.check(); err != nil {
		return nil, nil, err
	}
	c, err := connect(r, inspectLease)
	if err != nil {
		return nil, nil, err
	}
	l, err := c.lock(typ, target, inspectLease)
	if err == nil {
		err = c.ping()
	}
	if err != nil {
		c.close()
		return nil, nil, err
	}
	return c, l, nil
}

// close closes the Generator (releasing what is still held, bounded by --timeout) and the
// client.
func (c *conn) close() {
	ctx, cancel := c.ctx()
	defer cancel()
	_ = c.gen.Close(ctx)
	_ = c.client.Close()
}

// classify gives err the exit status it calls for: 2 for an invalid configuration, 69 for a
// Redis failure or an unanswered call, else 1.
func classify(addr string, timeout time.Duration, err error) error {
	var pe *dlock.RedisProcessError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, dlock.ErrInvalidConfig):
		return withStatus(exitUsage, err)
	case errors.As(err, &pe), errors.Is(err, context.DeadlineExceeded):
		return unreachable(addr, timeout, err)
	}
	return err
}

// unreachable is the error for a Redis that failed or did not answer (status 69), naming the
// address.
func unreachable(addr string, timeout time.Duration, err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return withStatus(exitUnavailable, fmt.Errorf("Redis at %s did not answer within %v (--timeout)", addr, timeout))
	}
	return withStatus(exitUnavailable, fmt.Errorf("cannot reach Redis at %s: %w", addr, err))
}

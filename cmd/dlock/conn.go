package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/domain"
)

// defaultTimeout is the default of --timeout.
const defaultTimeout = 5 * time.Second

// minTimeout is the shortest --timeout: within less, no Redis call is answered (a sure "did not
// answer"), as no attempt within less than minWait.
const minTimeout = time.Millisecond

// inspectLease is the lease of the handles status and release make: they take no lock, but
// the library needs a lease to make a handle.
const inspectLease = 30 * time.Second

// redisFlags are the flags of every command that talks to Redis.
type redisFlags struct {
	addr    *string
	addrDef *flagDef // tells whether --redis was given
	cluster *bool
	master  *string
	mDef    *flagDef // tells whether --sentinel-master was given
	timeout *time.Duration
}

// addRedisFlags defines --redis, --cluster, --sentinel-master and --timeout on fs; where
// says what --redis defaults to.
func addRedisFlags(fs *flagSet, where string) redisFlags {
	var r redisFlags
	r.addr = new(string)
	r.addrDef = fs.Var((*stringValue)(r.addr), "redis", "", "ADDR",
		"Redis: HOST:PORT, a redis:// or rediss:// URL, or Cluster nodes (see above); "+where)
	r.cluster = fs.Bool("cluster", "", "ADDR is a Redis Cluster, even with one node named")
	r.master = new(string)
	r.mDef = fs.Var((*stringValue)(r.master), "sentinel-master", "", "NAME", "ADDR names Sentinels; NAME is the master they watch")
	r.timeout = fs.Duration("timeout", defaultTimeout, "bound on each Redis call of the tool, at least 1ms")
	fs.checkPos = r.addrsAsType
	return r
}

// addrsAsType refuses a TYPE that is Redis addresses given after --sentinel-master NAME or
// --cluster without --redis (dlock ... --sentinel-master NAME HOST:PORT,... TYPE TARGET): the
// addresses would be taken for TYPE, and TYPE for TARGET, of a lock on the default Redis.
func (r redisFlags) addrsAsType(pos []string) error {
	if (*r.master == "" && !*r.cluster) || r.addrDef.seen || len(pos) == 0 {
		return nil
	}
	for _, a := range strings.Split(pos[0], ",") {
		host, port, err := net.SplitHostPort(a)
		if n, perr := strconv.Atoi(port); err != nil || host == "" || perr != nil || n < 1 || n > 65535 {
			return nil
		}
	}
	what, flag := "the Cluster nodes'", "--cluster"
	if *r.master != "" {
		what, flag = "the Sentinels'", "--sentinel-master "+*r.master
	}
	return usageErrorf("TYPE %q looks like %s addresses: name them with --redis (%s --redis %s TYPE TARGET)", pos[0], what, flag, pos[0])
}

// endpoint checks the flags and returns the Redis they name (fallback when none is named;
// nil when fallback is "").
func (r redisFlags) endpoint(fallback string) (*endpoint, error) {
	if *r.timeout <= 0 {
		return nil, usageErrorf("invalid --timeout %v: must be more than 0", *r.timeout)
	}
	if *r.timeout < minTimeout {
		return nil, usageErrorf("invalid --timeout %v: must be at least %v: no call is answered within less", *r.timeout, minTimeout)
	}
	if r.mDef.seen && *r.master == "" {
		return nil, usageErrorf("--sentinel-master is empty") // (not taken for no flag: the Sentinels would be dialled as a server)
	}
	return resolveRedis(*r.addr, r.addrDef.seen, *r.cluster, *r.master, fallback)
}

// conn is a Redis client and a Generator over it, for one command.
type conn struct {
	ep      *endpoint
	timeout time.Duration
	client  redis.UniversalClient
	gen     *dlock.Generator
	notice  *waitNotice
	quick   bool   // close gives nothing back: Redis took no write of this run's
	keys    string // the Redis keys of the lock the command works on, for messages; "" before it is made
}

// waitNotice tells, on standard error, of the first Redis failure while a command waits for
// its lock: Lock waits through Redis failures for as long as --wait allows (by default for
// ever), and an outage should not look like a busy lock.
type waitNotice struct {
	dlock.NopObserver
	ep     *endpoint
	mu     sync.Mutex
	out    io.Writer // while a command waits, its standard error; else nil
	cmd    string    // the command that waits, for the message's prefix
	waited string    // the lock waited for
	told   bool
	first  bool // the wait's first attempt runs: a single server's READONLY ends the wait (acquire)
}

// firstAttempt says that the wait's first attempt begins (true) or has ended.
func (w *waitNotice) firstAttempt(on bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.first = on
}

// waiting begins (out not nil) or ends (nil) command cmd's wait for lock name.
func (w *waitNotice) waiting(out io.Writer, cmd, name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.out, w.cmd, w.waited = out, cmd, name
}

// RedisError implements dlock.Observer.
func (w *waitNotice) RedisError(e dlock.RedisErrorEvent) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.out == nil || w.told || refusedCause(e.Err) || w.first && w.ep.kind == "" && readOnly(e.Err) { // (these end the wait: they are the error)
		return
	}
	w.told = true
	fmt.Fprintf(w.out, "dlock %s: %v failed while waiting for lock %s (%s); still waiting, as --wait allows\n", w.cmd, w.ep, w.waited, plain(e.Err))
}

// connect checks r, makes a client for the Redis it names and a Generator whose default
// lease is lease; it does not talk to Redis yet (see ping).
func connect(r redisFlags, lease time.Duration) (*conn, error) {
	ep, err := r.endpoint(defaultRedis)
	if err != nil {
		return nil, err
	}
	client := ep.client(*r.timeout)
	notice := &waitNotice{ep: ep}
	gen, err := dlock.NewGenerator(client, dlock.WithDefaultLease(lease), dlock.WithObserver(notice))
	if err != nil {
		client.Close()
		return nil, withStatus(exitUsage, errors.New(plain(err)))
	}
	return &conn{ep: ep, timeout: *r.timeout, client: client, gen: gen, notice: notice}, nil
}

// ctx returns a context bounded by --timeout.
func (c *conn) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), c.timeout)
}

// ping checks that Redis answers, so that an unreachable Redis (69) or refused credentials
// (77) are reported as such before anything else is tried. A Cluster node named as a single
// server is refused too (69), whichever node holds the key's slot: one that holds it would
// answer, but its releases would go on plain channels and a Cluster client's on sharded ones,
// and neither side would hear the other's (a waiter would learn of each release only by its
// poll). A replica named as a single server is refused too (69): its reads may be behind
// its master's, and a forced release there may write nothing, so no READONLY would say so.
// It asks INFO for both, and goes on when a user may not run it (ACL).
func (c *conn) ping() error {
	ctx, cancel := c.ctx()
	defer cancel()
	return c.pingWithin(ctx)
}

// pingWithin is ping bounded by ctx.
func (c *conn) pingWithin(ctx context.Context) error {
	return checkServer(ctx, c.client, c.ep, c.timeout)
}

// checkServer pings ep through client, and refuses a server that is not the one to lock on:
// a Cluster node named as a single server, a read-only replica.
func checkServer(ctx context.Context, client redis.UniversalClient, ep *endpoint, timeout time.Duration) error {
	if err := client.Ping(ctx).Err(); err != nil {
		if f := ep.failure(timeout); f != nil && unconnected(err) {
			return withStatus(exitUnavailable, f)
		}
		if d := ep.urlDialTimeout(); d > 0 && d < timeout && errors.Is(err, context.DeadlineExceeded) && !expired(ctx) {
			// A deadline that is not ctx's: the URL's dial_timeout gave up. (go-redis reports
			// a Sentinel deployment's dial failures as a bare "context deadline exceeded",
			// which redisFailure would take for --timeout's.)
			return withStatus(exitUnavailable, fmt.Errorf("cannot reach %v: no connection within its dial_timeout %v", ep, d))
		}
		return redisFailure(ep, timeout, err)
	}
	if ep.kind == "" {
		info, err := client.Info(ctx, "cluster").Result()
		if refusedCause(err) {
			return probeServer(ctx, client, ep)
		}
		if err == nil && strings.Contains(info, "cluster_enabled:1") {
			return withStatus(exitUnavailable, fmt.Errorf("%v is part of a Redis Cluster (cluster_enabled:1): add --cluster, or name several nodes", ep))
		}
		// A replica answers status's reads from its own copy, which may be behind its master
		// or cut off from it (a lock shown free that the master holds), and a forced release
		// that finds nothing to remove there writes nothing, so no READONLY tells of it.
		if info, err := client.Info(ctx, "replication").Result(); err == nil && strings.Contains(info, "role:slave") {
			return withStatus(exitUnavailable, fmt.Errorf("%v is a read-only replica (%s): name its master, or the Sentinels with --sentinel-master", ep, replicaOf(info)))
		}
	}
	return nil
}

// probeKeys are two keys in the lock keys' pattern (README, Least privilege) that no lock has
// (a lock's type is never empty), in two slots of a Cluster (520 and 9866).
var probeKeys = []string{"DLOCK__dlock-cli-probe", "DLOCK__dlock-cli-probe:1"}

// probeServer tells a replica or a Cluster node without INFO, which a least-privilege user may
// not send: a write that changes nothing (DEL of keys that no lock has), which a replica
// refuses (READONLY) and a Cluster node refuses too, whichever slots it serves, for its keys
// lie in two slots (CROSSSLOT; MOVED, CLUSTERDOWN). Anything else, a refusal of the write too
// included, lets the command go on as before.
func probeServer(ctx context.Context, client redis.UniversalClient, ep *endpoint) error {
	err := client.Del(ctx, probeKeys...).Err()
	if _, moved := redis.IsMovedError(err); moved || replyStarts(err, "CROSSSLOT") || replyStarts(err, "CLUSTERDOWN") {
		return withStatus(exitUnavailable, fmt.Errorf("%v is part of a Redis Cluster (%v): add --cluster, or name several nodes", ep, err))
	}
	if readOnly(err) {
		return withStatus(exitUnavailable, fmt.Errorf("%v is a read-only replica (it refused a write; this user may not read INFO for more): name its master, or the Sentinels with --sentinel-master", ep))
	}
	return nil
}

// expired reports whether ctx has ended or its deadline has passed (a deadline may pass a
// moment before ctx's own timer ends it).
func expired(ctx context.Context) bool {
	dl, ok := ctx.Deadline()
	return ctx.Err() != nil || ok && !time.Now().Before(dl)
}

// replicaOf says whose replica INFO replication's reply info describes, and how its link is.
func replicaOf(info string) string {
	field := func(name string) string {
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
				return v
			}
		}
		return "?"
	}
	return fmt.Sprintf("role:slave of %s:%s, link %s", field("master_host"), field("master_port"), field("master_link_status"))
}

// lock returns the handle on typ/target with lease; an invalid type or target is a usage
// error.
func (c *conn) lock(typ, target string, lease time.Duration) (*dlock.DistributedReentrantLock, error) {
	l, err := c.gen.GenWithLease(typ, target, lease)
	if err != nil {
		return nil, c.classify(err)
	}
	cfg := l.Config()
	c.keys = cfg.UniqueKey() + ", " + cfg.SideKey("*")
	return l, nil
}

// inspect opens typ/target with inspectLease: what status and release need before their one
// call. The caller closes the conn.
func inspect(r redisFlags, typ, target string) (*conn, *dlock.DistributedReentrantLock, error) {
	return open(r, typ, target, inspectLease)
}

// open connects, makes the handle on typ/target with lease and checks that Redis answers.
// The caller closes the conn.
func open(r redisFlags, typ, target string, lease time.Duration) (*conn, *dlock.DistributedReentrantLock, error) {
	c, err := connect(r, lease)
	if err != nil {
		return nil, nil, err
	}
	l, err := c.lock(typ, target, lease)
	if err == nil {
		err = c.ping()
	}
	if err != nil {
		c.close()
		return nil, nil, err
	}
	return c, l, nil
}

// otherKind names the lock of the other kind that Redis keeps under cfg's name, for an operator
// who asked for the wrong one and found it free: a read-write lock or a semaphore when shared
// is false (their kind is kept beside their state), a lock (a mutex) when it is true; "" for
// none, or when Redis does not tell.
func (c *conn) otherKind(cfg domain.DLockConfig, shared bool) string {
	ctx, cancel := c.ctx()
	defer cancel()
	if shared {
		if err := c.client.Get(ctx, cfg.UniqueKey()).Err(); err == nil {
			return "a lock of that name (taken with neither --shared, --exclusive nor --semaphore) is held"
		}
		return ""
	}
	v, err := c.client.Get(ctx, cfg.SideKey(domain.SharedKindSuffix)).Result()
	if err != nil {
		return ""
	}
	switch kind, k, _ := strings.Cut(v, "|"); kind {
	case "rw":
		return "Redis keeps a read-write lock of that name (give --shared or --exclusive)"
	case "sem":
		return fmt.Sprintf("Redis keeps a semaphore of that name (give --semaphore %s)", k)
	}
	return ""
}

// close closes the Generator (releasing what is still held, bounded by --timeout) and the
// client.
func (c *conn) close() {
	ctx, cancel := c.ctx()
	if c.quick {
		cancel()
	}
	defer cancel()
	_ = c.gen.Close(ctx)
	_ = c.client.Close()
}

// classify gives a library error the exit status it calls for: 2 for an invalid
// configuration, 69, 77 or 1 for a Redis failure or an unanswered call (redisFailure), else 1.
func (c *conn) classify(err error) error {
	var pe *dlock.RedisProcessError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, dlock.ErrInvalidConfig):
		return withStatus(exitUsage, errors.New(plain(err)))
	case wrongType(err) && c.keys != "":
		var re redis.Error
		errors.As(err, &re)
		return withStatus(exitError, fmt.Errorf("%v answered with an error (one of the lock's keys, %s, holds a value that is not dlock's): %s",
			c.ep, c.keys, strings.TrimSpace(re.Error())))
	case errors.As(err, &pe), errors.Is(err, context.DeadlineExceeded), isRedisReply(err):
		return redisFailure(c.ep, c.timeout, err)
	}
	return errors.New(plain(err))
}

// wrongType reports whether err carries Redis's WRONGTYPE reply: a key holds another kind of
// value than the script expects.
func wrongType(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && strings.HasPrefix(strings.TrimSpace(re.Error()), "WRONGTYPE")
}

// isRedisReply reports whether err is an error reply from Redis.
func isRedisReply(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}

// redisFailure is the error for a Redis that failed, refused or did not answer, naming it:
// 77 when it refused the credentials or a command (ACL), 1 for another error reply that no
// wait mends (WRONGTYPE), else 69: unreachable, no answer, not serving (OOM, LOADING, ...), or
// not the kind of server the address was given as (a Sentinel named as the server, a plain
// server named as Sentinels or as a Cluster, Sentinels that watch no master of the name, a
// Cluster node named as a single server) — no usable master is reached, whichever it is.
func redisFailure(ep *endpoint, timeout time.Duration, err error) error {
	var pe *dlock.RedisProcessError
	cause := err
	if errors.As(err, &pe) {
		cause = pe.Err
	}
	reply := strings.TrimSpace(plain(cause))
	reply, _, _ = strings.Cut(reply, ", with args") // (an unknown command's reply quotes its arguments: a script's, here)
	var oe *net.OpError
	if f := ep.failure(timeout); f != nil && unconnected(err) {
		return withStatus(exitUnavailable, f)
	}
	switch {
	case errors.As(err, &oe) && oe.Op == "dial" && oe.Timeout() && ep.urlDialTimeout() > 0 && ep.urlDialTimeout() < timeout:
		// (the URL's dial_timeout gave up, before --timeout)
		return withStatus(exitUnavailable, fmt.Errorf("cannot reach %v: no connection within its dial_timeout %v", ep, ep.urlDialTimeout()))
	case errors.Is(err, context.DeadlineExceeded):
		return withStatus(exitUnavailable, fmt.Errorf("%v did not answer within %v (--timeout)", ep, timeout))
	case redis.IsAuthError(err) && strings.HasPrefix(reply, "NOAUTH"):
		hint := "give it in a URL, redis://[USER]:PASSWORD@HOST:PORT"
		if ep.userOnly() {
			hint = "the URL gives a user name alone (what comes before \"@\" without a \":\"); a password alone is written redis://:PASSWORD@HOST:PORT"
		}
		return withStatus(exitNoPerm, fmt.Errorf("%v needs a password (%s): %s", ep, reply, hint))
	case redis.IsAuthError(err) && ep.master != "" && strings.Contains(reply, "sentinel"):
		return withStatus(exitNoPerm, fmt.Errorf("%v: the Sentinels refused the user or password (%s): in a Sentinel URL a USER:PASSWORD@ before the host is the Sentinels' own, and the master's goes in the username= and password= parameters", ep, reply))
	case redis.IsAuthError(err):
		return withStatus(exitNoPerm, fmt.Errorf("%v refused the user or password (%s)", ep, reply))
	case redis.IsPermissionError(err), strings.Contains(reply, "The user executing the script can't"):
		return withStatus(exitNoPerm, fmt.Errorf("%v refused a command to this user (%s): see \"Least privilege\" in the README for the ACL dlock needs", ep, reply))
	case ep.master != "" && errors.Is(err, redis.Nil):
		// go-redis reports a Sentinel's nil answer to GET-MASTER-ADDR-BY-NAME as "all sentinels
		// ... are unreachable: redis: nil"; the Sentinels answered, and know no such master.
		return withStatus(exitUnavailable, fmt.Errorf("%v: the Sentinels there watch no master named %q (SENTINEL MASTERS on a Sentinel lists the names)", ep, ep.master))
	case ep.master != "" && strings.Contains(reply, "unknown command 'sentinel'"):
		return withStatus(exitUnavailable, fmt.Errorf("%v: not a Sentinel (%s): with --sentinel-master, --redis names the Sentinels, not the master", ep, reply[strings.Index(reply, "ERR unknown command"):]))
	case ep.kind == "Cluster" && strings.Contains(reply, "cluster support disabled"):
		return withStatus(exitUnavailable, fmt.Errorf("%v: not a Cluster node (%s): a single server is named without --cluster, by one HOST:PORT", ep, reply))
	case strings.HasPrefix(reply, "ERR unknown command"):
		return withStatus(exitUnavailable, fmt.Errorf("%v is not a Redis server that runs dlock's commands: a Sentinel is named with --sentinel-master (%s)", ep, reply))
	}
	if _, moved := redis.IsMovedError(err); moved {
		return withStatus(exitUnavailable, fmt.Errorf("%v is part of a Redis Cluster (%s): add --cluster, or name several nodes", ep, reply))
	}
	if isRedisReply(cause) {
		if strings.HasPrefix(reply, "READONLY ") && ep.master == "" {
			return withStatus(exitUnavailable, fmt.Errorf("%v is a read-only replica (%s): name its master, or the Sentinels with --sentinel-master", ep, reply))
		}
		if notServing(reply) {
			return withStatus(exitUnavailable, fmt.Errorf("%v is not serving requests now (%s)", ep, reply))
		}
		what := "an error"
		if strings.HasPrefix(reply, "WRONGTYPE") {
			what = "an error (a key of the lock's name holds a value that is not dlock's)"
		}
		return withStatus(exitError, fmt.Errorf("%v answered with %s: %s", ep, what, reply))
	}
	if (errors.Is(cause, io.EOF) || errors.Is(cause, syscall.ECONNRESET)) && !ep.tls() {
		// What a TLS port does with a plain request: it closes the connection.
		return withStatus(exitUnavailable, fmt.Errorf("cannot reach %v: it closed the connection without an answer (%s): is it a TLS port? (rediss:// is for TLS)", ep, reply))
	}
	return withStatus(exitUnavailable, fmt.Errorf("cannot reach %v: %s", ep, reply))
}

// unconnected reports whether err may be the failure of a call that found no connection: it
// ran out of time, or a dial or its TLS handshake failed (every Sentinel's, say), and no
// server's reply is in it (a Sentinel refusing the password while another is down: the
// refusal is the cause).
func unconnected(err error) bool {
	var oe *net.OpError
	var reply redis.Error
	var he *handshakeError
	if errors.As(err, &reply) {
		return false
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &oe) && oe.Op == "dial" || errors.As(err, &he) ||
		strings.Contains(err.Error(), "all sentinels specified in configuration are unreachable")
}

// notServing reports whether Redis's error reply says it cannot serve requests for now (out
// of memory, loading its data, a read-only replica, a Cluster or a master down, busy with a
// script, unable to persist): a Redis that is unavailable, not a request at fault.
func notServing(reply string) bool {
	for _, p := range []string{"OOM", "LOADING", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "BUSY", "NOREPLICAS", "MISCONF"} {
		if strings.HasPrefix(reply, p+" ") {
			return true
		}
	}
	return false
}

// plain returns err's message without the library's "dlock: " prefixes and its "invalid
// configuration: " label, so that a message has one prefix, the command's, on one line (an
// error joined of several, as go-redis's of unreachable Sentinels, is "; "-separated).
func plain(err error) string {
	msg := err.Error()
	for {
		trimmed := strings.TrimPrefix(strings.TrimPrefix(msg, "dlock: "), "invalid configuration: ")
		if trimmed == msg {
			break
		}
		msg = trimmed
	}
	msg = strings.ReplaceAll(msg, ": dlock: ", ": ")
	var lines []string
	for _, l := range strings.Split(msg, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "; ")
}

// redisDefaultDoc is the usage's note on --redis's default, for every command but demo.
const redisDefaultDoc = "default $DLOCK_REDIS, else $REDIS_URL, else " + defaultRedis

// redisHelp is the usage's section on naming Redis, for every command that talks to it but
// demo.
var redisHelp = redisSection(defaultRedis)

// redisSection is the usage's section on naming Redis; def is what is used when nothing names
// it.
func redisSection(def string) string {
	return `
Redis is --redis ADDR, else $DLOCK_REDIS, else $REDIS_URL, else ` + def + `; ADDR is:
  HOST:PORT                             one server
  redis://[USER]:PASSWORD@HOST:PORT/DB  one server with a password (and an ACL user), and a
                                        database; rediss:// for TLS (a private CA:
                                        SSL_CERT_FILE=ca.pem); unix:///path/redis.sock?db=N
  HOST:PORT,HOST:PORT,...               Redis Cluster nodes; one node with --cluster; as a
                                        URL: redis://:PASSWORD@HOST:PORT?addr=HOST2:PORT2
                                        &addr=HOST3:PORT3 (one node per addr=)
  HOST:PORT,... --sentinel-master NAME  Sentinels, and the master NAME they watch (--redis
                                        names the Sentinels: --sentinel-master NAME --redis
                                        HOST:PORT,HOST:PORT); as a URL:
                                        redis://SENTINEL:PORT/DB?master_name=NAME&addr=...
                                        &password=PASSWORD (one more Sentinel per addr=; a
                                        USER:PASSWORD@ before the host is the Sentinels'
                                        own, as go-redis reads it)
URL parameters are go-redis's (dial_timeout=3s, client_name=..., skip_verify=true, ...). A
password on the command line can be read by other users of the machine (ps): prefer
$DLOCK_REDIS or $REDIS_URL for it. Messages show a password as xxxxx.
`
}

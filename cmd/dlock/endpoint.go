package main

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/redis/go-redis/v9"
)

// defaultRedis is the Redis of every command but demo when neither --redis, $DLOCK_REDIS nor
// $REDIS_URL names one.
const defaultRedis = "localhost:6379"

// endpoint is the Redis a command talks to: a single server, a Cluster or a Sentinel-watched
// master, as --redis, $DLOCK_REDIS or $REDIS_URL named it (see the package documentation).
type endpoint struct {
	spec   redisSpec
	kind   string // "", "Cluster" or "Sentinel master NAME", for messages
	shown  string // the address as given, passwords masked
	master string // the master the Sentinels are asked for; "" when not a Sentinel deployment
	// sentinels are the Sentinels' addresses, when master is set
	sentinels []string
	dials     *dialLog // the last dial of the endpoint's clients, for messages
}

// redisSpec is what the command line and the environment say about Redis.
type redisSpec struct {
	value   string
	from    string // where value came from: "--redis", "$DLOCK_REDIS", "$REDIS_URL" or "" (default)
	cluster bool   // --cluster
	master  string // --sentinel-master
}

// redisOptions is one of go-redis's three kinds of options, parsed from a redisSpec.
type redisOptions struct {
	single   *redis.Options
	cluster  *redis.ClusterOptions
	failover *redis.FailoverOptions
}

// resolveRedis returns the endpoint the command talks to. value is --redis if given (given
// tells whether it was); else $DLOCK_REDIS, else $REDIS_URL, else fallback ("" for none: nil
// endpoint). A bad address is a usage error naming where it came from, passwords masked.
func resolveRedis(value string, given, cluster bool, master string, fallback string) (*endpoint, error) {
	s := redisSpec{value: value, from: "--redis", cluster: cluster, master: master}
	switch {
	case given && value == "":
		return nil, usageErrorf("--redis is empty")
	case given:
	case os.Getenv("DLOCK_REDIS") != "":
		s.value, s.from = os.Getenv("DLOCK_REDIS"), "$DLOCK_REDIS"
	case os.Getenv("REDIS_URL") != "":
		s.value, s.from = os.Getenv("REDIS_URL"), "$REDIS_URL"
	case fallback == "":
		return nil, nil
	default:
		s.value, s.from = fallback, ""
	}
	if cluster && master != "" {
		return nil, usageErrorf("--cluster and --sentinel-master exclude each other: a Sentinel watches one master, a Cluster has many")
	}
	o, err := s.parse()
	if err == nil && strings.ContainsFunc(s.value, unicode.IsControl) {
		err = errors.New("it holds a control character (a line break pasted with it?)")
	}
	if err != nil {
		from := s.from
		if from == "" {
			from = "default"
		}
		return nil, usageErrorf("invalid %s %q: %v", from, redact(s.value), err)
	}
	e := &endpoint{spec: s, shown: redact(s.value), dials: &dialLog{}}
	switch {
	case o.cluster != nil:
		e.kind = "Cluster"
	case o.failover != nil:
		e.kind = "Sentinel master " + o.failover.MasterName
		e.master = o.failover.MasterName
		e.sentinels = o.failover.SentinelAddrs
	}
	return e, nil
}

// String names the endpoint in messages: "Redis at ADDR", with its kind; never a password.
func (e *endpoint) String() string {
	if e.kind != "" {
		return fmt.Sprintf("Redis (%s) at %s", e.kind, e.shown)
	}
	return "Redis at " + e.shown
}

// userOnly reports whether e's URL names a user with no password (redis://NAME@HOST), which
// redis-cli would read as a password.
func (e *endpoint) userOnly() bool {
	u, err := url.Parse(e.spec.value)
	if err != nil || u.User == nil {
		return false
	}
	_, set := u.User.Password()
	return !set && u.User.Username() != ""
}

// client returns a new client for e whose requests honour their contexts' deadlines, so that
// --timeout bounds every call, dialling included. Unless the URL sets them, it dials within
// timeout and twice, not go-redis's five times, per attempt: a command-line tool should say
// soon that Redis is down; through Sentinels it reads within a quarter of timeout, or a
// second (below). It does not name its library to Redis (DisableIdentity: no CLIENT SETINFO, a
// round trip of its own on each new connection, which Redis 7.0 refuses anyway): far from
// Redis, a short run pays every round trip before its first answer.
func (e *endpoint) client(timeout time.Duration) redis.UniversalClient {
	o, err := e.spec.parse() // fresh options for each client: go-redis keeps and changes them
	if err != nil {
		panic("dlock: an endpoint that parsed once fails to parse: " + err.Error())
	}
	switch {
	case o.cluster != nil:
		c := o.cluster
		c.DialTimeout = orDefault(c.DialTimeout, timeout)
		// go-redis asks a node at random for the slot map and the commands' key positions: a
		// master that takes connections and never answers (stopped) held the first request
		// for all of --timeout, whatever shard its key is on. A quarter of it, as for
		// Sentinels, leaves the time to ask another node.
		c.ReadTimeout = orDefault(c.ReadTimeout, max(timeout/4, min(timeout, time.Second)))
		c.DialerRetries = orDefault(c.DialerRetries, 2)
		c.ContextTimeoutEnabled = true
		c.DisableIdentity = true
		c.Dialer = e.dials.dialer(c.DialTimeout, c.TLSConfig)
		return redis.NewClusterClient(c)
	case o.failover != nil:
		f := o.failover
		f.DialTimeout = orDefault(f.DialTimeout, timeout)
		// go-redis's first lookup of the master asks every Sentinel at once and waits for
		// each to answer or fail, even after one named the master: a Sentinel that takes
		// connections and never answers (stopped) holds it for the read timeout, which a
		// context's end does not cut. A quarter of --timeout leaves the call time for the rest
		// (but no less than a second, or all of a shorter --timeout: a far Redis's reads).
		f.ReadTimeout = orDefault(f.ReadTimeout, max(timeout/4, min(timeout, time.Second)))
		f.DialerRetries = orDefault(f.DialerRetries, 2)
		f.ContextTimeoutEnabled = true
		f.DisableIdentity = true
		f.Dialer = e.dials.dialer(f.DialTimeout, f.TLSConfig)
		return redis.NewFailoverClient(f)
	}
	s := o.single
	s.DialTimeout = orDefault(s.DialTimeout, timeout)
	s.DialerRetries = orDefault(s.DialerRetries, 2)
	s.ContextTimeoutEnabled = true
	s.DisableIdentity = true
	s.Dialer = e.dials.dialer(s.DialTimeout, s.TLSConfig)
	return redis.NewClient(s)
}

// orDefault returns v, or def when v is zero.
func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// parse turns the spec into go-redis options. Its errors say what is wrong in a few words and
// never quote a password.
func (s redisSpec) parse() (redisOptions, error) {
	if strings.Contains(s.value, "://") {
		o, err := s.parseURL()
		if err == nil && o.dialTimeout() < 0 { // (the URL parsed: so does its query)
			u, _ := url.Parse(s.value)
			return redisOptions{}, fmt.Errorf("dial_timeout %s is negative: no connection can be made within it", u.Query().Get("dial_timeout"))
		}
		return o, err
	}
	return s.parseAddrs()
}

// dialTimeout returns the dial timeout the options set (a URL's dial_timeout), 0 if none.
func (o redisOptions) dialTimeout() time.Duration {
	switch {
	case o.single != nil:
		return o.single.DialTimeout
	case o.cluster != nil:
		return o.cluster.DialTimeout
	case o.failover != nil:
		return o.failover.DialTimeout
	}
	return 0
}

// tls reports whether e is reached over TLS (rediss://).
func (e *endpoint) tls() bool {
	o, err := e.spec.parse()
	switch {
	case err != nil:
		return false
	case o.single != nil:
		return o.single.TLSConfig != nil
	case o.cluster != nil:
		return o.cluster.TLSConfig != nil
	case o.failover != nil:
		return o.failover.TLSConfig != nil
	}
	return false
}

// urlDialTimeout returns the dial timeout e's URL sets (dial_timeout), 0 if none.
func (e *endpoint) urlDialTimeout() time.Duration {
	o, err := e.spec.parse()
	if err != nil {
		return 0
	}
	return o.dialTimeout()
}

// parseAddrs parses host:port[,host:port...] with go-redis's UniversalOptions: one address is
// a single server, more are Cluster nodes (or Sentinels, with --sentinel-master).
func (s redisSpec) parseAddrs() (redisOptions, error) {
	if strings.Contains(s.value, "@") {
		return redisOptions{}, errors.New("a user or password needs a URL: redis://USER:PASSWORD@HOST:PORT/DB")
	}
	var addrs []string
	list := strings.Split(s.value, ",")
	for _, a := range list {
		a = strings.TrimSpace(a)
		which := "" // names the bad address in a list
		if len(list) > 1 {
			which = fmt.Sprintf("%q: ", a)
		}
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			return redisOptions{}, fmt.Errorf("%snot host:port (e.g. localhost:6379), nor a redis:// URL", which)
		}
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			return redisOptions{}, fmt.Errorf("%sport %q is not a number from 1 to 65535", which, port)
		}
		addrs = append(addrs, net.JoinHostPort(host, port))
	}
	u := &redis.UniversalOptions{Addrs: addrs, MasterName: s.master, IsClusterMode: s.cluster}
	switch {
	case s.master != "":
		return redisOptions{failover: u.Failover()}, nil
	case len(addrs) > 1 || s.cluster:
		return redisOptions{cluster: u.Cluster()}, nil
	}
	return redisOptions{single: u.Simple()}, nil
}

// parseURL parses a redis://, rediss:// or unix:// URL with go-redis's ParseURL, or, for a
// Cluster (--cluster, or addr= parameters naming more nodes) ParseClusterURL, or, for a
// Sentinel (--sentinel-master, or a master_name= parameter) ParseFailoverURL.
func (s redisSpec) parseURL() (redisOptions, error) {
	u, err := url.Parse(s.value)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) && !strings.Contains(s.value, "@") { // no user or password to leak
			return redisOptions{}, fmt.Errorf("not a valid URL: %v", ue.Err)
		}
		return redisOptions{}, errors.New("not a valid URL: check the host and port, and percent-encode any of : / ? # @ in the user or password")
	}
	switch {
	case strings.Contains(u.Scheme, "sentinel"):
		return redisOptions{}, fmt.Errorf("go-redis has no %s:// URLs: for Sentinel give redis://SENTINEL:PORT?master_name=NAME, or --sentinel-master NAME with the Sentinels' addresses", u.Scheme)
	case u.Scheme != "redis" && u.Scheme != "rediss" && u.Scheme != "unix":
		return redisOptions{}, fmt.Errorf("the scheme must be redis://, rediss:// (TLS) or unix://, not %s://", u.Scheme)
	}
	if u.Scheme != "unix" {
		if err := checkHostPort(u); err != nil {
			return redisOptions{}, err
		}
	}
	q := u.Query()
	if err := checkPoolParams(q); err != nil {
		return redisOptions{}, err
	}
	if err := checkDB(u); err != nil {
		return redisOptions{}, err
	}
	master := q.Get("master_name")
	switch {
	case master != "" && s.master != "" && master != s.master:
		return redisOptions{}, fmt.Errorf("its master_name %q differs from --sentinel-master %q", master, s.master)
	case master != "" && s.cluster:
		return redisOptions{}, errors.New("a master_name (Sentinel) URL cannot be a --cluster")
	case (master != "" || s.master != "" || s.cluster || q.Has("addr")) && u.Scheme == "unix":
		return redisOptions{}, errors.New("a unix:// socket names one server, not a Cluster or Sentinels")
	case master != "" || s.master != "":
		o, err := redis.ParseFailoverURL(s.value)
		if err != nil {
			return redisOptions{}, goRedisReason(err)
		}
		if o.MasterName == "" {
			o.MasterName = s.master
		}
		return redisOptions{failover: o}, nil
	case s.cluster || q.Has("addr"):
		if db := strings.Trim(u.Path, "/"); db != "" && db != "0" {
			return redisOptions{}, fmt.Errorf("a Redis Cluster has only database 0, not %q", db)
		}
		o, err := redis.ParseClusterURL(s.value)
		if err != nil {
			return redisOptions{}, goRedisReason(err)
		}
		return redisOptions{cluster: o}, nil
	}
	o, err := redis.ParseURL(s.value)
	if err != nil {
		return redisOptions{}, goRedisReason(err)
	}
	return redisOptions{single: o}, nil
}

// checkHostPort checks what go-redis does not: that a URL's host holds no stray colon and its
// port, if any, is a port number.
func checkHostPort(u *url.URL) error {
	if strings.Contains(u.Host, ",") {
		return errors.New("a URL names one host: more nodes go in addr= parameters (redis://USER:PASSWORD@HOST:PORT?addr=HOST2:PORT2&addr=HOST3:PORT3)")
	}
	if strings.Contains(u.Hostname(), ":") && !strings.HasPrefix(u.Host, "[") {
		return fmt.Errorf("the host %q holds a colon: one :PORT only (an IPv6 address goes in brackets)", u.Hostname())
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("port %q is not a number from 1 to 65535", p)
		}
	}
	return nil
}

// maxPoolParam bounds a URL's connection counts (pool_size and the like): go-redis makes a
// pool's bookkeeping for pool_size connections at once, and panics past 2^31 - 1.
const maxPoolParam = 65535

// poolParams are the URL parameters that count a pool's connections.
var poolParams = []string{"pool_size", "pipeline_pool_size", "min_idle_conns", "max_idle_conns", "max_active_conns"}

// checkPoolParams refuses connection counts go-redis cannot make a pool with — a negative
// pool_size or a count past 2^31 - 1 panics in go-redis, and pool_size=2147483647 takes
// minutes to set up before any call, out of --timeout's reach — and, with them, any count
// above maxPoolParam, more connections than one address can open to a server. A count that
// is not a number is left to go-redis's parser.
func checkPoolParams(q url.Values) error {
	for _, name := range poolParams {
		if !q.Has(name) {
			continue
		}
		n, err := strconv.Atoi(q.Get(name))
		if errors.Is(err, strconv.ErrRange) || err == nil && (n > maxPoolParam || n < 0 && name == "pool_size") {
			return fmt.Errorf("%s %s is not a number from 0 (go-redis's default) to %d", name, q.Get(name), maxPoolParam)
		}
	}
	return nil
}

// checkDB refuses a URL's database number (its path, or for a socket its db= parameter, which
// go-redis reads for every URL) that go-redis takes but would not select: a negative one, for
// which it sends no SELECT (the commands would go to database 0), or one past what SELECT
// takes. A database that is not a number is left to go-redis's parser.
func checkDB(u *url.URL) error {
	dbs := []string{u.Query().Get("db")}
	if u.Scheme != "unix" {
		dbs = append(dbs, strings.Trim(u.Path, "/"))
	}
	for _, db := range dbs {
		n, err := strconv.ParseInt(db, 10, 32)
		switch {
		case err == nil && n < 0, errors.Is(err, strconv.ErrRange) && strings.HasPrefix(db, "-"):
			return fmt.Errorf("database %s is negative: a database is a number from 0, e.g. redis://localhost:6379/0", db)
		case errors.Is(err, strconv.ErrRange):
			return fmt.Errorf("database %s: too large (at most %d)", db, math.MaxInt32)
		}
	}
	return nil
}

// goRedisReason rewords an error of go-redis's URL parsers for a usage message.
func goRedisReason(err error) error {
	msg := strings.TrimPrefix(err.Error(), "redis: ")
	switch {
	case strings.HasPrefix(msg, "unexpected option: "):
		return fmt.Errorf("unknown URL parameter %s (go-redis's ParseURL lists the known ones)", strings.TrimPrefix(msg, "unexpected option: "))
	case strings.HasPrefix(msg, "invalid URL path"), strings.HasPrefix(msg, "invalid database number"):
		return errors.New("the path must be a database number, e.g. redis://localhost:6379/0")
	case strings.HasPrefix(msg, "unable to parse addr param: ") && strings.Contains(msg, ","):
		return fmt.Errorf("addr=%s: one HOST:PORT per addr= parameter; repeat it for more: addr=HOST:PORT&addr=HOST:PORT", strings.TrimPrefix(msg, "unable to parse addr param: "))
	}
	return errors.New(msg)
}

// urlParam is a URL parameter: its separator, name and value.
var urlParam = regexp.MustCompile(`([?&])([^=&#]*)=([^&#]*)`)

// redact returns s with every password masked: what follows the first ":" of a URL's user
// information (up to the last "@", so that an unencoded "@" or "/" in a password is masked
// too), the same in a mistyped USER:PASSWORD@HOST:PORT, user information without a ":" whole
// (redis-cli reads redis://PASSWORD@HOST as a password, go-redis as a user name), and the
// password and sentinel_password parameters, their names percent-encoded or not (go-redis
// decodes them). It works on text no parser accepts, and masks too much rather than too little.
func redact(s string) string {
	if at := strings.LastIndex(s, "@"); at >= 0 {
		start := 0
		if i := strings.Index(s, "://"); i >= 0 && i < at {
			start = i + len("://")
		}
		if c := strings.Index(s[start:at], ":"); c >= 0 {
			s = s[:start+c+1] + "xxxxx" + s[at:]
		} else if at > start {
			s = s[:start] + "xxxxx" + s[at:]
		}
	}
	return urlParam.ReplaceAllStringFunc(s, func(p string) string {
		m := urlParam.FindStringSubmatch(p)
		name, err := url.QueryUnescape(m[2])
		if err != nil {
			name = m[2]
		}
		if n := strings.ToLower(name); n == "password" || n == "sentinel_password" {
			return m[1] + m[2] + "=xxxxx"
		}
		return p
	})
}

package processor

import (
	"cmp"
	"context"
	cryptorand "crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/domain"
	dlerrors "github.com/dlockgo/dlock/errors"
)

var (
	//go:embed lua/prelude.lua
	preludeSrc string
	//go:embed lua/lock.lua
	lockSrc string
	//go:embed lua/renew.lua
	renewSrc string
	//go:embed lua/release.lua
	releaseSrc string
	//go:embed lua/leave.lua
	leaveSrc string
	//go:embed lua/inspect.lua
	inspectSrc string
	//go:embed lua/force.lua
	forceSrc string
	//go:embed lua/shared.lua
	sharedSrc string

	// bodies are the scripts' own text by name (the file name without ".lua"), without the
	// prelude.
	bodies = map[string]string{
		"lock": lockSrc, "renew": renewSrc, "release": releaseSrc,
		"leave": leaveSrc, "inspect": inspectSrc, "force": forceSrc,
	}
	// defaults are the scripts every processor runs unless Options.Scripts replaces some.
	defaults = newScripts(nil)
)

// scriptSet is the set of scripts a processor runs, by name, and their full text (the
// prelude, then the script).
type scriptSet struct {
	run     map[string]*script
	sources map[string]string
}

// script is one of the scripts, with its hash as go-redis takes a command's argument (boxed
// once, not at every request).
type script struct {
	*redis.Script
	hash any
	src  string
}

func newScript(src string) *script {
	s := redis.NewScript(src)
	return &script{Script: s, hash: s.Hash(), src: src}
}

// newScripts builds the scripts, the bodies of replace taking the place of the module's own.
func newScripts(replace map[string]string) *scriptSet {
	set := &scriptSet{run: map[string]*script{}, sources: map[string]string{}}
	prelude := preludeSrc
	if b, ok := replace["prelude"]; ok {
		prelude = b
	}
	for name, body := range bodies {
		if b, ok := replace[name]; ok {
			body = b
		}
		src := prelude + "\n-- " + name + ".lua\n" + body
		set.run[name], set.sources[name] = newScript(src), src
	}
	src := sharedSrc // the family's script stands alone
	if b, ok := replace["shared"]; ok {
		src = b
	}
	set.run["shared"], set.sources["shared"] = newScript(src), src
	return set
}

// Sources returns the scripts' own text by name ("lock", "renew", "release", "leave",
// "inspect", "force", and "prelude", which runs in front of each of them; and "shared", the
// read-write lock's and the semaphore's, which runs alone). The map is a copy.
func Sources() map[string]string {
	out := map[string]string{"prelude": preludeSrc, "shared": sharedSrc}
	for name, body := range bodies {
		out[name] = body
	}
	return out
}

// ScriptName names the script that an EVALSHA or EVAL command runs, given the command's
// arguments as go-redis holds them (Cmder.Args): the script's file name without ".lua", or ""
// for any other command. Tests use it to recognise a request of the module's own scripts.
func ScriptName(args []any) string {
	if len(args) < 2 {
		return ""
	}
	verb, _ := args[0].(string)
	body, _ := args[1].(string)
	for name, s := range defaults.run {
		switch strings.ToLower(verb) {
		case "evalsha", "evalsha_ro":
			if body == s.Hash() {
				return name
			}
		case "eval", "eval_ro":
			if body == defaults.sources[name] {
				return name
			}
		}
	}
	return ""
}

// FenceSuffix, ReleaseSuffix, LineSuffix, DoneSuffix, CheckSuffix, ForcedSuffix,
// RemovedSuffix, WantSuffix, GapSuffix and FirstSuffix name what is kept beside a lock key: domain's, where
// they are defined (a lock key may not name one of them: domain.NewDLockConfig).
const (
	FenceSuffix   = domain.FenceSuffix
	ReleaseSuffix = domain.ReleaseSuffix
	LineSuffix    = domain.LineSuffix
	DoneSuffix    = domain.DoneSuffix
	CheckSuffix   = domain.CheckSuffix
	ForcedSuffix  = domain.ForcedSuffix
	RemovedSuffix = domain.RemovedSuffix
	WantSuffix    = domain.WantSuffix
	GapSuffix     = domain.GapSuffix
	FirstSuffix   = domain.FirstSuffix
)

// RedisLockProcessor keeps locks in Redis through go-redis: Lua scripts (processor/lua) that
// take, renew and let go of the key, keep the line of waiting processes and hand out fencing
// tokens, all run by EVALSHA (EVAL when the server does not have the script yet). It works the
// same with a single server, Sentinel and Cluster clients, and with miniredis.
//
// The key only ever holds the locker of the acquisition whose own request wrote it: no script
// hands the key to a locker that did not ask, and none adopts a key by anything but the exact
// locker. A holder that lets the key go while other processes wait reserves it for the first
// of them ("reserved|<mark>"), which takes it with its own request; nobody else can.
//
// A locker is <owner><sequence number>, the owner ending in '-' (see SplitLocker), numbered in
// the order its owner makes them. Releasing an acquisition, giving it back, or failing to take
// the key settles it: the owner's settled mark beside the key ({K}:done:<owner>) rises to its
// number, and the scripts refuse any request of an acquisition at or below the mark. So a
// request that reaches Redis twice, or after its acquisition was settled, cannot take the key.
//
// Only NewRedisLockProcessor makes a working one. On a nil *RedisLockProcessor or a zero
// RedisLockProcessor{} every method that returns an error returns one wrapping
// errors.ErrInvalidConfig and sends nothing, and the others answer as for a processor that
// is not a Cluster client's (MasterOf "", Reload nothing, MarkLife at least DoneTTL). So does
// a request with a nil context or a zero domain.DLockConfig, which no valid lock has.
type RedisLockProcessor struct {
	client  redis.UniversalClient
	opts    Options
	scripts *scriptSet
	shard   atomic.Int32 // shardUnknown, shardPlain or shardSharded: how releases are published
	sent    atomic.Bool  // a script was handed to the client (Sent)
	asked   atomic.Int64 // when a Cluster client was last asked for a reload (Reload): time since epoch, 0 never
	longest sync.Map     // lock type → the longest lease (time.Duration) of a lock.lua on a key of it

	keysMu sync.Mutex
	keyMap map[keysOf]*keySet // the scripts' keys by lock key and owner (keys), at most maxCachedKeys; guarded by keysMu
}

// keysOf names the keys a script of one lock key sends for one owner.
type keysOf struct{ key, owner string }

// maxCachedKeys bounds the processor's cache of script keys: past it the cache starts again,
// so that a process that touches many keys keeps no more than this many sets.
const maxCachedKeys = 256

const (
	shardUnknown int32 = iota
	shardPlain
	shardSharded
)

// Options configures a RedisLockProcessor.
type Options struct {
	// Publish makes a release tell whom the key went to, on the channel of the process it
	// went to (ProcessChannel), and when it was left free, on the channels of the processes
	// in line. Default false.
	Publish bool
	// Mark is this process's name in the line of waiting processes: with Lock(Wait) a
	// process that finds the key held joins the line, and a release grants the key to the
	// first process in line that renewed its entry lately. Default "": this process never
	// joins the line (and is never granted the key). The lockers of its waiting attempts, its
	// leaves and the next attempts of its releases are the Mark's: Mark followed by a number
	// (SplitLocker); others are refused (ErrInvalidConfig).
	Mark string
	// Replicas, when > 0, makes every acquisition and renewal wait until that many replicas
	// have acknowledged it (WAIT, sent with the script on the same connection, since WAIT
	// counts the writes of its own connection), for at most ReplicaTimeout. An acquisition or
	// renewal that Redis ran but fewer replicas acknowledged in time returns a
	// RedisProcessError wrapping errors.ErrNotReplicated: its write stays in Redis, and the
	// caller treats it as an outcome it cannot rely on (gives it back, or retries the renewal).
	Replicas int
	// ReplicaTimeout bounds the wait for Replicas; it must be at least a millisecond when
	// Replicas is > 0 (WAIT counts whole milliseconds, and takes 0 as no bound), and below the
	// client's ReadTimeout (else the client gives up reading its answer first) — well below:
	// the client reads the script's reply and WAIT's under one deadline, which must also cover
	// the round trip and the script.
	ReplicaTimeout time.Duration
	// GapEvery, when > 0, makes a release leave the key free for GapWindow at most once every
	// GapEvery, instead of granting it to the first process in line: a window in which
	// processes that never stand in line (Java DLock) can take it. Default 0: never. Both
	// are whole milliseconds, and 0 < GapWindow < GapEvery when set (CheckWindow).
	GapEvery  time.Duration
	GapWindow time.Duration
	// Scripts replaces the text of scripts by name (as Sources names them; the prelude, put
	// in front of each, among them). It exists so that this module's tests can check that they
	// catch mutants of the scripts; production code leaves it nil. Default nil: the
	// module's own scripts.
	Scripts map[string]string
	// Tried, if set, is told the outcome of each try of a request as it comes, before the
	// request's later tries (its caller learns only the last, once they are over, and nothing
	// when it stopped waiting before), with when the try began: nil, or Redis's answer as an
	// error (redis.Nil, a redis.Error), when Redis answered; else the failure, also of a try
	// the next of which succeeds. It runs on the requesting goroutine and must not block.
	// Default nil.
	Tried func(err error, began time.Time)
}

// Message is what a lock's channel carries.
type Message struct {
	// Granted: a holder (From) let the key go, granted to Locker with the block of fencing
	// tokens from Token: the process that waits with Locker holds the key now; At is Redis's
	// clock (µs) as it ran the grant (0 when the message does not say: the form told to the
	// process of From, or a version before it). Published to the grantee as
	// "G|at=<At>|<From>|<Locker>|<Token>", to From's process as "G|<From>|<Locker>|<Token>".
	Granted bool
	// Released: a holder (From) let the key go free (nobody in line could be granted it), or
	// left it free for a window of Gap in which only processes not in line may take it.
	// Published as "R|<From>|<Gap ms>".
	Released bool
	// First: a holder (From) granted the key to the process before this one, or that process
	// left the line: this one is first in line now. Life is how long the key had to live as
	// the message was sent (0: it was free), negative when the message does not say (a
	// version before it, or a key set with no expiry). Published as "F|life=<ms>|<From>" (a
	// version before it published "F|<From>").
	First  bool
	Life   time.Duration
	From   string
	Locker string
	Token  uint64
	At     uint64
	Gap    time.Duration
}

// ParseMessage reads a message of a lock's channel; ok is false for anything else (such as a
// subscription's probe).
func ParseMessage(payload string) (m Message, ok bool) {
	kind, rest, ok := strings.Cut(payload, "|")
	if !ok {
		return Message{}, false
	}
	switch kind {
	case "F":
		life := time.Duration(-1)
		if l, more, ok := strings.Cut(rest, "|"); ok && strings.HasPrefix(l, "life=") {
			ms, err := strconv.ParseInt(l[len("life="):], 10, 64)
			if err != nil {
				return Message{}, false
			}
			if ms >= 0 {
				life = time.Duration(ms) * time.Millisecond
			}
			rest = more
		}
		return Message{First: true, Life: life, From: rest}, true
	case "R":
		i := strings.LastIndexByte(rest, '|')
		if i < 0 {
			return Message{}, false
		}
		gap, err := strconv.ParseInt(rest[i+1:], 10, 64)
		if err != nil {
			return Message{}, false
		}
		return Message{Released: true, From: rest[:i], Gap: time.Duration(gap) * time.Millisecond}, true
	case "G":
		var at uint64
		if a, more, ok := strings.Cut(rest, "|"); ok && strings.HasPrefix(a, "at=") {
			us, err := strconv.ParseUint(a[len("at="):], 10, 64)
			if err != nil {
				return Message{}, false
			}
			at, rest = us, more
		}
		i := strings.LastIndexByte(rest, '|')
		if i < 0 {
			return Message{}, false
		}
		tok, err := strconv.ParseUint(rest[i+1:], 10, 64)
		if err != nil {
			return Message{}, false
		}
		// From and Locker are lockers: <host>-<pid>-<nonce>-<n>, or another holder's value
		// (From only); the granted locker is the part after the last '|' but one.
		j := strings.LastIndexByte(rest[:i], '|')
		if j < 0 {
			return Message{}, false
		}
		return Message{Granted: true, From: rest[:j], Locker: rest[j+1 : i], Token: tok, At: at}, true
	}
	return Message{}, false
}

var _ DLockProcessor = (*RedisLockProcessor)(nil)

// errNotMade is the error of every request to a processor NewRedisLockProcessor did not make
// (nil or zero): it has no client to send it with.
var errNotMade = fmt.Errorf("%w: processor not made by NewRedisLockProcessor", dlerrors.ErrInvalidConfig)

// ready refuses, before anything is sent, a request to p when p was not made by
// NewRedisLockProcessor (nil or zero) or ctx is nil.
func (p *RedisLockProcessor) ready(ctx context.Context) error {
	if p == nil || p.scripts == nil || p.client == nil {
		return errNotMade
	}
	if ctx == nil {
		return fmt.Errorf("%w: nil context", dlerrors.ErrInvalidConfig)
	}
	return nil
}

// check is ready that also refuses a zero cfg (the zero DLockConfig, which names no key).
func (p *RedisLockProcessor) check(ctx context.Context, cfg domain.DLockConfig, tokens ...int) error {
	if err := p.ready(ctx); err != nil {
		return err
	}
	if cfg.IsZero() {
		return fmt.Errorf("%w: zero lock configuration", dlerrors.ErrInvalidConfig)
	}
	return checkTokens(tokens...)
}

// checkTokens returns an error wrapping errors.ErrInvalidConfig for a block of more than
// MaxTokens fencing tokens (the scripts would refuse it too, but as an error no caller tells
// from a fault).
func checkTokens(tokens ...int) error {
	for _, n := range tokens {
		if n > MaxTokens {
			return fmt.Errorf("%w: a block of %d fencing tokens (at most %d)", dlerrors.ErrInvalidConfig, n, MaxTokens)
		}
	}
	return nil
}

// CheckWindow returns an error wrapping errors.ErrInvalidConfig unless a window of length
// window every period every, for processes that never stand in line (Options.GapEvery), is
// one the scripts can keep: both whole milliseconds (Redis keeps them so; a window under a
// millisecond would be sent as 0, which Redis refuses as a time to live), 0 < window < every.
func CheckWindow(every, window time.Duration) error {
	if window <= 0 || window >= every || every%time.Millisecond != 0 || window%time.Millisecond != 0 {
		return fmt.Errorf("%w: a window of %v every %v for processes not in line", dlerrors.ErrInvalidConfig, window, every)
	}
	return nil
}

// NewRedisLockProcessor returns a processor over client. A nil client is an error wrapping
// errors.ErrInvalidConfig.
func NewRedisLockProcessor(client redis.UniversalClient, opts Options) (*RedisLockProcessor, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: nil redis client", dlerrors.ErrInvalidConfig)
	}
	if v := reflect.ValueOf(client); v.Kind() == reflect.Pointer && v.IsNil() {
		return nil, fmt.Errorf("%w: nil redis client (%T)", dlerrors.ErrInvalidConfig, client)
	}
	if !constructed(client) {
		return nil, fmt.Errorf("%w: redis client not made by go-redis's constructor (%T with no options: use redis.NewClient, NewClusterClient, NewFailoverClient or NewRing)", dlerrors.ErrInvalidConfig, client)
	}
	if e := nilEmbedded(client); e != "" {
		return nil, fmt.Errorf("%w: redis client %T wraps a nil client (%s): set it to a client made by redis.NewClient, NewClusterClient, NewFailoverClient or NewRing", dlerrors.ErrInvalidConfig, client, e)
	}
	if opts.GapEvery != 0 || opts.GapWindow != 0 {
		if err := CheckWindow(opts.GapEvery, opts.GapWindow); err != nil {
			return nil, err
		}
	}
	if opts.Replicas < 0 || (opts.Replicas > 0 && opts.ReplicaTimeout < time.Millisecond) {
		return nil, fmt.Errorf("%w: replica acknowledgement of %d replicas within %v", dlerrors.ErrInvalidConfig, opts.Replicas, opts.ReplicaTimeout)
	}
	if rt := ReadTimeout(client); opts.Replicas > 0 && rt > 0 && opts.ReplicaTimeout >= rt {
		// (the client would give up reading WAIT's answer first: a timeout, never ErrNotReplicated)
		return nil, fmt.Errorf("%w: replica acknowledgement within %v, not below the client's ReadTimeout (%v)", dlerrors.ErrInvalidConfig, opts.ReplicaTimeout, rt)
	}
	set := defaults
	if opts.Scripts != nil {
		for name := range opts.Scripts {
			if _, ok := bodies[name]; !ok && name != "shared" && name != "prelude" {
				return nil, fmt.Errorf("%w: no script %q to replace", dlerrors.ErrInvalidConfig, name)
			}
		}
		set = newScripts(opts.Scripts)
	}
	return &RedisLockProcessor{client: client, opts: opts, scripts: set}, nil
}

// constructed reports whether client, of go-redis's own client types, was made by its
// constructor: a zero value (&redis.Client{}) has no options (a *redis.Client's Options
// itself panics then, on its nil embedded base), and panics on its first command.
func constructed(client redis.UniversalClient) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	switch c := client.(type) {
	case interface{ Options() *redis.Options }:
		return c.Options() != nil
	case interface{ Options() *redis.ClusterOptions }:
		return c.Options() != nil
	case interface{ Options() *redis.RingOptions }:
		return c.Options() != nil
	}
	return true
}

// nilEmbedded says which nil client client embeds, directly or through the
// clients it embeds (a wrapper of the user's around a client it never set), or "": every
// command such a wrapper promotes panics, at the first Lock and on a goroutine of dlock's. A
// nil client is an embedded client interface or pointer left nil, a client interface holding a
// nil pointer, or one of go-redis's clients below the top not made by its constructor; an
// embedded interface that only shares a few methods with a client (a tracer, a Stringer) counts
// only if it carries a command dlock sends. It looks at the value only and calls none of its
// methods but go-redis's own Options (a mock's would count the call; a Cluster client's
// PoolStats may ask the servers for their slots). A wrapper that keeps its client in a named
// field is not seen.
func nilEmbedded(client redis.UniversalClient) string {
	v := reflect.ValueOf(client)
	for range 8 { // (a wrapper of a wrapper: a few levels at most)
		for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
			if v.IsNil() { // (only below the top: NewRedisLockProcessor refused a nil client)
				return "its " + v.Type().String() + " is nil"
			}
			v = v.Elem()
		}
		if v.Kind() != reflect.Struct {
			return ""
		}
		if goRedisClients[v.Type()] {
			if v.CanAddr() && !constructed(reflect.NewAt(v.Type(), v.Addr().UnsafePointer()).Interface().(redis.UniversalClient)) {
				return "its *" + v.Type().String() + " was not made by go-redis's constructor"
			}
			return ""
		}
		var next reflect.Value
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if !f.Anonymous {
				continue
			}
			fv, k := v.Field(i), f.Type.Kind()
			client := f.Type.Implements(universalClient) || k == reflect.Struct && reflect.PointerTo(f.Type).Implements(universalClient)
			if (k == reflect.Interface && (client || sends(f.Type)) || k == reflect.Pointer && client) && fv.IsNil() {
				return "its embedded " + f.Type.String() + " is nil"
			}
			if client && !next.IsValid() {
				next = fv
			}
		}
		if !next.IsValid() {
			return ""
		}
		v = next
	}
	return ""
}

// sends reports whether interface t, which a *redis.Client implements, has a command dlock
// sends (a Ping-only or Close-only interface embedded beside the client does not).
func sends(t reflect.Type) bool {
	if !goRedisClient.Implements(t) {
		return false
	}
	for _, name := range []string{"Process", "Pipelined", "Eval", "EvalSha", "ScriptLoad", "Get", "Subscribe", "SSubscribe", "Publish", "SPublish"} {
		if _, ok := t.MethodByName(name); ok {
			return true
		}
	}
	return false
}

var (
	universalClient = reflect.TypeFor[redis.UniversalClient]()
	goRedisClient   = reflect.TypeFor[*redis.Client]()
	goRedisClients  = map[reflect.Type]bool{reflect.TypeFor[redis.Client](): true, reflect.TypeFor[redis.ClusterClient](): true, reflect.TypeFor[redis.Ring](): true}
)

// ReadTimeout returns how long client waits for a reply (0 for no bound, or a client whose
// options it cannot read): a client's and a Cluster client's options hold go-redis's default
// already; a Ring's do not, and its shards' clients fill in the same default (5 s). A type
// that embeds one of them is read as that one.
func ReadTimeout(client redis.UniversalClient) time.Duration {
	var rt time.Duration
	switch c := client.(type) {
	case interface{ Options() *redis.Options }:
		rt = c.Options().ReadTimeout
	case interface{ Options() *redis.ClusterOptions }:
		rt = c.Options().ReadTimeout
	case interface{ Options() *redis.RingOptions }:
		if rt = c.Options().ReadTimeout; rt == 0 {
			rt = 5 * time.Second
		}
	}
	return max(rt, 0) // (-1 and -2: none, or no deadline set at all)
}

// Sharded reports whether release messages go by sharded pub/sub (SPUBLISH, to be received
// with SSUBSCRIBE): on a Cluster client whose servers have it (Redis 7), so that a message
// goes only to the shard that owns the key instead of every node. Plain pub/sub otherwise.
// The answer is asked of a server once (COMMAND INFO, sent to any master) and then kept; an
// error is not kept, but a user not allowed COMMAND INFO gets plain pub/sub. ShardedFor asks
// the master of a given key instead.
func (p *RedisLockProcessor) Sharded(ctx context.Context) (bool, error) {
	return p.ShardedFor(ctx, "")
}

// ShardedFor is Sharded asked of the master that serves key (any master for ""), the one a
// request for that key needs anyway: with another shard's master down or hung, a key on a
// healthy shard gets its answer at once.
func (p *RedisLockProcessor) ShardedFor(ctx context.Context, key string) (bool, error) {
	if err := p.ready(ctx); err != nil {
		return false, err
	}
	switch p.shard.Load() {
	case shardPlain:
		return false, nil
	case shardSharded:
		return true, nil
	}
	cc, ok := p.client.(*redis.ClusterClient)
	if !ok {
		p.shard.Store(shardPlain)
		return false, nil
	}
	q := redis.NewSliceCmd(ctx, "command", "info", "spublish")
	if key != "" {
		// Named as the command's key, it routes the question to its slot's master, through the
		// Cluster client and its hooks as any request; COMMAND INFO answers nil for it (no
		// command has that name).
		q = redis.NewSliceCmd(ctx, "command", "info", "spublish", key)
		q.SetFirstKeyPos(3)
	}
	_ = cc.Process(ctx, q)
	info, err := q.Result()
	if redis.IsPermissionError(err) {
		// A user not allowed COMMAND INFO: plain pub/sub, which a Cluster serves too (the
		// scripts publish with pcall: a refused PUBLISH tells nobody, and waiters poll).
		p.shard.Store(shardPlain)
		return false, nil
	}
	if err != nil {
		p.fail(err)
		return false, processErr(opCommandInfo, "", err)
	}
	if len(info) > 0 && info[0] != nil { // (spublish's entry; the key's, if named, is nil)
		p.shard.Store(shardSharded)
		return true, nil
	}
	p.shard.Store(shardPlain)
	return false, nil
}

// publishCommand is the command the scripts publish cfg's release messages with.
func (p *RedisLockProcessor) publishCommand(ctx context.Context, cfg domain.DLockConfig) (string, error) {
	if !p.opts.Publish {
		return "publish", nil
	}
	sharded, err := p.ShardedFor(ctx, cfg.UniqueKey())
	if err != nil {
		return "", err
	}
	if sharded {
		return "spublish", nil
	}
	return "publish", nil
}

// fail is told of every failed request. On a Cluster client it asks for the cluster's
// topology to be reloaded (go-redis does that at once only on MOVED replies, and otherwise
// every ClusterStateReloadInterval, a minute by default): after a master died, requests and
// subscriptions then reach the promoted replica as soon as the cluster knows of it.
func (p *RedisLockProcessor) fail(err error) {
	if err != nil && !errors.Is(err, redis.Nil) {
		p.Reload()
	}
}

// MasterOf returns the address of the master that a Cluster client sends key's commands to
// now ("" for other clients, or when it cannot tell).
func (p *RedisLockProcessor) MasterOf(ctx context.Context, key string) string {
	if p.ready(ctx) != nil {
		return ""
	}
	cc, ok := p.client.(*redis.ClusterClient)
	if !ok {
		return ""
	}
	node, err := cc.MasterForKey(ctx, key)
	if err != nil {
		return ""
	}
	return node.Options().Addr
}

// reloadEvery is the least time between two asks of a processor for a reload (Reload). go-redis
// runs one reload at a time and pauses 200 ms after one that succeeded, running one more if
// asked meanwhile; but it ends one that failed (no node answers, or the server has no Cluster)
// at once, with no pause, and the next ask starts another: asked after every failed request,
// and every 10 ms by each request waiting for a new master (moved), it sent CLUSTER SLOTS to
// the seed nodes hundreds of times a second per process while the Cluster was down. Asks
// 100 ms apart still fall within each of go-redis's pauses, so a failover is followed as soon.
const reloadEvery = 100 * time.Millisecond

// epoch is what RedisLockProcessor.asked counts from (monotonic).
var epoch = time.Now()

// Reload asks a Cluster client to reload the cluster's topology (see fail), unless this
// processor asked less than reloadEvery ago; other clients ignore it. Safe for concurrent use.
func (p *RedisLockProcessor) Reload() {
	if p == nil {
		return
	}
	cc, ok := p.client.(*redis.ClusterClient)
	if !ok {
		return
	}
	now, last := int64(time.Since(epoch)), p.asked.Load()
	if last != 0 && now-last < int64(reloadEvery) || !p.asked.CompareAndSwap(last, now) {
		return
	}
	cc.ReloadState(context.Background())
}

// run runs script s with keys (the lock key first). With replica acknowledgement on and ack
// set, it sends WAIT after the script on the same connection to the key's master, and
// returns how many replicas acknowledged (acked is -1 when not asked).
//
// The client sends each script once (onceCmd), and run follows a failure itself, so that it
// knows whether any copy may have run: when none can have (each try failed to get a
// connection — a refused dial, the pool's timeout — or the server refused it before running
// any of it, refused: a replica's READONLY, MOVED, LOADING), its error says so (Unsent) and
// the caller has nothing to give back (a client's hook that sends a command again itself, or changes its error, defeats
// this). With go-redis's own retries a refused dial on the last try proved nothing: an
// earlier try could have been written before Redis went down, and a TryLock that Redis refused
// left a give-back that Close waited for, for about a lease.
//
// On a plain or Sentinel client a failed request is sent again as go-redis would have (again),
// as many times as the client's MaxRetries, after its back-off; a Ring, or a request with WAIT
// (a pipeline), keeps go-redis's own retries and never says Unsent.
//
// On a Cluster client, a request that could not reach the master its slot map named (a refused
// dial, a dropped connection), or that the node answered with MOVED (with WithReplicaAck the
// script and WAIT go to the node itself, which follows no redirection: after CLUSTER FAILOVER
// the old master, a replica now, answers MOVED), or with a reply go-redis tries again
// (CLUSTERDOWN, TRYAGAIN, LOADING, ...), is sent again to the master it should go to (see
// moved), as many times as the client's MaxRedirects (3 by default): after a completed
// failover the client would otherwise send it to the dead master again, its tries (the first
// and MaxRedirects more, each dialling five times) longer than the quarter of a 5 s lease a
// renewal has left.
//
// Each copy is the same request (same locker, same arguments): the scripts are safe to run
// twice, and the last answer says what became of all; the callers count a lease from before
// the first send.
func (p *RedisLockProcessor) run(ctx context.Context, s *script, ack bool, keys []string, cmd []any) (res *redis.Cmd, acked int64, err error) {
	defer func() { p.fail(err) }()
	defer func() {
		if r := recover(); r != nil {
			res, acked, err = nil, 0, Panicked(r)
		}
	}()
	p.sent.Store(true)
	ran := false // a copy may have run
	defer func() {
		if err != nil && !ran {
			err = unsentErr{err}
		}
	}()
	try := func(node *redis.Client, once bool) {
		began := time.Now()
		res, acked, err = p.send(ctx, s, ack, node, once, keys, cmd)
		if p.opts.Tried != nil {
			p.opts.Tried(err, began)
		}
		ran = ran || !unwritten(err) && !declined(err) || ack && p.opts.Replicas > 0
	}
	switch c := p.client.(type) {
	case *redis.ClusterClient:
		node, nerr := c.MasterForKey(ctx, keys[0])
		if nerr != nil {
			return nil, 0, nerr
		}
		try(node, true)
		for n := range c.Options().MaxRedirects {
			if node = p.moved(ctx, c, keys[0], node.Options().Addr, n+1, err); node == nil {
				break
			}
			try(node, true)
		}
		return res, acked, err
	case *redis.Client:
		if !ack || p.opts.Replicas == 0 {
			o := c.Options()
			try(nil, true)
			for n := range o.MaxRetries {
				if !again(err) || sleep(ctx, backoff(n+1, o.MinRetryBackoff, o.MaxRetryBackoff)) != nil {
					break
				}
				try(nil, true)
			}
			return res, acked, err
		}
	}
	try(nil, false) // a Ring, or a request with WAIT on a plain client (a pipeline): go-redis's own retries
	ran = true
	return res, acked, err
}

// unsentErr is the failure of a request no copy of which ran (Unsent).
type unsentErr struct{ error }

func (e unsentErr) Unwrap() error { return e.error }

// unwritten reports whether err is a failure to get a connection for a request (a dial that
// failed, the pool's timeout, a Sentinel client's failure to learn the master's address, which
// its dial asks first): nothing of it was written.
func unwritten(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial" || errors.Is(err, redis.ErrPoolTimeout) ||
		err != nil && strings.HasPrefix(err.Error(), "redis: all sentinels specified in configuration are unreachable")
}

// declined reports whether err is the server's refusal of a request that changed nothing: not
// yet (loading, a master or cluster down, a slot migrating), not here (MOVED, ASK), an unknown
// script (NOSCRIPT), too many clients — each refused before the script starts — or a replica's
// READONLY (Redis 7 runs a script without flags on a replica until its first write, which
// fails: no key is written; a publish before it would go out, and the scripts publish only
// after a write, TestRequestsOnAReplicaTellNobody). Not an ACL refusal, nor any error a
// script's own call raised: what the script did before it stays.
func declined(err error) bool {
	return replied(err, notYet...) || replied(err, "MOVED", "ASK") || noScript(err)
}

// notYet are the replies of a server that cannot run a request yet: loading, a replica now, a
// master or cluster down, a slot migrating, too many clients.
var notYet = []string{"LOADING", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "max number of clients reached"}

// replied reports whether err is a reply of the server's that begins with one of prefixes.
func replied(err error, prefixes ...string) bool {
	for _, prefix := range prefixes {
		if redis.HasErrorPrefix(err, prefix) {
			return true
		}
	}
	return false
}

// again reports whether err is a failure after which run sends a request again: the
// connection failed (unreached — go-redis too sends again after a dial's failure, EOF or a
// timeout, though not after a reset, whose outcome a copy learns as well — or the pool's
// timeout), or the server answered that it cannot run it yet (notYet, or too few replicas), as
// go-redis does.
func again(err error) bool {
	return unreached(err) || errors.Is(err, redis.ErrPoolTimeout) || replied(err, notYet...) || replied(err, "NOREPLICAS")
}

// backoff is the pause before try n (the first is 0) as go-redis's: random, between lo and
// lo plus lo times 2 to the power n, at most hi; none when lo or hi is 0 (or less).
func backoff(n int, lo, hi time.Duration) time.Duration {
	if lo <= 0 || hi <= 0 {
		return 0
	}
	if hi <= lo {
		return hi
	}
	d := lo << n
	if d < lo || d > hi {
		d = hi
	}
	return min(hi, lo+rand.N(d))
}

// sleep pauses for d, or until ctx ends (its error then).
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// command begins the EVALSHA of s with keys as go-redis sends it — "evalsha", the script's
// hash, the number of keys, the keys (boxed, when not nil, is keys as go-redis takes them,
// boxed once) — with room for n arguments after them. run sends it whole.
func command(s *script, keys []string, boxed []any, n int) []any {
	c := make([]any, 3+len(keys), 3+len(keys)+n)
	c[0], c[1], c[2] = "evalsha", s.hash, len(keys)
	if boxed != nil {
		copy(c[3:], boxed)
	} else {
		for i, k := range keys {
			c[3+i] = k
		}
	}
	return c
}

// noScript reports whether err is the server's answer to an EVALSHA of a script it does not
// have.
func noScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}

// reloadWait bounds how long a request on a Cluster client that could not reach the key's
// master waits for the reloaded slot map to name the master to send it to before it fails (see
// run): long enough for a few of go-redis's reloads, which run at most every 200 ms.
const reloadWait = time.Second

// onceCmd is a script's command that the client sends once: go-redis does not send it again
// after a failure (a Cluster client still follows MOVED and ASK); run does (see there), and so
// knows whether any copy may have run.
type onceCmd struct{ *redis.Cmd }

// NoRetry tells go-redis not to send the command again after a failure.
func (onceCmd) NoRetry() bool { return true }

// moved returns the master to send a request again to, which failed with err at the master at
// was, for the nth time: for a MOVED answer the master it names (the node that answered knows);
// for a reply go-redis tries again after a pause (again: CLUSTERDOWN while another master is
// marked failed, TRYAGAIN during a slot migration, LOADING, READONLY from a master turned
// replica) the master the map names after that pause (go-redis's back-off), asking for a
// reload; for a request whose connection broke once made (reset, closed, timed out) the master
// the map names now, at once (as go-redis's own retry did: a live master's connection may have
// gone stale); for a request that could not connect to was, another master for key — once cc's
// slot map names it. It asks for reloads of the map until then, for at most reloadWait and
// while ctx lasts; nil if none.
//
// A reload may store a map older than the MOVED answer, or one without key's slot (a node that
// heard the old master turn replica before it heard the new master's claim drops the slot for
// a moment; go-redis sends a slot missing from its map to a random node), so any change of the
// map is not enough; and go-redis drops a reload asked for while one is under way, which may
// have asked a node before the failover reached it, so the reload is asked for again until the
// map names the master.
func (p *RedisLockProcessor) moved(ctx context.Context, cc *redis.ClusterClient, key, was string, n int, err error) *redis.Client {
	to, redirected := redis.IsMovedError(err)
	if !redirected && !again(err) || ctx.Err() != nil {
		return nil
	}
	var op *net.OpError
	if !redirected && !(errors.As(err, &op) && op.Op == "dial") {
		p.Reload()
		if !unreached(err) {
			o := cc.Options()
			if sleep(ctx, backoff(n, o.MinRetryBackoff, o.MaxRetryBackoff)) != nil {
				return nil
			}
		}
		node, err := cc.MasterForKey(ctx, key)
		if err != nil {
			return nil
		}
		return node
	}
	limit := time.NewTimer(reloadWait)
	defer limit.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if node, err := cc.MasterForKey(ctx, key); err == nil {
			now := node.Options().Addr
			if redirected && sameNode(now, to) || !redirected && now != was {
				return node
			}
		}
		p.Reload()
		select {
		case <-ctx.Done():
			return nil
		case <-limit.C:
			return nil
		case <-tick.C:
		}
	}
}

// sameNode reports whether addr, an address in a Cluster client's slot map, is the node a MOVED
// answer names as moved: the same, or the same port where moved is a loopback address (go-redis
// puts the host it reached the cluster by in place of the loopback addresses nodes announce).
func sameNode(addr, moved string) bool {
	if addr == moved {
		return true
	}
	host, port, err := net.SplitHostPort(moved)
	_, mapPort, _ := net.SplitHostPort(addr)
	ip := net.ParseIP(host)
	return err == nil && port == mapPort && ip != nil && ip.IsLoopback()
}

// unreached reports whether err says the connection to the server failed (a dial refused or
// timed out, a connection reset or closed), rather than the server answering with an error.
func unreached(err error) bool {
	var re redis.Error
	if err == nil || errors.As(err, &re) {
		return false
	}
	var op *net.OpError
	return errors.As(err, &op) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// send is run's request: the script, and WAIT after it when asked, on node (a Cluster
// client's master for the key; nil for other clients). A request without WAIT goes through
// the client, which routes it (and follows MOVED itself).
func (p *RedisLockProcessor) send(ctx context.Context, s *script, ack bool, node *redis.Client, once bool, keys []string, cmd []any) (res *redis.Cmd, acked int64, err error) {
	args := cmd[3+len(keys):]
	if !ack || p.opts.Replicas == 0 {
		// As s.Run, with the command built once: EVALSHA, then EVAL if the server does not
		// have the script.
		process := func(cmd []any) *redis.Cmd {
			res := redis.NewCmd(ctx, cmd...)
			if len(keys) > 0 {
				res.SetFirstKeyPos(3)
			}
			if once {
				_ = p.client.Process(ctx, onceCmd{res}) // (run follows a failure itself)
			} else {
				_ = p.client.Process(ctx, res)
			}
			return res
		}
		res = process(cmd)
		if noScript(res.Err()) {
			eval := slices.Clone(cmd)
			eval[0], eval[1] = "eval", s.src
			res = process(eval)
		}
		return res, -1, res.Err()
	}
	var c redis.Cmdable = p.client
	if node != nil {
		c = node
	}
	send := func(eval func(redis.Pipeliner) *redis.Cmd) (*redis.Cmd, *redis.Cmd) {
		var res *redis.Cmd
		var wait *redis.Cmd
		_, _ = c.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			res = eval(pipe)
			wait = pipe.Do(ctx, "wait", p.opts.Replicas, ms(p.opts.ReplicaTimeout))
			return nil
		})
		return res, wait
	}
	res, wait := send(func(pipe redis.Pipeliner) *redis.Cmd { return s.EvalSha(ctx, pipe, keys, args...) })
	if err := res.Err(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
		res, wait = send(func(pipe redis.Pipeliner) *redis.Cmd { return s.Eval(ctx, pipe, keys, args...) })
	}
	if err := res.Err(); err != nil {
		return res, 0, err
	}
	n, err := wait.Int64()
	if err != nil { // (its write stays: given back or retried as for too few replicas, and a refusal of WAIT by an ACL is told as such)
		return res, 0, fmt.Errorf("%w: WAIT failed: %w", dlerrors.ErrNotReplicated, err)
	}
	return res, n, nil
}

// acked checks a successful write's acknowledgement (acked as run returns it).
func (p *RedisLockProcessor) acked(op, key string, acked int64) error {
	if acked >= 0 && acked < int64(p.opts.Replicas) {
		return processErr(op, key, fmt.Errorf("%w: %d of %d replicas within %v", dlerrors.ErrNotReplicated, acked, p.opts.Replicas, p.opts.ReplicaTimeout))
	}
	return nil
}

// ReleaseChannel is the prefix of cfg's release channels: the scripts tell each process on a
// channel of its own (ProcessChannel), so that a grant wakes only the process it goes to.
func ReleaseChannel(cfg domain.DLockConfig) string { return cfg.SideKey(ReleaseSuffix) }

// ProcessChannel is the channel on which the process whose mark is mark hears of cfg's lock:
// a grant to it, the key left free while it stands in line, or an operator's removal of its
// holding. It shares the lock key's Cluster slot.
func ProcessChannel(cfg domain.DLockConfig, mark string) string {
	return ReleaseChannel(cfg) + ":" + mark
}

// FenceKey is the key of cfg's fencing counter.
func FenceKey(cfg domain.DLockConfig) string { return cfg.SideKey(FenceSuffix) }

// LineKey is the key of cfg's line of waiting processes, by arrival.
func LineKey(cfg domain.DLockConfig) string { return cfg.SideKey(LineSuffix) }

// DoneKey is the key of owner's settled mark.
func DoneKey(cfg domain.DLockConfig, owner string) string {
	return cfg.SideKey(DoneSuffix + ":" + owner)
}

// CheckKey is the key of owner's checked mark: the largest yield check number that ran.
func CheckKey(cfg domain.DLockConfig, owner string) string {
	return cfg.SideKey(CheckSuffix + ":" + owner)
}

// ForcedKey is the key that names owner's locker an operator removed last (ForceRelease).
func ForcedKey(cfg domain.DLockConfig, owner string) string {
	return cfg.SideKey(ForcedSuffix + ":" + owner)
}

// RemovedKey is the key that keeps, while the marks of locker live, which request of an
// operator's removed it (ForceRelease) and whom the key went to then: a copy of that request
// answers so (Settled).
func RemovedKey(cfg domain.DLockConfig, locker string) string {
	return cfg.SideKey(RemovedSuffix + ":" + locker)
}

// checkRequestName refuses a force's request name that is empty or holds a '|', which
// separates it from what the scripts keep beside it.
func checkRequestName(request string) error {
	if request == "" || strings.Contains(request, "|") {
		return fmt.Errorf("%w: a force's request name %q is empty or holds a '|'", dlerrors.ErrInvalidConfig, request)
	}
	return nil
}

// requestName returns a fresh name for a request: 16 random hex digits.
func requestName() string {
	var b [8]byte
	_, _ = cryptorand.Read(b[:]) // (never fails: crypto/rand panics rather than return an error)
	return hex.EncodeToString(b[:])
}

// WantKey is the key of what each process in cfg's line waits with (the locker a release
// grants the key to).
func WantKey(cfg domain.DLockConfig) string { return cfg.SideKey(WantSuffix) }

// FirstKey is the key of the first token of the key's current holding: how far down its
// release may lower the fencing counter.
func FirstKey(cfg domain.DLockConfig) string { return cfg.SideKey(FirstSuffix) }

// GapKey is the key of the window in which cfg's key is left free for processes not in line.
func GapKey(cfg domain.DLockConfig) string { return cfg.SideKey(GapSuffix) }

// keys returns the keys of a script of cfg's lock for owner (newKeys) from a small cache: a
// hot key's requests build them once, not at every request (nine strings each), and box them
// for go-redis once. The set is shared: no caller may change it.
func (p *RedisLockProcessor) keys(cfg domain.DLockConfig, owner string) *keySet {
	k := keysOf{cfg.UniqueKey(), owner}
	p.keysMu.Lock()
	ks, ok := p.keyMap[k]
	p.keysMu.Unlock()
	if ok {
		return ks
	}
	ks = &keySet{keys: newKeys(cfg, owner), channel: ReleaseChannel(cfg)}
	ks.boxed = make([]any, len(ks.keys))
	for i, key := range ks.keys {
		ks.boxed[i] = key
	}
	p.keysMu.Lock()
	if p.keyMap == nil || len(p.keyMap) >= maxCachedKeys {
		p.keyMap = make(map[keysOf]*keySet)
	}
	p.keyMap[k] = ks
	p.keysMu.Unlock()
	return ks
}

// keySet is what the processor keeps of a lock key for one owner (keys): the scripts' keys,
// the same boxed as go-redis takes a command's arguments, the key's release channel, and the
// boxed arguments of its last setting (base).
type keySet struct {
	keys    []string
	boxed   []any
	channel string
	base    atomic.Pointer[baseArgs]
}

// baseVals are the arguments of a key's requests that follow from its settings: base's, and
// the lease of the handle.
type baseVals struct {
	lease, fenceTTL, entryTTL, doneTTL, gapEvery, gapWindow time.Duration
	mark, channel, publish                                  string
}

// baseArgs are baseVals as go-redis takes a command's arguments, boxed once for as long as the
// settings stay the same, not at every request.
type baseArgs struct {
	of                                                      baseVals
	lease, fenceTTL, entryTTL, doneTTL, gapEvery, gapWindow any
	mark, channel, publish                                  any
}

// boxes returns the boxed arguments of v, kept in ks while v stays the key's setting.
func (ks *keySet) boxes(v baseVals) *baseArgs {
	if b := ks.base.Load(); b != nil && b.of == v {
		return b
	}
	b := &baseArgs{of: v, lease: msOrNone(v.lease), fenceTTL: msOrNone(v.fenceTTL), entryTTL: msOrNone(v.entryTTL),
		doneTTL: msOrNone(v.doneTTL), gapEvery: msOrNone(v.gapEvery), gapWindow: msOrNone(v.gapWindow),
		mark: v.mark, channel: v.channel, publish: v.publish}
	ks.base.Store(b)
	return b
}

// ms returns d as msOrNone writes it, boxed: from b when it is one of its durations.
func (b *baseArgs) ms(d time.Duration) any {
	if d <= 0 {
		return ""
	}
	if b != nil {
		switch d {
		case b.of.lease:
			return b.lease
		case b.of.fenceTTL:
			return b.fenceTTL
		case b.of.entryTTL:
			return b.entryTTL
		case b.of.doneTTL:
			return b.doneTTL
		case b.of.gapEvery:
			return b.gapEvery
		case b.of.gapWindow:
			return b.gapWindow
		}
	}
	return msOrNone(d)
}

// str returns s boxed: from b when it is one of its strings.
func (b *baseArgs) str(s string) any {
	if s == "" {
		return ""
	}
	if b != nil {
		switch s {
		case b.of.mark:
			return b.mark
		case b.of.channel:
			return b.channel
		case b.of.publish:
			return b.publish
		}
	}
	return s
}

// newKeys returns the nine keys every script takes, with owner's settled, checked and forced
// marks.
func newKeys(cfg domain.DLockConfig, owner string) []string {
	return []string{cfg.UniqueKey(), FenceKey(cfg), LineKey(cfg), DoneKey(cfg, owner),
		CheckKey(cfg, owner), ForcedKey(cfg, owner), WantKey(cfg), GapKey(cfg), FirstKey(cfg)}
}

// args are a script's arguments by name. Every script takes them in the one order the
// prelude's table A declares (argNames); a request sets what it carries and leaves the rest
// zero, sent empty. The arguments few requests carry come last, and list leaves out the empty
// ones at the end: each one Redis need not read saves the scripts' time.
type args struct {
	locker, seq         string
	lease               time.Duration
	mark                string
	wait, listening     bool
	tokens              int
	last                uint64
	fenceTTL, entryTTL  time.Duration
	doneTTL             time.Duration
	channel, publish    string
	gapEvery, gapWindow time.Duration
	yield               bool
	check, next         string
	nextLease           time.Duration
	nextTokens          int
	upto                string
	maxListed           int
	origin              uint64
	unreleased          []Unreleased
	request             string

	boxes *baseArgs // the settings' arguments boxed (base), nil for none
}

// argNames is the order of the prelude's table A, which list follows.
var argNames = []string{"locker", "seq", "lease", "mark", "wait", "listening", "tokens", "last", "fence_ttl",
	"entry_ttl", "done_ttl", "channel", "publish", "gap_every", "gap_window", "yield", "check",
	"next", "next_lease", "next_tokens", "upto", "max_listed", "origin", "unreleased", "unreleased_origin", "request"}

// list writes the arguments in argNames's order, without the empty ones at the end.
func (a args) list() []any {
	return a.appendTo(nil)
}

// appendTo appends the arguments to l in argNames's order, without the empty ones at the end.
func (a args) appendTo(l []any) []any {
	l = a.appendAll(l)
	for len(l) > 0 && l[len(l)-1] == "" {
		l = l[:len(l)-1]
	}
	return l
}

// all writes every argument in argNames's order.
func (a args) all() []any {
	return a.appendAll(nil)
}

// appendAll appends every argument to l in argNames's order, as go-redis takes a command's
// arguments (numbers sent as their decimal text): those of the settings from a.boxes when
// they are its own, the rest boxed here.
func (a args) appendAll(l []any) []any {
	b := a.boxes
	lockers, origins := unreleasedArgs(a.unreleased)
	return append(l, b.str(a.locker), b.str(a.seq), b.ms(a.lease), b.str(a.mark), flag(a.wait), flagOrNone(a.listening), a.tokens,
		last(a.last), b.ms(a.fenceTTL), b.ms(a.entryTTL), b.ms(a.doneTTL), b.str(a.channel), b.str(a.publish),
		b.ms(a.gapEvery), b.ms(a.gapWindow), flagOrNone(a.yield), b.str(a.check), b.str(a.next),
		b.ms(a.nextLease), countOrNone(a.nextTokens), b.str(a.upto), countOrNone(a.maxListed), last(a.origin),
		lockers, origins, a.request)
}

// unreleasedArgs writes the retried releases u as the scripts read them: their lockers, then
// their holdings' first tokens ("0" if unknown), each separated by spaces, oldest first.
func unreleasedArgs(u []Unreleased) (lockers, origins string) {
	if len(u) == 0 {
		return "", ""
	}
	l, o := make([]string, len(u)), make([]string, len(u))
	for i, r := range u {
		l[i], o[i] = r.Locker, strconv.FormatUint(r.Origin, 10)
	}
	return strings.Join(l, " "), strings.Join(o, " ")
}

// flagOrNone writes a flag the scripts read only when it is set: '1', or empty for none.
func flagOrNone(b bool) any {
	if b {
		return "1"
	}
	return ""
}

// countOrNone writes a positive count, or empty for none.
func countOrNone(n int) any {
	switch {
	case n <= 0:
		return ""
	case n == 1:
		return "1"
	}
	return strconv.Itoa(n)
}

func flag(b bool) any {
	if b {
		return "1"
	}
	return "0"
}

// msOrNone writes a duration in milliseconds, or ” for none.
func msOrNone(d time.Duration) string {
	if d <= 0 {
		return ""
	}
	return strconv.FormatInt(d.Milliseconds(), 10)
}

// base returns the arguments every write of cfg's lock carries: the lives of what it keeps
// beside the key, the window for processes not in line, and how it publishes.
// ks is the key's set (keys), which keeps them boxed.
func (p *RedisLockProcessor) base(ctx context.Context, cfg domain.DLockConfig, ks *keySet) (args, error) {
	pub, err := p.publishCommand(ctx, cfg)
	if err != nil {
		return args{}, err
	}
	channel := ""
	if p.opts.Publish {
		channel = ks.channel
	}
	v := baseVals{lease: cfg.Lease(), fenceTTL: FenceTTL(cfg), entryTTL: EntryTTL(cfg), doneTTL: p.MarkLife(cfg),
		gapEvery: p.opts.GapEvery, gapWindow: p.opts.GapWindow, mark: p.opts.Mark, channel: channel, publish: pub}
	return args{mark: v.mark, fenceTTL: v.fenceTTL, entryTTL: v.entryTTL, doneTTL: v.doneTTL,
		gapEvery: v.gapEvery, gapWindow: v.gapWindow, channel: v.channel, publish: v.publish, boxes: ks.boxes(v)}, nil
}

// script runs the script called name with the keys of ks and a's arguments (run).
func (p *RedisLockProcessor) script(ctx context.Context, name string, ack bool, ks *keySet, a args) (*redis.Cmd, int64, error) {
	s := p.scripts.run[name]
	return p.run(ctx, s, ack, ks.keys, a.appendTo(command(s, ks.keys, ks.boxed, len(argNames))))
}

// unreleased checks that each of u names a locker of owner (the request's, whose settled
// mark its script raises) with a sequence number.
func unreleased(u []Unreleased, owner string) ([]Unreleased, error) {
	for _, r := range u {
		if o, seq := SplitLocker(r.Locker); o != owner || seq == "" || strings.ContainsFunc(r.Locker, unicode.IsSpace) {
			return nil, fmt.Errorf("%w: unreleased locker %q is not one of %q (the request's owner) with a number and no spaces", dlerrors.ErrInvalidConfig, r.Locker, owner)
		}
	}
	return u, nil
}

// SplitLocker splits a locker into its owner (up to and including the last '-') and its
// sequence number (the decimal digits after it). A locker of another form has no number:
// its requests are not guarded by a settled mark.
func SplitLocker(locker string) (owner, seq string) {
	i := strings.LastIndexByte(locker, '-')
	if i < 0 || i == len(locker)-1 || len(locker)-i > 16 {
		return locker, ""
	}
	for _, c := range locker[i+1:] {
		if c < '0' || c > '9' {
			return locker, ""
		}
	}
	return locker[:i+1], locker[i+1:]
}

// FenceTTL is how long the fencing counter is kept after the key's last acquisition or
// renewal: two leases. Tokens never fall below the server clock in microseconds, so the
// counter only matters within that window (many acquisitions in a microsecond, or the server
// clock stepping back); beyond it tokens rest on the server clock alone.
func FenceTTL(cfg domain.DLockConfig) time.Duration { return 2 * cfg.Lease() }

// DoneTTL is how long a settled mark lasts at least after the owner's last settle on the key
// (a release, give-back, failed attempt, yield or leave): two leases. MarkLife is how long it
// lasts.
func DoneTTL(cfg domain.DLockConfig) time.Duration { return 2 * cfg.Lease() }

// MarkLife is how long a settled mark that p writes for the key of cfg lasts after its last
// settle: two of the longest lease that an acquisition (lock.lua) of p on a key of cfg's type
// carried, and at least DoneTTL(cfg). A settle may carry a shorter lease than an acquisition
// it settles (a taker's shorter lease, a leave after a longer-leased waiter gave up), and the
// mark must outlive that acquisition's copies as long. Only lock.lua counts: a copy of a
// renewal or of Extend never takes a key back, so Extend's long leases do not make every mark
// of the type live long. (Leases are set per lock type, so the type bounds the map to a few
// entries.) A request delayed on its way to Redis for longer than that could still take the
// key (which then expires with its lease, unrenewed) or put its process in line (until the
// entry expires).
func (p *RedisLockProcessor) MarkLife(cfg domain.DLockConfig) time.Duration {
	l := cfg.Lease()
	if p == nil {
		return 2 * l
	}
	if v, ok := p.longest.Load(cfg.LockType()); ok {
		l = max(l, v.(time.Duration))
	}
	return 2 * l
}

// raise makes cfg's lease count in MarkLife.
func (p *RedisLockProcessor) raise(cfg domain.DLockConfig) {
	l := cfg.Lease()
	for {
		v, loaded := p.longest.LoadOrStore(cfg.LockType(), l)
		if !loaded || v.(time.Duration) >= l || p.longest.CompareAndSwap(cfg.LockType(), v, l) {
			return
		}
	}
}

// opCommandInfo names Sharded's question in its errors (Unsent).
const opCommandInfo = "command-info"

// Unsent reports whether err is a request's failure before it was sent: the question it
// needs answered first, whether the servers have sharded pub/sub (Sharded), failed (a Cluster
// client on a server without Cluster, a Cluster it cannot reach), or no copy of it ran (see
// run: each try failed to connect, or the server declined to run it, as a replica does). Nothing
// of the request changed Redis: if it was an attempt's first, no attempt stands in line, nor
// holds, to be given back.
//
// Every script waits for that question, and its answer is kept once it came: while it fails,
// no script of the processor's has reached Redis (Sent).
func Unsent(err error) bool {
	if errors.As(err, new(unsentErr)) {
		return true
	}
	var pe *dlerrors.RedisProcessError
	for errors.As(err, &pe) {
		if pe.Op == opCommandInfo {
			return true
		}
		err = pe.Err
	}
	return false
}

// Sent reports whether a script of p's was ever handed to the client (whether it reached Redis
// or not): until then nothing of p's stands in a line or holds a key in Redis.
func (p *RedisLockProcessor) Sent() bool { return p != nil && p.sent.Load() }

// ClientClosed reports whether err says the Redis client was closed: no later request on it
// can succeed, so a caller that retries (a give-back, a leave) stops.
func ClientClosed(err error) bool { return errors.Is(err, redis.ErrClosed) }

// Refused reports whether err is Redis refusing a request for good, which no wait mends: an
// ACL refusal of the user, of a key or channel, or of a command a script calls, a command
// the server does not know (a Sentinel's port given as a server's), or a key of the lock's
// that holds another kind of value (WRONGTYPE: some other program's key of that name, which
// stays until somebody deletes it), or a fencing counter or a shared lock's kind key that
// holds what no script of dlock's writes (the scripts' checkCounter and kind: tokens or
// permits would be guessed).
func Refused(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	return redis.IsPermissionError(re) || redis.IsAuthError(re) ||
		strings.Contains(msg, "The user executing the script can't") || strings.HasPrefix(msg, "ERR unknown command") ||
		strings.HasPrefix(msg, "WRONGTYPE") || strings.Contains(msg, "dlock: fencing counter ") || strings.Contains(msg, "dlock: kind key ")
}

// EntryTTL is how long an entry in the line of waiting processes lives unless its process
// renews it: a lease, and at least two seconds. A waiting process renews it with each attempt
// (the retry poller sends one every lease/6 while it waits); it removes it when it stops
// waiting. So an entry outlives its process by at most that. A release grants the key only to
// a process whose entry was renewed within a third of its lease (GrantFresh): one that died
// is skipped, unless it died within that third, and then the key waits for its lease once.
func EntryTTL(cfg domain.DLockConfig) time.Duration { return max(cfg.Lease(), MinEntryTTL) }

// MinEntryTTL is the shortest life of an entry in the line (EntryTTL).
const MinEntryTTL = 2 * time.Second

// GrantFresh is how recently an entry must have been renewed for a release to grant the key to
// it: a third of the lease it waits with.
func GrantFresh(cfg domain.DLockConfig) time.Duration { return cfg.Lease() / 3 }

func processErr(op, key string, err error) error {
	return &dlerrors.RedisProcessError{Op: op, Key: key, Err: err}
}

func ms(d time.Duration) int64 { return d.Milliseconds() }

// pair reads a script's {code, value, ...} reply.
func pair(res *redis.Cmd) (int64, any, error) {
	vals, err := res.Slice()
	if err != nil {
		return 0, nil, err
	}
	if len(vals) < 2 {
		return 0, nil, fmt.Errorf("script returned %d values", len(vals))
	}
	code, ok := vals[0].(int64)
	if !ok {
		return 0, nil, fmt.Errorf("script returned %T", vals[0])
	}
	return code, vals[1], nil
}

// Panicked is the error for a panic r of the Redis client's: a user's client (a wrapper whose
// field is nil, say) may panic in any of dlock's goroutines, and the request then fails like one
// whose reply was lost, as it may have been sent.
func Panicked(r any) error {
	return fmt.Errorf("the Redis client panicked: %v", r)
}

// Guard runs f, which calls the Redis client, and returns its error, or Panicked for a panic.
func Guard(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = Panicked(r)
		}
	}()
	return f()
}

// Load implements DLockProcessor with GET.
func (p *RedisLockProcessor) Load(ctx context.Context, cfg domain.DLockConfig) (*domain.DLockEntity, error) {
	if err := p.check(ctx, cfg); err != nil {
		return nil, err
	}
	var locker string
	err := Guard(func() (err error) {
		locker, err = p.client.Get(ctx, cfg.UniqueKey()).Result()
		return err
	})
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		p.fail(err)
		return nil, processErr("load", cfg.UniqueKey(), err)
	}
	return &domain.DLockEntity{Locker: locker, Status: domain.StatusProcessing}, nil
}

// Lock implements DLockProcessor with lock.lua (one EVALSHA).
func (p *RedisLockProcessor) Lock(ctx context.Context, cfg domain.DLockConfig, req LockRequest) (Result, error) {
	if err := p.check(ctx, cfg, req.Tokens); err != nil {
		return Result{}, err
	}
	if req.Locker == "" {
		return Result{}, fmt.Errorf("%w: an empty locker (a key holding one reads as free)", dlerrors.ErrInvalidConfig)
	}
	owner, seq := SplitLocker(req.Locker)
	if req.Wait && p.opts.Mark != "" && owner != p.opts.Mark {
		// (the line entry is the mark's, every settle finds it under the locker's owner: one
		// that is not the mark's would stay in line given up, for a release to grant it)
		return Result{}, fmt.Errorf("%w: a waiting attempt's locker %q is not one of this process's mark %q", dlerrors.ErrInvalidConfig, req.Locker, p.opts.Mark)
	}
	p.raise(cfg)
	ks := p.keys(cfg, owner)
	a, err := p.base(ctx, cfg, ks)
	if err != nil {
		return Result{}, processErr("lock", cfg.UniqueKey(), err)
	}
	a.locker, a.seq, a.lease, a.wait, a.tokens = req.Locker, seq, cfg.Lease(), req.Wait && p.opts.Mark != "", max(req.Tokens, 1)
	a.listening = a.wait && req.Listening
	if a.unreleased, err = unreleased(req.Unreleased, owner); err != nil {
		return Result{}, err
	}
	res, acked, err := p.script(ctx, "lock", true, ks, a)
	var code int64
	var v any
	if err == nil {
		code, v, err = pair(res)
	}
	if err != nil {
		return Result{}, processErr("lock", cfg.UniqueKey(), err)
	}
	switch code {
	case 1:
		if err := p.acked("lock", cfg.UniqueKey(), acked); err != nil {
			return Result{}, err
		}
		tok, _ := v.(int64)
		r := Result{Outcome: Taken, Token: uint64(tok)}
		if vals, _ := res.Slice(); len(vals) > 2 {
			o, _ := vals[2].(int64) // ('' when the key's first token names another holder: an older version's)
			r.Origin = uint64(o)
		}
		return r, nil
	case -1:
		return Result{Outcome: Settled}, nil
	case 0:
		vals, _ := res.Slice()
		return Result{Outcome: Held, Seen: sighting(vals)}, nil
	}
	return Result{}, processErr("lock", cfg.UniqueKey(), unknownCode("lock", code))
}

// grantOf reads what a script that let the key go answered after its code: {locker granted or
// ”, its first token, the window left free in ms} into r.
func grantOf(vals []any, r *Result) {
	if len(vals) >= 4 {
		r.Next, _ = vals[1].(string)
		if tok, ok := vals[2].(int64); ok {
			r.Token = uint64(tok)
		}
		if gap, ok := vals[3].(int64); ok {
			r.Gap = time.Duration(gap) * time.Millisecond
		}
	}
	if len(vals) >= 5 && r.Next != "" {
		if at, ok := vals[4].(int64); ok && at > 0 {
			r.At = uint64(at)
		}
	}
}

// placeOf reads the process's place in line and whether it is heard from the last two of a
// script's answers (lock.lua's six when held, eight when a yield or release stood in line
// again) into s; unknown
// (Rank -1) otherwise.
func placeOf(vals []any, s *Sighting) {
	s.Rank = -1
	if n := len(vals); n >= 6 {
		if r, ok := vals[n-2].(int64); ok {
			s.Rank = int(r)
		}
		s.Heard = vals[n-1] == int64(1)
	}
}

// grantLife reads, from the answer of a script that granted the key to another process and
// stood in line again (a yield, a release with next: {code, locker, first, gap, at, life,
// rank, heard}), what the process then knows of the key: its holder (r.Next) and its life.
func grantLife(vals []any, r *Result) {
	if len(vals) < 8 || r.Next == "" {
		return
	}
	if n, ok := vals[5].(int64); ok && (n > 0 || n == -1) {
		r.Seen.Holder, r.Seen.Life = r.Next, time.Duration(n)*time.Millisecond
	}
}

// sighting reads {code, life, holder, seen, rank, heard} (what lock.lua found under a held
// key).
func sighting(vals []any) Sighting {
	var s Sighting
	placeOf(vals, &s)
	if len(vals) >= 4 {
		if n, ok := vals[1].(int64); ok && (n > 0 || n == -1) {
			s.Life = time.Duration(n) * time.Millisecond // (-1 ms: the key has no expiry)
		}
		s.Holder, _ = vals[2].(string)
		if f, ok := vals[3].(string); ok {
			s.Fence, _ = strconv.ParseUint(f, 10, 64)
		}
	}
	return s
}

// ExpandLease implements DLockProcessor with renew.lua (one EVALSHA).
func (p *RedisLockProcessor) ExpandLease(ctx context.Context, cfg domain.DLockConfig, req RenewRequest) (Result, error) {
	if err := p.check(ctx, cfg, req.Tokens, req.NextTokens); err != nil {
		return Result{}, err
	}
	owner, seq := SplitLocker(req.Locker)
	ks := p.keys(cfg, owner)
	a, err := p.base(ctx, cfg, ks)
	if err != nil {
		return Result{}, processErr("renew", cfg.UniqueKey(), err)
	}
	a.locker, a.seq, a.lease, a.tokens, a.last, a.origin = req.Locker, seq, cfg.Lease(), req.Tokens, req.Last, req.Origin
	if req.Yield {
		checkOwner, check := SplitLocker(req.Check)
		nextOwner, _ := SplitLocker(req.Next)
		if checkOwner != owner || check == "" || nextOwner != owner || owner != p.opts.Mark || req.NextLease <= 0 {
			return Result{}, fmt.Errorf("%w: yield check %q and next attempt %q are not fresh lockers of %q, this process's mark %q", dlerrors.ErrInvalidConfig, req.Check, req.Next, owner, p.opts.Mark)
		}
		a.yield, a.check, a.next, a.nextLease, a.nextTokens = true, check, req.Next, req.NextLease, max(req.NextTokens, 1)
		a.listening = req.Listening
	}
	if a.unreleased, err = unreleased(req.Unreleased, owner); err != nil {
		return Result{}, err
	}
	res, acked, err := p.script(ctx, "renew", true, ks, a)
	var code int64
	var v any
	if err == nil {
		code, v, err = pair(res)
	}
	if err != nil {
		return Result{}, processErr("renew", cfg.UniqueKey(), err)
	}
	switch code {
	case 1:
		if err := p.acked("renew", cfg.UniqueKey(), acked); err != nil {
			return Result{}, err
		}
		tok, _ := v.(int64)
		return Result{Outcome: Renewed, Token: uint64(tok)}, nil
	case 2:
		r := Result{Outcome: Yielded}
		vals, _ := res.Slice()
		grantOf(vals, &r)
		placeOf(vals, &r.Seen)
		grantLife(vals, &r)
		return r, nil
	case -1:
		return Result{Outcome: Settled}, nil
	case 0:
		return Result{Outcome: Gone}, nil
	}
	return Result{}, processErr("renew", cfg.UniqueKey(), unknownCode("renew", code))
}

// last formats the last token handed out for a script (empty for none).
func last(t uint64) any {
	if t == 0 {
		return ""
	}
	return t // (go-redis writes it in decimal)
}

// Unlock implements DLockProcessor with release.lua (one EVALSHA).
func (p *RedisLockProcessor) Unlock(ctx context.Context, cfg domain.DLockConfig, req ReleaseRequest) (Result, error) {
	if err := p.check(ctx, cfg, req.NextTokens); err != nil {
		return Result{}, err
	}
	owner, seq := SplitLocker(req.Locker)
	ks := p.keys(cfg, owner)
	a, err := p.base(ctx, cfg, ks)
	if err != nil {
		return Result{}, processErr("unlock", cfg.UniqueKey(), err)
	}
	a.locker, a.seq, a.last, a.origin = req.Locker, seq, req.Last, req.Origin
	if req.Next != "" && p.opts.Mark != "" {
		if nextOwner, _ := SplitLocker(req.Next); nextOwner != owner || owner != p.opts.Mark || req.NextLease <= 0 {
			return Result{}, fmt.Errorf("%w: next attempt %q is not a fresh locker of %q, this process's mark %q", dlerrors.ErrInvalidConfig, req.Next, owner, p.opts.Mark)
		}
		a.next, a.nextLease, a.nextTokens = req.Next, req.NextLease, max(req.NextTokens, 1)
		a.listening = req.Listening
	}
	if a.unreleased, err = unreleased(req.Unreleased, owner); err != nil {
		return Result{}, err
	}
	res, _, err := p.script(ctx, "release", false, ks, a)
	var code int64
	if err == nil {
		code, _, err = pair(res)
	}
	if err != nil {
		return Result{}, processErr("unlock", cfg.UniqueKey(), err)
	}
	switch code {
	case 1:
		r := Result{Outcome: Released}
		vals, _ := res.Slice()
		grantOf(vals, &r)
		placeOf(vals, &r.Seen)
		r.Queued = len(vals) >= 8 && a.next != ""
		grantLife(vals, &r)
		return r, nil
	case -1:
		return Result{Outcome: Settled}, nil
	case 0:
		return Result{Outcome: Gone}, nil
	}
	return Result{}, processErr("unlock", cfg.UniqueKey(), unknownCode("release", code))
}

// Leave implements DLockProcessor with leave.lua (one EVALSHA).
func (p *RedisLockProcessor) Leave(ctx context.Context, cfg domain.DLockConfig, req LeaveRequest) (Result, error) {
	if err := p.check(ctx, cfg); err != nil {
		return Result{}, err
	}
	if p.opts.Mark == "" {
		return Result{Outcome: Gone}, nil
	}
	if owner, _ := SplitLocker(req.Last); req.Last != "" && owner != p.opts.Mark {
		return Result{}, fmt.Errorf("%w: last locker %q is not one of this process's mark %q", dlerrors.ErrInvalidConfig, req.Last, p.opts.Mark)
	}
	ks := p.keys(cfg, p.opts.Mark)
	a, err := p.base(ctx, cfg, ks)
	if err != nil {
		return Result{}, processErr("leave", cfg.UniqueKey(), err)
	}
	_, a.upto = SplitLocker(req.Last)
	if a.unreleased, err = unreleased(req.Unreleased, p.opts.Mark); err != nil {
		return Result{}, err
	}
	res, _, err := p.script(ctx, "leave", false, ks, a)
	var vals []any
	if err == nil {
		vals, err = res.Slice()
	}
	if err != nil || len(vals) == 0 {
		return Result{}, processErr("leave", cfg.UniqueKey(), cmp.Or(err, errors.New("leave.lua returned nothing")))
	}
	switch code, _ := vals[0].(int64); code {
	case 2:
		r := Result{Outcome: Released}
		grantOf(vals, &r)
		return r, nil
	case 1:
		return Result{Outcome: Gone}, nil
	default:
		return Result{}, processErr("leave", cfg.UniqueKey(), unknownCode("leave", code))
	}
}

// unknownCode is the error of a script's reply whose code the script never gives (a script
// replaced by hand, or mutated): refused rather than read as some outcome.
func unknownCode(script string, code int64) error {
	return fmt.Errorf("%s.lua returned code %d, which it never gives", script, code)
}

// Preload loads the scripts into the server so that the first acquisition does not pay for an
// EVAL fallback. It is optional.
func (p *RedisLockProcessor) Preload(ctx context.Context) error {
	if err := p.ready(ctx); err != nil {
		return err
	}
	for _, s := range p.scripts.run {
		if err := Guard(func() error { return s.Load(ctx, p.client).Err() }); err != nil {
			return processErr("script-load", "", err)
		}
	}
	return nil
}

// maxListed is how many waiting processes Inspect lists at most.
const maxListed = 100

// Inspect reads the lock's key, its remaining life, the fencing counter and the line of
// waiting processes (inspect.lua, one EVALSHA; it writes nothing). It lists the processes a
// release would grant the key to (the prelude's isLive), whether or not this processor
// publishes: a process that listened on its channel as it last renewed its entry and does not
// now (it died) is left out at once, one that did not listen once it has not renewed its entry
// for a third of its lease, and any whose entry expired.
func (p *RedisLockProcessor) Inspect(ctx context.Context, cfg domain.DLockConfig) (Inspection, error) {
	if err := p.check(ctx, cfg); err != nil {
		return Inspection{}, err
	}
	sharded, err := p.ShardedFor(ctx, cfg.UniqueKey())
	if err != nil {
		return Inspection{}, processErr("inspect", cfg.UniqueKey(), err)
	}
	a := args{channel: ReleaseChannel(cfg), publish: "publish", maxListed: maxListed}
	if sharded {
		a.publish = "spublish"
	}
	res, _, err := p.script(ctx, "inspect", false, p.keys(cfg, p.opts.Mark), a)
	var vals []any
	if err == nil {
		vals, err = res.Slice()
	}
	if err == nil && len(vals) != 4 {
		err = fmt.Errorf("inspect.lua returned %d values", len(vals))
	}
	if err != nil {
		return Inspection{}, processErr("inspect", cfg.UniqueKey(), err)
	}
	var in Inspection
	in.Holder, _ = vals[0].(string)
	if pttl, _ := vals[1].(int64); pttl > 0 && in.Holder != "" {
		in.TTL = time.Duration(pttl) * time.Millisecond
	}
	if f, _ := vals[2].(string); f != "" {
		in.Fence, _ = strconv.ParseUint(f, 10, 64)
	}
	waiting, _ := vals[3].([]any)
	for _, w := range waiting {
		if m, ok := w.(string); ok {
			in.Waiting = append(in.Waiting, m)
		}
	}
	return in, nil
}

// ForceRelease implements DLockProcessor with force.lua (one EVALSHA): it lets the key go, as
// a release does, if it still holds holder (Released, and whom it was granted to), else Gone.
// Safe to run twice or late: a second copy — the same request sent again after a lost reply,
// by go-redis or by the processor itself — finds holder gone and changes nothing, and answers
// Settled (removed by this request, and whom it was granted to then, with no token) while the
// removed locker's marks live (RemovedKey). Another call finds holder gone (Gone). The holder
// is not told; it learns of the loss at its next renewal or release.
func (p *RedisLockProcessor) ForceRelease(ctx context.Context, cfg domain.DLockConfig, holder string) (Result, error) {
	return p.ForceReleaseAs(ctx, cfg, holder, requestName())
}

// ForceReleaseAs is ForceRelease under request, the caller's name for this removal (a fresh
// one for every call, without '|'): a call under the name of one that removed holder is taken
// for a copy of it, and answers Settled.
func (p *RedisLockProcessor) ForceReleaseAs(ctx context.Context, cfg domain.DLockConfig, holder, request string) (Result, error) {
	if err := p.check(ctx, cfg); err != nil {
		return Result{}, err
	}
	if holder == "" {
		return Result{}, fmt.Errorf("%w: ForceRelease needs the holder to remove", dlerrors.ErrInvalidConfig)
	}
	if err := checkRequestName(request); err != nil {
		return Result{}, err
	}
	owner, seq := SplitLocker(holder)
	ks := p.keys(cfg, owner)
	a, err := p.base(ctx, cfg, ks)
	if err != nil {
		return Result{}, processErr("force-release", cfg.UniqueKey(), err)
	}
	a.locker, a.seq, a.request = holder, seq, request
	s := p.scripts.run["force"]
	keys := append(slices.Clip(ks.keys), RemovedKey(cfg, holder))
	res, _, err := p.run(ctx, s, false, keys, a.appendTo(command(s, keys, nil, len(argNames))))
	var vals []any
	if err == nil {
		vals, err = res.Slice()
	}
	if err != nil || len(vals) == 0 {
		return Result{}, processErr("force-release", cfg.UniqueKey(), cmp.Or(err, errors.New("force.lua returned nothing")))
	}
	switch code, _ := vals[0].(int64); code {
	case 1:
		r := Result{Outcome: Released}
		grantOf(vals, &r)
		return r, nil
	case -1:
		r := Result{Outcome: Settled}
		r.Next, _ = vals[1].(string)
		return r, nil
	}
	return Result{Outcome: Gone}, nil
}

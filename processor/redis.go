package processor

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/domain"
	dlerrors "github.com/dlockgo/dlock/errors"
)

var (
	//go:embed lua/lock.lua
	lockSrc string
	//go:embed lua/expand.lua
	expandSrc string
	//go:embed lua/release.lua
	releaseSrc string
	//go:embed lua/handover.lua
	handoverSrc string
	//go:embed lua/probe.lua
	probeSrc string
	//go:embed lua/unmark.lua
	unmarkSrc string
	//go:embed lua/inspect.lua
	inspectSrc string
	//go:embed lua/force.lua
	forceSrc string

	scriptSources = map[string]string{
		"lock": lockSrc, "expand": expandSrc, "release": releaseSrc, "handover": handoverSrc,
		"probe": probeSrc, "unmark": unmarkSrc, "inspect": inspectSrc, "force": forceSrc,
	}

	lockScript     = redis.NewScript(lockSrc)
	expandScript   = redis.NewScript(expandSrc)
	releaseScript  = redis.NewScript(releaseSrc)
	handoverScript = redis.NewScript(handoverSrc)
	probeScript    = redis.NewScript(probeSrc)
	unmarkScript   = redis.NewScript(unmarkSrc)
	inspectScript  = redis.NewScript(inspectSrc)
	forceScript    = redis.NewScript(forceSrc)

	scripts = map[string]*redis.Script{
		"lock": lockScript, "expand": expandScript, "release": releaseScript, "handover": handoverScript,
		"probe": probeScript, "unmark": unmarkScript, "inspect": inspectScript, "force": forceScript,
	}
)

// ScriptName names the script that an EVALSHA or EVAL command runs, given the command's
// arguments as go-redis holds them (Cmder.Args): the script's file name without ".lua", or ""
// for any other command. Tests use it to recognise a request.
func ScriptName(args []any) string {
	if len(args) < 2 {
		return ""
	}
	verb, _ := args[0].(string)
	body, _ := args[1].(string)
	for name, s := range scripts {
		switch strings.ToLower(verb) {
		case "evalsha", "evalsha_ro":
			if body == s.Hash() {
				return name
			}
		case "eval", "eval_ro":
			if body == scriptSources[name] {
				return name
			}
		}
	}
	return ""
}

// FenceSuffix, ReleaseSuffix, WantSuffix and DoneSuffix name what is kept beside a lock key;
// see domain.SideKey.
const (
	FenceSuffix   = "fence"
	ReleaseSuffix = "released"
	WantSuffix    = "want"
	DoneSuffix    = "done"
)

// RedisLockProcessor keeps locks in Redis through go-redis: SET NX PX inside a script that also
// advances the fencing counter, compare-and-renew, compare-and-delete and hand-over scripts,
// all run by EVALSHA (EVAL when the server does not have the script yet). It works the same
// with a single server, Sentinel and Cluster clients, and with miniredis.
//
// The key only ever holds the locker of the acquisition whose own request wrote it (lock.lua,
// or handover.lua for the next acquisition of the same process): no script hands the key to a
// locker that did not ask, and none adopts a key by anything but the exact locker.
//
// A locker is <owner><sequence number>, the owner ending in '-' (see SplitLocker), numbered in
// the order its owner makes them. Releasing an acquisition settles it: the owner's settled
// mark beside the key ({K}:done:<owner>) rises to its number, and the scripts refuse any
// request of an acquisition at or below the mark. So a request that reaches Redis twice, or
// after its acquisition was released or given back, cannot take the key.
type RedisLockProcessor struct {
	client redis.UniversalClient
	opts   Options
	shard  atomic.Int32 // shardUnknown, shardPlain or shardSharded: how releases are published
}

const (
	shardUnknown int32 = iota
	shardPlain
	shardSharded
)

// Options configures a RedisLockProcessor.
type Options struct {
	// Publish makes a release publish the releasing locker on the lock's release channel
	// (ReleaseChannel). Default false.
	Publish bool
	// Mark is this process's waiting mark: with Lock(wait) and IsFree, a process that finds
	// the key held leaves it beside the key ({DLOCK_…}:want, for half a lease) as a hint that
	// another process waits, which makes HandOver with yield reserve the key for that process
	// (ReserveTTL), which takes it with its own Lock. A mark confers nothing: a stale one costs
	// at most an early yield and a reservation nobody takes. Default "": no marks.
	Mark string
	// Replicas, when > 0, makes every acquisition (Lock, HandOver) and renewal wait until that
	// many replicas have acknowledged it (WAIT, sent with the script on the same connection,
	// since WAIT counts the writes of its own connection), for at most ReplicaTimeout. An
	// acquisition or renewal that Redis ran but fewer replicas acknowledged in time returns a
	// RedisProcessError wrapping errors.ErrNotReplicated: its write stays in Redis, and the
	// caller treats it as an outcome it cannot rely on (gives it back, or retries the renewal).
	Replicas int
	// ReplicaTimeout bounds the wait for Replicas; it must be > 0 when Replicas is.
	ReplicaTimeout time.Duration
}

// A release message is "R|<locker>".
const releasedTag = "R|"

// ParseMessage reads a release message: the locker that let the key go.
func ParseMessage(payload string) (locker string, ok bool) {
	if locker, ok = strings.CutPrefix(payload, releasedTag); !ok {
		return "", false
	}
	return locker, true
}

var _ DLockProcessor = (*RedisLockProcessor)(nil)

// NewRedisLockProcessor returns a processor over client. A nil client is an error wrapping
// errors.ErrInvalidConfig.
func NewRedisLockProcessor(client redis.UniversalClient, opts Options) (*RedisLockProcessor, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: nil redis client", dlerrors.ErrInvalidConfig)
	}
	if v := reflect.ValueOf(client); v.Kind() == reflect.Pointer && v.IsNil() {
		return nil, fmt.Errorf("%w: nil redis client (%T)", dlerrors.ErrInvalidConfig, client)
	}
	if opts.Replicas < 0 || (opts.Replicas > 0 && opts.ReplicaTimeout <= 0) {
		return nil, fmt.Errorf("%w: replica acknowledgement of %d replicas within %v", dlerrors.ErrInvalidConfig, opts.Replicas, opts.ReplicaTimeout)
	}
	return &RedisLockProcessor{client: client, opts: opts}, nil
}

// Sharded reports whether release messages go by sharded pub/sub (SPUBLISH, to be received
// with SSUBSCRIBE): on a Cluster client whose servers have it (Redis 7), so that a message
// goes only to the shard that owns the key instead of every node. Plain pub/sub otherwise.
// The answer is asked of the server once (COMMAND INFO) and then kept; an error is not kept.
func (p *RedisLockProcessor) Sharded(ctx context.Context) (bool, error) {
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
	info, err := cc.Do(ctx, "command", "info", "spublish").Slice()
	if err != nil {
		p.fail(err)
		return false, processErr("command-info", "", err)
	}
	if len(info) == 1 && info[0] != nil {
		p.shard.Store(shardSharded)
		return true, nil
	}
	p.shard.Store(shardPlain)
	return false, nil
}

// publishCommand is the command the scripts publish release messages with.
func (p *RedisLockProcessor) publishCommand(ctx context.Context) (string, error) {
	if !p.opts.Publish {
		return "publish", nil
	}
	sharded, err := p.Sharded(ctx)
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
// subscriptions then reach the promoted replica as soon as the cluster knows of it. go-redis
// runs at most one reload at a time, 200 ms apart.
func (p *RedisLockProcessor) fail(err error) {
	if cc, ok := p.client.(*redis.ClusterClient); ok && err != nil && !errors.Is(err, redis.Nil) {
		cc.ReloadState(context.Background())
	}
}

// Reload asks a Cluster client to reload the cluster's topology (see fail); other clients
// ignore it.
func (p *RedisLockProcessor) Reload() {
	if cc, ok := p.client.(*redis.ClusterClient); ok {
		cc.ReloadState(context.Background())
	}
}

// run runs script s with keys (the lock key first). With replica acknowledgement on and ack
// set, it sends WAIT after the script on the same connection to the key's master, and
// returns how many replicas acknowledged (acked is -1 when not asked).
func (p *RedisLockProcessor) run(ctx context.Context, s *redis.Script, ack bool, keys []string, args ...any) (res *redis.Cmd, acked int64, err error) {
	defer func() { p.fail(err) }()
	if !ack || p.opts.Replicas == 0 {
		res = s.Run(ctx, p.client, keys, args...)
		return res, -1, res.Err()
	}
	var c redis.Cmdable = p.client
	if cc, ok := p.client.(*redis.ClusterClient); ok {
		node, err := cc.MasterForKey(ctx, keys[0])
		if err != nil {
			return nil, 0, err
		}
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
	if err != nil {
		return res, 0, fmt.Errorf("%w: %w", dlerrors.ErrNotReplicated, err)
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

// ReleaseChannel is the channel a release of cfg's lock is published on.
func ReleaseChannel(cfg domain.DLockConfig) string { return cfg.SideKey(ReleaseSuffix) }

// FenceKey is the key of cfg's fencing counter.
func FenceKey(cfg domain.DLockConfig) string { return cfg.SideKey(FenceSuffix) }

// WantKey is the key of cfg's waiting mark.
func WantKey(cfg domain.DLockConfig) string { return cfg.SideKey(WantSuffix) }

// DoneKey is the key of owner's settled mark.
func DoneKey(cfg domain.DLockConfig, owner string) string {
	return cfg.SideKey(DoneSuffix + ":" + owner)
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

// DoneTTL is how long a settled mark lasts after the owner's last release of the key: two
// leases. A request delayed on its way to Redis for longer than that could still take the
// key, which then expires with its lease.
func DoneTTL(cfg domain.DLockConfig) time.Duration { return 2 * cfg.Lease() }

// ReserveTTL is how long a key yielded to a waiting process stays reserved for it: a quarter
// of a lease, far longer than a release message and a round trip, and so the longest a key
// can stay idle when the waiting process died or stopped waiting.
func ReserveTTL(cfg domain.DLockConfig) time.Duration { return cfg.Lease() / 4 }

// MarkTTL is how long a waiting mark lasts: half a lease. A waiting process renews it with
// every failed attempt and every probe (at most two poll intervals, lease/3, apart), and
// removes it when it stops waiting.
func MarkTTL(cfg domain.DLockConfig) time.Duration { return cfg.Lease() / 2 }

func (p *RedisLockProcessor) channel(cfg domain.DLockConfig) string {
	if p.opts.Publish {
		return ReleaseChannel(cfg)
	}
	return ""
}

func processErr(op, key string, err error) error {
	return &dlerrors.RedisProcessError{Op: op, Key: key, Err: err}
}

func optimistic(op, key, locker string) error {
	return fmt.Errorf("%w: %s %q: locker %q", dlerrors.ErrOptimisticLocking, op, key, locker)
}

func ms(d time.Duration) int64 { return d.Milliseconds() }

// Load implements DLockProcessor with GET.
func (p *RedisLockProcessor) Load(ctx context.Context, cfg domain.DLockConfig) (*domain.DLockEntity, error) {
	locker, err := p.client.Get(ctx, cfg.UniqueKey()).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, processErr("load", cfg.UniqueKey(), err)
	}
	return &domain.DLockEntity{Locker: locker, Status: domain.StatusProcessing}, nil
}

// Lock implements DLockProcessor with lock.lua (one EVALSHA). It sets e.Token and e.Lease.
func (p *RedisLockProcessor) Lock(ctx context.Context, e *domain.DLockEntity, cfg domain.DLockConfig, wait bool) error {
	leave := "0"
	if wait {
		leave = "1"
	}
	owner, seq := SplitLocker(e.Locker)
	res, acked, err := p.run(ctx, lockScript, true,
		[]string{cfg.UniqueKey(), FenceKey(cfg), WantKey(cfg), DoneKey(cfg, owner)},
		e.Locker, ms(cfg.Lease()), ms(FenceTTL(cfg)), p.opts.Mark, ms(MarkTTL(cfg)), seq, leave)
	var token int64
	if err == nil {
		token, err = res.Int64()
	}
	if err != nil {
		return processErr("lock", cfg.UniqueKey(), err)
	}
	if token <= 0 {
		return optimistic("lock", cfg.UniqueKey(), e.Locker)
	}
	if err := p.acked("lock", cfg.UniqueKey(), acked); err != nil {
		return err
	}
	e.Token, e.Lease, e.Status = uint64(token), cfg.Lease(), domain.StatusProcessing
	return nil
}

// ExpandLease implements DLockProcessor with expand.lua (one EVALSHA).
func (p *RedisLockProcessor) ExpandLease(ctx context.Context, e *domain.DLockEntity, cfg domain.DLockConfig) error {
	res, acked, err := p.run(ctx, expandScript, true, []string{cfg.UniqueKey(), FenceKey(cfg)},
		e.Locker, ms(cfg.Lease()), ms(FenceTTL(cfg)))
	var n int64
	if err == nil {
		n, err = res.Int64()
	}
	if err != nil {
		return processErr("renew", cfg.UniqueKey(), err)
	}
	if n != 1 {
		return optimistic("renew", cfg.UniqueKey(), e.Locker)
	}
	return p.acked("renew", cfg.UniqueKey(), acked)
}

// Unlock implements DLockProcessor with release.lua (one EVALSHA).
func (p *RedisLockProcessor) Unlock(ctx context.Context, e *domain.DLockEntity, cfg domain.DLockConfig) error {
	owner, seq := SplitLocker(e.Locker)
	pub, err := p.publishCommand(ctx)
	if err != nil {
		return processErr("unlock", cfg.UniqueKey(), err)
	}
	res, _, err := p.run(ctx, releaseScript, false, []string{cfg.UniqueKey(), DoneKey(cfg, owner)},
		e.Locker, p.channel(cfg), seq, ms(DoneTTL(cfg)), pub)
	var n int64
	if err == nil {
		n, err = res.Int64()
	}
	if err != nil {
		return processErr("unlock", cfg.UniqueKey(), err)
	}
	if n == 0 { // 2: released already, by this same request sent before
		return optimistic("unlock", cfg.UniqueKey(), e.Locker)
	}
	return nil
}

// IsFree implements DLockProcessor with probe.lua (one EVALSHA), which also leaves the
// waiting mark when the key is held.
func (p *RedisLockProcessor) IsFree(ctx context.Context, cfg domain.DLockConfig) (bool, error) {
	res, _, err := p.run(ctx, probeScript, false, []string{cfg.UniqueKey(), WantKey(cfg)},
		p.opts.Mark, ms(MarkTTL(cfg)))
	var n int64
	if err == nil {
		n, err = res.Int64()
	}
	if err != nil {
		return false, processErr("is-free", cfg.UniqueKey(), err)
	}
	return n == 1, nil
}

// ErrYielded reports a hand-over that reserved the key for a waiting process instead.
var ErrYielded = errors.New("dlock: released to a waiting process")

// Unmark implements DLockProcessor with unmark.lua (one EVALSHA).
func (p *RedisLockProcessor) Unmark(ctx context.Context, cfg domain.DLockConfig) error {
	if p.opts.Mark == "" {
		return nil
	}
	if _, _, err := p.run(ctx, unmarkScript, false, []string{WantKey(cfg)}, p.opts.Mark); err != nil {
		return processErr("unmark", cfg.UniqueKey(), err)
	}
	return nil
}

// HandOver implements DLockProcessor with handover.lua (one EVALSHA).
func (p *RedisLockProcessor) HandOver(ctx context.Context, from, to *domain.DLockEntity, cfg domain.DLockConfig, yield bool) error {
	y := "0"
	if yield {
		y = "1"
	}
	owner, fromSeq := SplitLocker(from.Locker)
	toOwner, toSeq := SplitLocker(to.Locker)
	if toOwner != owner {
		return fmt.Errorf("%w: hand-over between owners %q and %q", dlerrors.ErrInvalidConfig, owner, toOwner)
	}
	pub, err := p.publishCommand(ctx)
	if err != nil {
		return processErr("hand-over", cfg.UniqueKey(), err)
	}
	res, acked, err := p.run(ctx, handoverScript, true,
		[]string{cfg.UniqueKey(), FenceKey(cfg), WantKey(cfg), DoneKey(cfg, owner)},
		from.Locker, to.Locker, ms(cfg.Lease()), ms(FenceTTL(cfg)), p.channel(cfg), p.opts.Mark, y,
		fromSeq, toSeq, ms(DoneTTL(cfg)), ms(ReserveTTL(cfg)), ms(MarkTTL(cfg)), pub)
	var token int64
	if err == nil {
		token, err = res.Int64()
	}
	if err == nil && token > 0 {
		err = p.acked("hand-over", cfg.UniqueKey(), acked)
	}
	switch {
	case err != nil:
		var pe *dlerrors.RedisProcessError
		if errors.As(err, &pe) {
			return err
		}
		return processErr("hand-over", cfg.UniqueKey(), err)
	case token == 0:
		return optimistic("hand-over", cfg.UniqueKey(), from.Locker)
	case token < 0:
		return ErrYielded
	}
	to.Token, to.Lease, to.Status = uint64(token), cfg.Lease(), domain.StatusProcessing
	return nil
}

// Preload loads the scripts into the server so that the first acquisition does not pay for an
// EVAL fallback. It is optional.
func (p *RedisLockProcessor) Preload(ctx context.Context) error {
	for _, s := range scripts {
		if err := s.Load(ctx, p.client).Err(); err != nil {
			return processErr("script-load", "", err)
		}
	}
	return nil
}

// Inspection is what Redis holds for a lock, read in one round trip by Inspect.
type Inspection struct {
	// Holder is the value under the lock key: a locker, ReservedPrefix and the mark of the
	// process a holder yielded to, or "" when the key is free.
	Holder string
	// TTL is the holder's remaining life (0 when free).
	TTL time.Duration
	// Fence is the fencing counter: the last token handed out, while it is kept (FenceTTL);
	// 0 once it expired.
	Fence uint64
	// Want is the waiting mark: the mark of a process that waits (or waited within MarkTTL),
	// "" for none.
	Want string
}

// ReservedPrefix starts the value of a key yielded to a waiting process: ReservedPrefix and
// that process's mark (no locker can equal it).
const ReservedPrefix = "reserved|"

// Inspect reads the lock's key, its remaining life, the fencing counter and the waiting mark
// (inspect.lua, one EVALSHA; it writes nothing).
func (p *RedisLockProcessor) Inspect(ctx context.Context, cfg domain.DLockConfig) (Inspection, error) {
	res, _, err := p.run(ctx, inspectScript, false, []string{cfg.UniqueKey(), FenceKey(cfg), WantKey(cfg)})
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
	in.Want, _ = vals[3].(string)
	return in, nil
}

// ForceRelease deletes the lock key if it still holds holder, settles that acquisition and
// publishes a release message, as a release does (force.lua, one EVALSHA). It reports whether
// the key held holder. Safe to run twice or late: a second copy finds holder gone. The holder
// is not told; it learns of the loss at its next renewal or release.
func (p *RedisLockProcessor) ForceRelease(ctx context.Context, cfg domain.DLockConfig, holder string) (bool, error) {
	pub, err := p.publishCommand(ctx)
	if err != nil {
		return false, processErr("force-release", cfg.UniqueKey(), err)
	}
	owner, seq := SplitLocker(holder)
	res, _, err := p.run(ctx, forceScript, false, []string{cfg.UniqueKey(), DoneKey(cfg, owner)},
		holder, p.channel(cfg), pub, seq, ms(DoneTTL(cfg)))
	var n int64
	if err == nil {
		n, err = res.Int64()
	}
	if err != nil {
		return false, processErr("force-release", cfg.UniqueKey(), err)
	}
	return n == 1, nil
}

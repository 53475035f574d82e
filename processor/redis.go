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
	//go:embed lua/prelude.lua
	preludeSrc string
	//go:embed lua/lock.lua
	lockSrc string
	//go:embed lua/renew.lua
	renewSrc string
	//go:embed lua/release.lua
	releaseSrc string
	//go:embed lua/poll.lua
	pollSrc string
	//go:embed lua/leave.lua
	leaveSrc string
	//go:embed lua/inspect.lua
	inspectSrc string
	//go:embed lua/force.lua
	forceSrc string

	// bodies are the scripts' own text by name (the file name without ".lua"), without the
	// prelude.
	bodies = map[string]string{
		"lock": lockSrc, "renew": renewSrc, "release": releaseSrc, "poll": pollSrc,
		"leave": leaveSrc, "inspect": inspectSrc, "force": forceSrc,
	}
	// defaults are the scripts every processor runs unless Options.Scripts replaces some.
	defaults = newScripts(nil)
)

// scriptSet is the set of scripts a processor runs, by name, and their full text (the
// prelude, then the script).
type scriptSet struct {
	run     map[string]*redis.Script
	sources map[string]string
}

// newScripts builds the scripts, the bodies of replace taking the place of the module's own.
func newScripts(replace map[string]string) *scriptSet {
	set := &scriptSet{run: map[string]*redis.Script{}, sources: map[string]string{}}
	for name, body := range bodies {
		if b, ok := replace[name]; ok {
			body = b
		}
		src := preludeSrc + "\n-- " + name + ".lua\n" + body
		set.run[name], set.sources[name] = redis.NewScript(src), src
	}
	return set
}

// Sources returns the scripts' own text by name ("lock", "renew", "release", "poll",
// "leave", "inspect", "force", and "prelude", which runs in front of each of the others).
// The map is a copy.
func Sources() map[string]string {
	out := map[string]string{"prelude": preludeSrc}
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

// FenceSuffix, ReleaseSuffix, LineSuffix, DueSuffix, DoneSuffix, CheckSuffix and
// ForcedSuffix name what is kept beside a lock key; see domain.SideKey.
const (
	FenceSuffix   = "fence"
	ReleaseSuffix = "released"
	LineSuffix    = "line"
	DueSuffix     = "due"
	DoneSuffix    = "done"
	CheckSuffix   = "check"
	ForcedSuffix  = "forced"
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
type RedisLockProcessor struct {
	client  redis.UniversalClient
	opts    Options
	scripts *scriptSet
	shard   atomic.Int32 // shardUnknown, shardPlain or shardSharded: how releases are published
}

const (
	shardUnknown int32 = iota
	shardPlain
	shardSharded
)

// Options configures a RedisLockProcessor.
type Options struct {
	// Publish makes a release publish on the lock's release channel (ReleaseChannel) whom
	// the key went to. Default false.
	Publish bool
	// Mark is this process's name in the line of waiting processes: with Lock(Wait) a
	// process that finds the key held joins the line, and a release reserves the key for the
	// first process in line, which takes it with its own Lock. Default "": this process never
	// joins the line (and is never reserved for).
	Mark string
	// Replicas, when > 0, makes every acquisition and renewal wait until that many replicas
	// have acknowledged it (WAIT, sent with the script on the same connection, since WAIT
	// counts the writes of its own connection), for at most ReplicaTimeout. An acquisition or
	// renewal that Redis ran but fewer replicas acknowledged in time returns a
	// RedisProcessError wrapping errors.ErrNotReplicated: its write stays in Redis, and the
	// caller treats it as an outcome it cannot rely on (gives it back, or retries the renewal).
	Replicas int
	// ReplicaTimeout bounds the wait for Replicas; it must be > 0 when Replicas is.
	ReplicaTimeout time.Duration
	// Scripts replaces the text of scripts by name (as Sources names them; the prelude is
	// still put in front of each). It exists so that this module's tests can check that they
	// catch mutants of the scripts; production code leaves it nil. Default nil: the
	// module's own scripts.
	Scripts map[string]string
}

// Message is what a lock's channel carries.
type Message struct {
	// Released: a holder (From) let the key go, to the process Next (reserved for it), or
	// free when Next is "". Published as "R|<From>|<Next>".
	Released bool
	// Taken: a process took the key reserved for it, with the locker From, for Life at least
	// (it cannot come free before then but by a release). Published as "T|<From>|<ms>".
	Taken bool
	From  string
	Next  string
	Life  time.Duration
}

// ParseMessage reads a message of a lock's channel; ok is false for anything else (such as a
// subscription's probe).
func ParseMessage(payload string) (m Message, ok bool) {
	kind, rest, ok := strings.Cut(payload, "|")
	if !ok {
		return Message{}, false
	}
	i := strings.LastIndexByte(rest, '|')
	from, last := rest, ""
	if i >= 0 {
		from, last = rest[:i], rest[i+1:]
	}
	switch kind {
	case "R":
		return Message{Released: true, From: from, Next: last}, true
	case "T":
		n, err := strconv.ParseInt(last, 10, 64)
		if err != nil || i < 0 {
			return Message{}, false
		}
		return Message{Taken: true, From: from, Life: time.Duration(n) * time.Millisecond}, true
	}
	return Message{}, false
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
	set := defaults
	if opts.Scripts != nil {
		for name := range opts.Scripts {
			if _, ok := bodies[name]; !ok {
				return nil, fmt.Errorf("%w: no script %q to replace", dlerrors.ErrInvalidConfig, name)
			}
		}
		set = newScripts(opts.Scripts)
	}
	return &RedisLockProcessor{client: client, opts: opts, scripts: set}, nil
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

// LineKey is the key of cfg's line of waiting processes, by arrival.
func LineKey(cfg domain.DLockConfig) string { return cfg.SideKey(LineSuffix) }

// DueKey is the key of the deadlines of the entries of cfg's line.
func DueKey(cfg domain.DLockConfig) string { return cfg.SideKey(DueSuffix) }

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

// keys returns the seven keys every script takes, with owner's settled, checked and forced
// marks.
func keys(cfg domain.DLockConfig, owner string) []string {
	return []string{cfg.UniqueKey(), FenceKey(cfg), LineKey(cfg), DueKey(cfg), DoneKey(cfg, owner),
		CheckKey(cfg, owner), ForcedKey(cfg, owner)}
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

// DoneTTL is how long a settled mark lasts after the owner's last settle on the key (a
// release, give-back, failed attempt or leave): two leases. A request delayed on its way to
// Redis for longer than that could still take the key (which then expires with its lease,
// unrenewed) or put its process in line (until the entry expires).
func DoneTTL(cfg domain.DLockConfig) time.Duration { return 2 * cfg.Lease() }

// ReserveTTL is how long a key let go to the first process in line stays reserved for it: a
// quarter of a lease, far longer than a release message and a round trip, and so the longest
// a key can stay idle when that process died without leaving the line.
func ReserveTTL(cfg domain.DLockConfig) time.Duration { return cfg.Lease() / 4 }

// EntryTTL is how long an entry in the line of waiting processes lives unless its process
// renews it: a lease, and at least two seconds. A waiting process renews it with every failed
// attempt and, when it has not for a third of that, with its poll; it removes it when it stops
// waiting. So an entry outlives its process by at most that (and a dead process at the head of
// the line costs one reservation, a quarter of a lease, once).
func EntryTTL(cfg domain.DLockConfig) time.Duration { return max(cfg.Lease(), 2*time.Second) }

func (p *RedisLockProcessor) channel(cfg domain.DLockConfig) string {
	if p.opts.Publish {
		return ReleaseChannel(cfg)
	}
	return ""
}

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

// Load implements DLockProcessor with GET.
func (p *RedisLockProcessor) Load(ctx context.Context, cfg domain.DLockConfig) (*domain.DLockEntity, error) {
	locker, err := p.client.Get(ctx, cfg.UniqueKey()).Result()
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
	owner, seq := SplitLocker(req.Locker)
	wait := "0"
	if req.Wait {
		wait = "1"
	}
	pub, err := p.publishCommand(ctx)
	if err != nil {
		return Result{}, processErr("lock", cfg.UniqueKey(), err)
	}
	res, acked, err := p.run(ctx, p.scripts.run["lock"], true, keys(cfg, owner),
		req.Locker, seq, ms(cfg.Lease()), ms(FenceTTL(cfg)), p.opts.Mark, wait, ms(EntryTTL(cfg)),
		max(req.Tokens, 1), ms(DoneTTL(cfg)), p.channel(cfg), pub)
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
		return Result{Outcome: Taken, Token: uint64(tok)}, nil
	case -1:
		return Result{Outcome: Settled}, nil
	}
	vals, _ := res.Slice()
	return Result{Outcome: Held, Seen: sighting(vals)}, nil
}

// sighting reads {code, place, life, holder} (what a script found under a held key).
func sighting(vals []any) Sighting {
	s := Sighting{Place: -1}
	if len(vals) == 4 {
		if n, ok := vals[1].(int64); ok {
			s.Place = int(n)
		}
		if n, ok := vals[2].(int64); ok && n > 0 {
			s.Life = time.Duration(n) * time.Millisecond
		}
		s.Holder, _ = vals[3].(string)
	}
	return s
}

// ExpandLease implements DLockProcessor with renew.lua (one EVALSHA).
func (p *RedisLockProcessor) ExpandLease(ctx context.Context, cfg domain.DLockConfig, req RenewRequest) (Result, error) {
	owner, seq := SplitLocker(req.Locker)
	yield := "0"
	if req.Yield {
		yield = "1"
	}
	pub, err := p.publishCommand(ctx)
	if err != nil {
		return Result{}, processErr("renew", cfg.UniqueKey(), err)
	}
	check := ""
	if req.Yield {
		checkOwner, n := SplitLocker(req.Check)
		if checkOwner != owner || n == "" {
			return Result{}, fmt.Errorf("%w: yield check %q is not a fresh locker of %q", dlerrors.ErrInvalidConfig, req.Check, owner)
		}
		check = n
	}
	res, acked, err := p.run(ctx, p.scripts.run["renew"], true, keys(cfg, owner),
		req.Locker, seq, ms(cfg.Lease()), ms(FenceTTL(cfg)), req.Tokens, yield, p.opts.Mark,
		ms(ReserveTTL(cfg)), p.channel(cfg), pub, ms(EntryTTL(cfg)), ms(DoneTTL(cfg)), last(req.Last), check)
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
		return Result{Outcome: Yielded}, nil
	case -1:
		return Result{Outcome: Settled}, nil
	}
	return Result{Outcome: Gone}, nil
}

// last formats the last token handed out for a script (empty when unknown).
func last(t uint64) string {
	if t == 0 {
		return ""
	}
	return strconv.FormatUint(t, 10)
}

// Unlock implements DLockProcessor with release.lua (one EVALSHA).
func (p *RedisLockProcessor) Unlock(ctx context.Context, cfg domain.DLockConfig, req ReleaseRequest) (Result, error) {
	owner, seq := SplitLocker(req.Locker)
	pub, err := p.publishCommand(ctx)
	if err != nil {
		return Result{}, processErr("unlock", cfg.UniqueKey(), err)
	}
	res, _, err := p.run(ctx, p.scripts.run["release"], false, keys(cfg, owner),
		req.Locker, seq, p.channel(cfg), pub, ms(DoneTTL(cfg)), ms(ReserveTTL(cfg)), last(req.Last))
	var code int64
	var v any
	if err == nil {
		code, v, err = pair(res)
	}
	if err != nil {
		return Result{}, processErr("unlock", cfg.UniqueKey(), err)
	}
	switch code {
	case 1:
		next, _ := v.(string)
		return Result{Outcome: Released, Next: next}, nil
	case -1:
		return Result{Outcome: Settled}, nil
	}
	return Result{Outcome: Gone}, nil
}

// IsFree implements DLockProcessor with poll.lua (one EVALSHA).
func (p *RedisLockProcessor) IsFree(ctx context.Context, cfg domain.DLockConfig) (PollResult, error) {
	res, _, err := p.run(ctx, p.scripts.run["poll"], false, keys(cfg, p.opts.Mark), p.opts.Mark, ms(EntryTTL(cfg)))
	var vals []any
	if err == nil {
		vals, err = res.Slice()
	}
	var state int64
	if err == nil && len(vals) == 4 {
		state, _ = vals[0].(int64)
	}
	if err == nil && (state < int64(PollFree) || state > int64(PollNotQueued)) {
		err = fmt.Errorf("poll.lua returned %v", vals)
	}
	if err != nil {
		return PollResult{}, processErr("is-free", cfg.UniqueKey(), err)
	}
	return PollResult{State: PollState(state), Seen: sighting(vals)}, nil
}

// Leave implements DLockProcessor with leave.lua (one EVALSHA).
func (p *RedisLockProcessor) Leave(ctx context.Context, cfg domain.DLockConfig, req LeaveRequest) error {
	if p.opts.Mark == "" {
		return nil
	}
	pub, err := p.publishCommand(ctx)
	if err != nil {
		return processErr("leave", cfg.UniqueKey(), err)
	}
	_, seq := SplitLocker(req.Last)
	if _, _, err := p.run(ctx, p.scripts.run["leave"], false, keys(cfg, p.opts.Mark),
		p.opts.Mark, p.channel(cfg), pub, ms(ReserveTTL(cfg)), seq, ms(DoneTTL(cfg))); err != nil {
		return processErr("leave", cfg.UniqueKey(), err)
	}
	return nil
}

// Preload loads the scripts into the server so that the first acquisition does not pay for an
// EVAL fallback. It is optional.
func (p *RedisLockProcessor) Preload(ctx context.Context) error {
	for _, s := range p.scripts.run {
		if err := s.Load(ctx, p.client).Err(); err != nil {
			return processErr("script-load", "", err)
		}
	}
	return nil
}

// ReservedPrefix starts the value of a key let go to a waiting process: ReservedPrefix and
// that process's mark (no locker can equal it).
const ReservedPrefix = "reserved|"

// maxListed is how many waiting processes Inspect lists at most.
const maxListed = 100

// Inspect reads the lock's key, its remaining life, the fencing counter and the line of
// waiting processes (inspect.lua, one EVALSHA; it writes nothing).
func (p *RedisLockProcessor) Inspect(ctx context.Context, cfg domain.DLockConfig) (Inspection, error) {
	res, _, err := p.run(ctx, p.scripts.run["inspect"], false, keys(cfg, p.opts.Mark), maxListed)
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
// a release does, if it still holds holder. Safe to run twice or late: a second copy finds
// holder gone. The holder is not told; it learns of the loss at its next renewal or release.
func (p *RedisLockProcessor) ForceRelease(ctx context.Context, cfg domain.DLockConfig, holder string) (bool, error) {
	pub, err := p.publishCommand(ctx)
	if err != nil {
		return false, processErr("force-release", cfg.UniqueKey(), err)
	}
	owner, seq := SplitLocker(holder)
	res, _, err := p.run(ctx, p.scripts.run["force"], false, keys(cfg, owner), holder, p.channel(cfg), pub,
		ms(ReserveTTL(cfg)), seq, ms(DoneTTL(cfg)))
	var n int64
	if err == nil {
		n, err = res.Int64()
	}
	if err != nil {
		return false, processErr("force-release", cfg.UniqueKey(), err)
	}
	return n == 1, nil
}

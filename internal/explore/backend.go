package explore

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// backend is the Redis the scripts run on: miniredis, whose clock the explorer owns (time
// passes only when a schedule says so, and keys expire then), or a redis-server, whose clock
// it does not own (schedules there have no ticks, and leases are long enough that nothing
// expires while one runs).
type backend interface {
	client() *redis.Client
	// owned reports whether the explorer owns the server clock.
	owned() bool
	now() time.Time
	// advance moves the server clock on by d and expires what ran out (owned clocks only).
	advance(d time.Duration)
	// flush empties the server: a restart with nothing kept, or the start of a schedule.
	flush()
	// reset empties the server and sets its clock back to the start.
	reset()
	snapshot() (snapshot, error)
	// slack is how far a snapshot's times may be off: none where the explorer owns the
	// clock; on a server, PTTL's millisecond and the time that passes while it is read.
	slack() time.Duration
	// listen subscribes to channel, as a process that waits does, until stop; ok is false
	// where the explorer does not model subscriptions (a redis-server).
	listen(channel string) (stop func(), ok bool)
	close()
}

// epoch is where every schedule's clock starts on miniredis.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type mini struct {
	m   *miniredis.Miniredis
	c   *redis.Client
	at  time.Time
	ctx context.Context
	// subs holds a subscriber per channel, made once and kept across schedules (miniredis
	// never forgets a subscriber); each drains what is published to it.
	subs map[string]*miniredis.Subscriber
}

func newMini() (*mini, error) {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		return nil, err
	}
	b := &mini{m: m, c: redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1, PoolSize: 1}), ctx: context.Background(),
		subs: map[string]*miniredis.Subscriber{}}
	b.reset()
	return b, nil
}

func (b *mini) client() *redis.Client { return b.c }
func (b *mini) owned() bool           { return true }
func (b *mini) now() time.Time        { return b.at }

func (b *mini) advance(d time.Duration) {
	b.at = b.at.Add(d)
	b.m.SetTime(b.at)
	b.m.FastForward(d)
}

func (b *mini) flush() { b.m.FlushAll() }

func (b *mini) slack() time.Duration { return 0 }

func (b *mini) listen(channel string) (func(), bool) {
	sub := b.subs[channel]
	if sub == nil {
		sub = b.m.NewSubscriber()
		b.subs[channel] = sub
		go func() {
			for range sub.Messages() { // (the explorer delivers messages itself)
			}
		}()
	}
	sub.Subscribe(channel)
	return func() { sub.Unsubscribe(channel) }, true
}

func (b *mini) reset() {
	for ch, sub := range b.subs {
		sub.Unsubscribe(ch)
	}
	b.m.FlushAll()
	b.at = epoch
	b.m.SetTime(b.at)
}

func (b *mini) close() {
	for ch, sub := range b.subs {
		sub.Unsubscribe(ch)
		sub.Close()
	}
	_ = b.c.Close()
	b.m.Close()
}

func (b *mini) snapshot() (snapshot, error) {
	s := snapshot{now: b.at, keys: map[string]value{}}
	for _, k := range b.m.Keys() {
		v := value{ttl: -1}
		if ttl := b.m.TTL(k); ttl > 0 {
			v.ttl = ttl
		}
		switch b.m.Type(k) {
		case "string":
			v.str, _ = b.m.Get(k)
		case "zset":
			members, err := b.m.ZMembers(k)
			if err != nil {
				return snapshot{}, err
			}
			v.zset = map[string]float64{}
			for _, m := range members {
				v.zset[m], _ = b.m.ZScore(k, m)
			}
		case "hash":
			fields, err := b.m.HKeys(k)
			if err != nil {
				return snapshot{}, err
			}
			v.hash = map[string]string{}
			for _, f := range fields {
				v.hash[f] = b.m.HGet(k, f)
			}
		default:
			v.str = "<" + b.m.Type(k) + ">"
		}
		s.keys[k] = v
	}
	return s, nil
}

// server is a redis-server the explorer does not own the clock of.
type server struct {
	c *redis.Client
}

func newServer(addr string) *server {
	return &server{c: redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, PoolSize: 1})}
}

func (b *server) client() *redis.Client        { return b.c }
func (b *server) owned() bool                  { return false }
func (b *server) now() time.Time               { return time.Now() }
func (b *server) advance(time.Duration)        {}
func (b *server) flush()                       { b.c.FlushAll(context.Background()) }
func (b *server) reset()                       { b.flush() }
func (b *server) close()                       { _ = b.c.Close() }
func (b *server) listen(string) (func(), bool) { return func() {}, false }
func (b *server) slack() time.Duration         { return 10 * time.Millisecond }

func (b *server) snapshot() (snapshot, error) {
	ctx := context.Background()
	s := snapshot{now: time.Now(), keys: map[string]value{}}
	keys, err := b.c.Keys(ctx, "*").Result()
	if err != nil {
		return snapshot{}, err
	}
	for _, k := range keys {
		v := value{ttl: -1}
		if ttl, err := b.c.PTTL(ctx, k).Result(); err == nil && ttl > 0 {
			v.ttl, v.at = ttl, time.Now()
		}
		typ, err := b.c.Type(ctx, k).Result()
		if err != nil {
			return snapshot{}, err
		}
		switch typ {
		case "none":
			continue // expired between KEYS and now
		case "string":
			v.str, _ = b.c.Get(ctx, k).Result()
		case "zset":
			zs, err := b.c.ZRangeWithScores(ctx, k, 0, -1).Result()
			if err != nil {
				return snapshot{}, err
			}
			v.zset = map[string]float64{}
			for _, z := range zs {
				v.zset[z.Member.(string)] = z.Score
			}
		case "hash":
			if v.hash, err = b.c.HGetAll(ctx, k).Result(); err != nil {
				return snapshot{}, err
			}
		default:
			v.str = "<" + typ + ">"
		}
		s.keys[k] = v
	}
	return s, nil
}

// snapshot is what the server held after a step, read without changing it.
type snapshot struct {
	now  time.Time
	keys map[string]value
}

// value is one key's value and remaining life (-1: none).
type value struct {
	str  string
	zset map[string]float64
	hash map[string]string
	ttl  time.Duration
	// at is when the ttl was read (zero: the snapshot's now). On a server it is taken as the
	// answer comes, so that a read delayed on a loaded machine cannot make the key seem to
	// expire sooner than it does.
	at time.Time
}

func (s snapshot) get(key string) (string, bool) {
	v, ok := s.keys[key]
	if !ok || v.zset != nil {
		return "", false
	}
	return v.str, true
}

// expiry is when key expires on the server's clock (zero when it has no TTL or is absent).
func (s snapshot) expiry(key string) time.Time {
	v, ok := s.keys[key]
	if !ok || v.ttl < 0 {
		return time.Time{}
	}
	if !v.at.IsZero() {
		return v.at.Add(v.ttl)
	}
	return s.now.Add(v.ttl)
}

// zmembers returns the members of a sorted set by score.
func (s snapshot) zmembers(key string) []string {
	v := s.keys[key]
	out := make([]string, 0, len(v.zset))
	for m := range v.zset {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool {
		if v.zset[out[i]] != v.zset[out[j]] {
			return v.zset[out[i]] < v.zset[out[j]]
		}
		return out[i] < out[j]
	})
	return out
}

// canonical writes the snapshot with times relative to its clock, for counting states.
func (s snapshot) canonical() string {
	keys := make([]string, 0, len(s.keys))
	for k := range s.keys {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := ""
	for _, k := range keys {
		v := s.keys[k]
		out += k + "=" + v.str
		if v.zset != nil {
			for _, m := range s.zmembers(k) {
				out += fmt.Sprintf("[%s]", m)
			}
		}
		hk := make([]string, 0, len(v.hash))
		for f := range v.hash {
			hk = append(hk, f)
		}
		sort.Strings(hk)
		for _, f := range hk {
			out += fmt.Sprintf("{%s}", f) // (the field, not its times)
		}
		out += "/" + strconv.FormatInt(v.ttl.Milliseconds(), 10) + ";"
	}
	return out
}

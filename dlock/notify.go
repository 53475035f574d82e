package dlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/dlockgo/dlock/domain"
	"github.com/dlockgo/dlock/processor"
)

// notifier keeps the subscriptions of a Generator: a lock's release channel is subscribed
// while this process waits in Redis for the key, and for a second after (a process that takes
// and wants the key again and again keeps its subscription instead of paying for SUBSCRIBE
// and UNSUBSCRIBE each time). A release message names the process the key was reserved for:
// only that one acts on it (the others only note that the key is alive); a message that the
// key was left free wakes every waiting process. The confirmation of a subscription (including
// the ones go-redis sends again after reconnecting) wakes the lock's first waiter too, because
// a release that happened before the subscription took effect would otherwise cost a poll
// interval. Messages go to the live state of their key (Generator.lookup), whichever it is.
//
// With a single server or Sentinel all channels share one connection. With a Cluster client
// there is one connection per hash slot in use: release messages then go by sharded pub/sub
// when the servers have it (processor.Sharded), to the shard that owns the key only, and a
// connection's channels must share a slot for go-redis to subscribe them again together after
// a reconnection (it then dials the slot's master as the client's topology knows it). A Ring
// client sends a subscription to the shard of its first channel's hash tag, and must be given
// that channel as it makes the connection: there is one connection per hash tag in use (all
// of one lock's channels share its tag), made with its first channel.
//
// A subscription must hear what releases publish, whatever happens to the deployment: a
// connection that has heard nothing for probeEvery publishes a probe on one of its watched
// channels (with none watched, it only pings), and one that does not hear its probe within the
// next probeEvery is replaced (reset): a new connection, dialled to wherever the client now
// sends commands (the master after a Sentinel failover, the slot's new owner in a Cluster),
// subscribes every channel again, and each confirmation wakes its lock. The same happens when
// Redis drops a sharded subscription itself (its slot moved), and when a SUBSCRIBE or
// UNSUBSCRIBE fails to be sent (send).
//
// SUBSCRIBE and UNSUBSCRIBE are sent, in order, by one goroutine per connection, so no caller
// waits for them: a connection being dialled during a partition holds up nobody.
type notifier struct {
	g       *Generator
	cluster bool // one connection per hash slot
	ring    bool // one connection per hash tag, made with its first channel (a *redis.Ring)

	mu        sync.Mutex
	conns     map[string]*psConn       // by group (see group); guarded by mu
	byChannel map[string]*subscription // guarded by mu
	probes    uint64                   // probes sent, for unique payloads; guarded by mu
	confirmed int                      // subscriptions confirmed by Redis (for tests); guarded by mu
	heard     int                      // release messages handled (for tests); guarded by mu
	linger    time.Duration            // linger, or what a test sets; guarded by mu
	warned    map[string]bool          // refusals (an ACL) logged at Warn, once each: "subscribe", "publish"; guarded by mu
}

// psConn is one subscription connection and the ops waiting to be sent on it. All its fields
// are guarded by the notifier's mu.
type psConn struct {
	group   string         // its key in conns
	slot    int            // the slot of its channels, on a Cluster
	ps      *redis.PubSub  // nil until the sender dials; replaced by a reset
	sharded bool           // ps uses sharded pub/sub
	ops     []op           // to send, in order
	sending bool           // the sender goroutine runs
	subs    int            // entries of byChannel on this connection, leaving ones included
	unsubs  map[string]int // UNSUBSCRIBEs queued or sent and not yet confirmed, by channel
	probe   string         // the probe payload awaited, "" for none
	node    string         // sharded, on a Cluster: the master it was dialled to, as the client saw it
}

// op is a SUBSCRIBE (subscribe true) or UNSUBSCRIBE of a channel.
type op struct {
	channel   string
	subscribe bool
}

// subscription is a channel's subscription. It stays known after UNSUBSCRIBE is sent
// (leaving) until Redis confirms it, so that a release published just before still wakes the
// lock's waiters.
type subscription struct {
	channel string
	key     string    // the lock key whose state its messages go to (sharedPrefix and the unique key: a shared lock's states, of either kind)
	shares  [2]string // a shared lock's: the g.shares keys of its states, of either kind (lookupShared); empty for a mutex's
	conn    *psConn
	users   int         // states that watch it; guarded by the notifier's mu
	idle    *time.Timer // while nobody watches: unsubscribes after linger; guarded by mu
	leaving bool        // guarded by the notifier's mu
	// confirmed: Redis confirmed it on its connection as that is now, and since then no
	// failure came and it did not start leaving (confirmedNow); guarded by the notifier's mu.
	confirmed bool
}

// linger is how long a channel stays subscribed after the last state watching it stopped.
const linger = time.Second

// probeEvery is how long a subscription connection may stay silent before it checks, with a
// probe message of its own, that it hears what is published; a probe not heard within as long
// again replaces the connection.
const probeEvery = time.Second

// probeTag starts a probe message; other processes ignore it (processor.ParseMessage).
const probeTag = "P|"

func newNotifier(g *Generator) *notifier {
	_, cluster := g.client.(*redis.ClusterClient)
	_, ring := g.client.(*redis.Ring)
	return &notifier{g: g, cluster: cluster, ring: ring, conns: make(map[string]*psConn), byChannel: make(map[string]*subscription), linger: linger}
}

// group names the connection channel goes on: its slot on a Cluster, its hash tag on a Ring,
// "" (the one connection) otherwise.
func (n *notifier) group(channel string) string {
	switch {
	case n.cluster:
		return strconv.Itoa(domain.Slot(channel))
	case n.ring:
		return domain.HashTag(channel)
	}
	return ""
}

// watch makes sure channel, key's release channel, is subscribed while a state watches it.
func (n *notifier) watch(channel, key string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.g.done.Err() != nil {
		return
	}
	if sub := n.byChannel[channel]; sub != nil && !sub.leaving {
		sub.users++
		if sub.idle != nil {
			sub.idle.Stop()
			sub.idle = nil
		}
		return
	}
	group := n.group(channel)
	c := n.conns[group]
	if c == nil {
		c = &psConn{group: group, slot: domain.Slot(channel), unsubs: make(map[string]int)}
		n.conns[group] = c
	}
	if old := n.byChannel[channel]; old != nil {
		old.conn.subs-- // replaced while leaving; its confirmation finds the new one
	}
	sub := &subscription{channel: channel, key: key, conn: c, users: 1}
	if k, ok := strings.CutPrefix(key, sharedPrefix); ok {
		sub.shares = [2]string{sharedKey(k, processor.KindRW), sharedKey(k, processor.KindSem)}
	}
	n.byChannel[channel] = sub
	c.subs++
	n.queue(c, op{channel: channel, subscribe: true})
}

// confirmedNow reports whether channel's subscription is confirmed (subscription.confirmed).
// A state made while the channel lingers (less than linger after the key's last state stopped
// watching it) starts with it as its claim (hearing), so that its first request, the barge,
// already claims. The state reads it before the notifier can find the state (a mutex's: under
// the generator's mu, as it is put in g.states) or hear of it (a family's: under its own mu),
// and the flag changes before the states are told (handle, failed): a state that read the old
// value is told the new one.
func (n *notifier) confirmedNow(channel string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	sub := n.byChannel[channel]
	return sub != nil && sub.confirmed
}

// unwatch says a state stopped watching channel; once nobody has for linger, it is
// unsubscribed. heard is the state's claim (hearing.on): one that an answer or a failure
// ended leaves the subscription unconfirmed (confirmedNow), so that the key's next state does
// not claim what Redis said it does not hear (a Redis that does not count the subscription:
// plain pub/sub on a Cluster after a failover).
func (n *notifier) unwatch(channel string, heard bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	sub := n.byChannel[channel]
	if sub == nil || sub.leaving || sub.users == 0 {
		return
	}
	if !heard {
		sub.confirmed = false
	}
	if sub.users--; sub.users == 0 && n.g.done.Err() == nil {
		sub.idle = time.AfterFunc(n.linger, func() { n.expire(sub) })
	}
}

// expire unsubscribes sub if nobody watched it again since.
func (n *notifier) expire(sub *subscription) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.byChannel[sub.channel] != sub || sub.leaving || sub.users > 0 || n.g.done.Err() != nil {
		return
	}
	sub.idle = nil
	sub.leaving, sub.confirmed = true, false
	sub.conn.unsubs[sub.channel]++
	n.queue(sub.conn, op{channel: sub.channel})
}

// queue adds an op for c's sender, starting it if needed. The caller holds mu.
func (n *notifier) queue(c *psConn, o op) {
	c.ops = append(c.ops, o)
	if !c.sending {
		c.sending = n.g.group.Go(func() { n.send(c) })
	}
}

// send sends c's queued ops until none is left (or the generator closes); the first one
// dials the connection and starts its receiver.
func (n *notifier) send(c *psConn) {
	backoff := 10 * time.Millisecond
	pause := func() { // after a failure: the poller covers meanwhile
		select {
		case <-n.g.done.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
	for {
		n.mu.Lock()
		if len(c.ops) == 0 || n.g.done.Err() != nil || n.conns[c.group] != c {
			c.sending = false
			n.mu.Unlock()
			return
		}
		ps, sharded, channel := c.ps, c.sharded, c.ops[0].channel
		n.mu.Unlock()
		if ps == nil {
			var err error
			if sharded, err = n.g.redis.ShardedFor(n.g.done, channel); err != nil { // (a channel shares its lock key's slot)
				n.g.log.Debug("dlock: subscription deferred; the poller covers", zap.Error(err))
				n.report(c, "subscribe", "", err)
				pause()
				continue
			}
		}
		n.mu.Lock()
		if n.conns[c.group] != c || len(c.ops) == 0 {
			n.mu.Unlock()
			continue
		}
		fresh := c.ps == nil
		o := c.ops[0]
		c.ops = c.ops[1:]
		if fresh && n.ring {
			// A Ring's connection is made with its first channel, which picks the shard (and
			// is subscribed as the connection is dialled: outside the lock).
			n.mu.Unlock()
			if !o.subscribe { // nothing to unsubscribe on a connection not yet made: it has left
				n.left(c, o.channel)
				continue
			}
			ps, err := openSubscription(n.g.done, n.g.client, false, o.channel)
			if err != nil { // every shard is down: the op waits for one, the poller covers
				n.g.log.Debug("dlock: subscription deferred; the poller covers", zap.Error(err))
				n.report(c, "subscribe", o.channel, err)
				n.mu.Lock()
				c.ops = append([]op{o}, c.ops...)
				n.mu.Unlock()
				pause()
				continue
			}
			n.mu.Lock()
			if n.conns[c.group] != c || c.ps != nil || n.g.done.Err() != nil {
				n.mu.Unlock()
				closeAll(ps)
				continue
			}
			c.ps, c.sharded = ps, false
			n.mu.Unlock()
			n.g.group.Go(func() { n.receive(c, ps) })
			continue
		}
		if fresh {
			ps, err := openSubscription(n.g.done, n.g.client, sharded) // no channel yet: nothing is sent
			if err != nil {
				c.ops = append([]op{o}, c.ops...)
				n.mu.Unlock()
				n.report(c, "subscribe", o.channel, err)
				pause()
				continue
			}
			c.ps, c.sharded = ps, sharded
		}
		ps, sharded = c.ps, c.sharded
		n.mu.Unlock()
		var err error
		switch {
		case o.subscribe && sharded:
			err = ps.SSubscribe(n.g.done, o.channel)
		case o.subscribe:
			err = ps.Subscribe(n.g.done, o.channel)
		case sharded:
			err = ps.SUnsubscribe(n.g.done, o.channel)
		default:
			err = ps.Unsubscribe(n.g.done, o.channel)
		}
		if fresh {
			// Only now: the first SUBSCRIBE dialled the connection, to the node of its
			// channel's slot. A receive before it would dial with no channel: a random node.
			if sharded {
				node := n.g.redis.MasterOf(n.g.done, o.channel)
				n.mu.Lock()
				c.node = node
				n.mu.Unlock()
			}
			n.g.group.Go(func() { n.receive(c, ps) })
		}
		if err != nil && n.g.done.Err() == nil {
			// go-redis dialled again inside the failed call and subscribed again only the
			// channels it had before it: this SUBSCRIBE was never sent, or this UNSUBSCRIBE's
			// confirmation will never come. Start afresh: every channel still wanted is
			// subscribed again on a new connection, and its confirmation wakes its lock.
			n.g.log.Debug("dlock: (un)subscribe failed; subscribing again, the poller covers meanwhile", zap.String("channel", o.channel), zap.Error(err))
			n.report(c, "subscribe", o.channel, err)
			n.reset(c, ps)
			pause()
			continue
		}
		backoff = 10 * time.Millisecond
	}
}

// report tells the observer of a failed subscription request on c, and makes it the fault of
// the waiters c listens for (failed).
func (n *notifier) report(c *psConn, op, channel string, err error) {
	if errors.Is(err, redis.ErrClosed) || n.g.done.Err() != nil {
		return
	}
	n.g.observer.RedisError(RedisErrorEvent{Op: op, Key: channel, Err: err})
	n.failed(c, err)
}

// failed makes err, a failure of the way to Redis of c's connection (it dropped and could not
// reconnect, a SUBSCRIBE or probe failed), the fault of the waiters of every key c listens
// for: one that gives up names it, as a failure of an ask of its own, unless Redis answered
// since (an ask, or the subscription confirmed again). A waiter that sent no request during
// an outage (its next ask a while off, as it waits for its grant) would else say only that
// its context ended. An answer (a redis.Error: a MOVED, a refusal) is no such failure.
func (n *notifier) failed(c *psConn, err error) {
	if err == nil || answered(err) || errors.Is(err, redis.ErrClosed) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || n.g.done.Err() != nil {
		return
	}
	n.g.noteFault(err)
	for _, ch := range n.listenedOn(c, true) {
		for _, sh := range n.lookupShared(ch) {
			if sh == nil {
				continue
			}
			sh.subscriptionFailed(&RedisProcessError{Op: "subscribe", Key: sh.cfg.UniqueKey(), Err: err})
		}
		if st := n.lookup(ch); st != nil {
			st.subscriptionFailed(&RedisProcessError{Op: "subscribe", Key: st.cfg.UniqueKey(), Err: err})
		}
	}
}

// askAll has the waiters of every key c listens for ask Redis at once: c's client was closed
// under the Generator (not by Close), and nothing else would tell them before their next
// ask, a sixth of a lease off. Their ask fails with the client's error, which ends their
// wait (README: on a closed client a wait ends at once). A goroutine that waits for a
// holding of its own process to be passed on asks nothing: it waits until that holding is
// passed on or lost (its renewals fail).
func (n *notifier) askAll(c *psConn) {
	for _, ch := range n.listenedOn(c, false) {
		for _, sh := range n.lookupShared(ch) {
			if sh != nil {
				sh.askNow()
			}
		}
		if st := n.lookup(ch); st != nil {
			st.signal(HowRetry)
		}
	}
}

// listenedOn returns the channels c listens on (a lingering one too: its key's waiters may
// listen on it), marked unconfirmed if unconfirm.
func (n *notifier) listenedOn(c *psConn, unconfirm bool) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var channels []string
	for ch, sub := range n.byChannel {
		if sub.conn == c && !sub.leaving {
			sub.confirmed = sub.confirmed && !unconfirm
			channels = append(channels, ch)
		}
	}
	return channels
}

// receive reads c's connection ps itself (rather than through go-redis's Channel, which adds
// a goroutine hop to every message) until ps is closed. go-redis reconnects and subscribes
// again after a connection error; a silent connection is probed.
func (n *notifier) receive(c *psConn, ps *redis.PubSub) {
	backoff := 10 * time.Millisecond
	for n.g.done.Err() == nil {
		m, err := receiveOne(n.g.done, ps)
		if err != nil {
			if n.g.done.Err() != nil || !n.current(c, ps) {
				return
			}
			if errors.Is(err, redis.ErrClosed) {
				// The connection's client was closed: the user's, under the Generator (every
				// request fails now: the waiters ask, and so end their waits), or a Ring's shard
				// client that SetAddrs replaced (subscribed again, through the shard that serves
				// the channels now).
				if processor.ClientClosed(n.g.client.Ping(n.g.done).Err()) {
					n.askAll(c)
				} else {
					n.reset(c, ps)
				}
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				n.probe(c, ps)
				continue
			}
			if ch := n.channelOn(c); ch != "" && slotElsewhere(err) {
				// Dialled from a stale slot map (a resharding), to a node that does not own the
				// slot: it refused the subscription, and go-redis keeps the connection (an error
				// reply is no network error). Dialled again once the map names another master.
				n.g.log.Debug("dlock: subscription refused by a node that does not own its slot; subscribing again", zap.Error(err))
				n.moved(c, ps, ch)
				return
			}
			if processor.Refused(err) && n.warnOnce("subscribe") {
				n.g.log.Warn("dlock: Redis refused the subscription to releases (an ACL without a pub/sub command or channel that README's Least privilege names): processes learn of releases by their polls only, every sixth of the lease", zap.Error(err))
			} else {
				n.g.log.Debug("dlock: subscription connection failed; reconnecting", zap.Error(err))
			}
			if backoff > 10*time.Millisecond && !answered(err) {
				// It could not reconnect (a failure again, right after the last): the Observer
				// is told, once a backoff. A drop that reconnects at once, and a refusal (an
				// answer: the Warn above), are no failure of the way to Redis to tell.
				n.report(c, "subscribe", n.channelOn(c), err)
			} else {
				n.failed(c, err)
			}
			n.forgetLeaving(c, ps)
			n.g.redis.Reload() // a Cluster client then dials the slot's new master
			select {
			case <-n.g.done.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 10 * time.Millisecond
		n.handle(c, ps, m)
	}
}

// warnOnce reports whether a refusal of what (a subscription, a publish) is the notifier's
// first: logged at Warn, the later ones (retried every second or so) at Debug, or not at all.
func (n *notifier) warnOnce(what string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.warned[what] {
		return false
	}
	if n.warned == nil {
		n.warned = map[string]bool{}
	}
	n.warned[what] = true
	return true
}

// slotElsewhere reports whether err is a Cluster node's MOVED or ASK reply: the slot is
// served elsewhere.
func slotElsewhere(err error) bool {
	if _, moved := redis.IsMovedError(err); moved {
		return true
	}
	_, ask := redis.IsAskError(err)
	return ask
}

// channelOn returns a channel that c's connection carries for a lock still watched, or "".
func (n *notifier) channelOn(c *psConn) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	for ch, sub := range n.byChannel {
		if sub.conn == c && !sub.leaving {
			return ch
		}
	}
	return ""
}

// receiveOne is ps.ReceiveTimeout, bounded by probeEvery, with a panic of go-redis's (a
// server that answers a subscription with what it cannot read) turned into an error: the
// connection failed, as far as the notifier can tell.
func receiveOne(ctx context.Context, ps *redis.PubSub) (m any, err error) {
	defer func() {
		if p := recover(); p != nil {
			m, err = nil, fmt.Errorf("dlock: a subscription's reply could not be read: %v", p)
		}
	}()
	return ps.ReceiveTimeout(ctx, probeEvery)
}

// openSubscription makes a subscription connection of client's, sharded or not, with channels
// (a Ring's needs its first channel, which picks the shard). A panic is an error here:
// go-redis's, when no Ring shard is up to take it, or a user's client's (processor.Panicked).
func openSubscription(ctx context.Context, client redis.UniversalClient, sharded bool, channels ...string) (ps *redis.PubSub, err error) {
	defer func() {
		if r := recover(); r != nil {
			if _, ring := client.(*redis.Ring); ring {
				ps, err = nil, fmt.Errorf("no Ring shard to subscribe on: %v", r)
			} else {
				ps, err = nil, processor.Panicked(r)
			}
		}
	}()
	if sharded {
		return client.SSubscribe(ctx, channels...), nil
	}
	return client.Subscribe(ctx, channels...), nil
}

// forgetLeaving forgets the channels leaving c after its connection ps failed: go-redis
// subscribes again only the channels it still has, and the confirmations of UNSUBSCRIBEs sent
// on the old connection will never come.
func (n *notifier) forgetLeaving(c *psConn, ps *redis.PubSub) {
	n.mu.Lock()
	if c.ps != ps {
		n.mu.Unlock()
		return
	}
	for ch, sub := range n.byChannel {
		if sub.conn == c && sub.leaving {
			delete(n.byChannel, ch)
			c.subs--
		}
	}
	clear(c.unsubs)
	closing := n.dropIfIdle(c)
	n.mu.Unlock()
	closeAll(closing)
}

// closeAll closes subscription connections (outside the notifier's lock: a Close waits for a
// dial under way).
func closeAll(conns ...*redis.PubSub) {
	for _, ps := range conns {
		if ps != nil {
			_ = ps.Close()
		}
	}
}

// current reports whether ps is still c's connection.
func (n *notifier) current(c *psConn, ps *redis.PubSub) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return c.ps == ps && n.conns[c.group] == c
}

// probe runs when ps has been silent for probeEvery: if its probe went unheard, the connection
// is replaced; else it publishes a probe on one of its channels, through the client that
// publishes releases.
func (n *notifier) probe(c *psConn, ps *redis.PubSub) {
	n.mu.Lock()
	if c.ps != ps {
		n.mu.Unlock()
		return
	}
	if c.probe != "" {
		n.mu.Unlock()
		n.g.log.Debug("dlock: subscription deaf to its probe; subscribing again", zap.Int("slot", c.slot))
		n.reset(c, ps)
		return
	}
	channel := ""
	for ch, sub := range n.byChannel {
		// (Only a channel someone watches: one that lingers may be unsubscribed before its
		// probe arrives, which would make a healthy connection look deaf.)
		if sub.conn == c && !sub.leaving && sub.users > 0 {
			channel = ch
			break
		}
	}
	if channel == "" {
		n.mu.Unlock()
		_ = ps.Ping(n.g.done) // nothing to probe: keep the connection alive
		return
	}
	n.probes++
	payload := probeTag + n.g.prefix + strconv.FormatUint(n.probes, 10)
	c.probe = payload
	sharded := c.sharded
	n.mu.Unlock()
	n.g.group.Go(func() {
		ctx, cancel := context.WithTimeout(n.g.done, probeEvery)
		defer cancel()
		err := processor.Guard(func() error {
			if sharded {
				return n.g.client.SPublish(ctx, channel, payload).Err()
			}
			return n.g.client.Publish(ctx, channel, payload).Err()
		})
		if err != nil && n.current(c, ps) { // (a connection replaced since has news of its own)
			if processor.Refused(err) && n.warnOnce("publish") {
				// (the scripts' messages are refused alike, unseen: they publish by pcall)
				n.g.log.Warn("dlock: Redis refused the publish of a probe (an ACL without a pub/sub command or channel that README's Least privilege names): releases are told to nobody, and waiting processes learn of them by their polls only", zap.Error(err))
			}
			n.report(c, "probe", channel, err)
		}
	})
}

// reset replaces c's connection ps: the channels still wanted are subscribed again on a new
// one (each confirmation wakes its lock), and those leaving are forgotten.
func (n *notifier) reset(c *psConn, ps *redis.PubSub) {
	n.mu.Lock()
	if c.ps != ps {
		n.mu.Unlock()
		return
	}
	c.ps, c.probe, c.ops = nil, "", nil
	clear(c.unsubs)
	for ch, sub := range n.byChannel {
		if sub.conn != c {
			continue
		}
		if sub.leaving {
			delete(n.byChannel, ch)
			c.subs--
			continue
		}
		sub.confirmed = false
		n.queue(c, op{channel: ch, subscribe: true})
	}
	closing := n.dropIfIdle(c)
	n.mu.Unlock()
	closeAll(ps, closing)
	n.g.redis.Reload()
}

// moved replaces c's connection ps after the server dropped channel, a sharded channel whose
// slot moved (a Cluster failover, a resharding) — once the client's topology names another
// master for it than the one ps was dialled to (read every 50 ms and reloaded at most every
// 100 ms, processor.RedisLockProcessor.Reload, for at most a second), so that the new
// connection is dialled to the slot's new master. (Dialled from the stale topology it would
// reach the old master, which after a failover is a replica: it accepts the subscription but
// hears nothing published on the new master until it syncs, and a grant published meanwhile
// went unheard until the next poll.)
func (n *notifier) moved(c *psConn, ps *redis.PubSub, channel string) {
	n.mu.Lock()
	old := c.node
	n.mu.Unlock()
	for deadline := time.Now().Add(time.Second); old != "" && time.Now().Before(deadline); {
		n.g.redis.Reload()
		select {
		case <-n.g.done.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
		if n.g.redis.MasterOf(n.g.done, channel) != old {
			break
		}
	}
	n.reset(c, ps)
}

func (n *notifier) handle(c *psConn, ps *redis.PubSub, m any) {
	switch m := m.(type) {
	case *redis.Subscription:
		switch m.Kind {
		case "subscribe", "ssubscribe":
			n.mu.Lock()
			if sub := n.byChannel[m.Channel]; sub != nil && sub.conn == c && c.ps == ps && !sub.leaving && c.unsubs[m.Channel] == 0 {
				// (Before the states hear it: a state made meanwhile reads it. With an
				// UNSUBSCRIBE of the channel on its way, this is an older SUBSCRIBE's: the
				// confirmation of the one sent after comes after the UNSUBSCRIBE's.)
				sub.confirmed = true
			}
			n.mu.Unlock()
			if st := n.lookup(m.Channel); st != nil {
				st.subscribed()
			}
			for _, sh := range n.lookupShared(m.Channel) {
				if sh != nil {
					sh.subscribed()
				}
			}
			n.mu.Lock()
			n.confirmed++ // after the signal: a test that sees the count sees the wake-up
			n.mu.Unlock()
		case "unsubscribe", "sunsubscribe":
			if !n.left(c, m.Channel) && m.Kind == "sunsubscribe" {
				// Redis dropped a channel we still want: its slot moved to another shard
				n.mu.Lock()
				if sub := n.byChannel[m.Channel]; sub != nil && sub.conn == c && c.ps == ps {
					sub.confirmed = false
				}
				n.mu.Unlock()
				n.g.log.Debug("dlock: sharded subscription dropped by the server; subscribing again", zap.String("channel", m.Channel))
				channel := m.Channel
				n.g.group.Go(func() { n.moved(c, ps, channel) })
			}
		}
	case *redis.Message:
		n.mu.Lock()
		if c.ps == ps {
			c.probe = "" // the connection hears what is published
		}
		n.mu.Unlock()
		if shs := n.lookupShared(m.Channel); shs != [2]*sharedState{} {
			for _, sh := range shs {
				if sh != nil {
					sh.hear(m.Payload)
				}
			}
			return
		}
		msg, ok := processor.ParseMessage(m.Payload)
		if !ok {
			return // a probe
		}
		st := n.lookup(m.Channel)
		if st == nil {
			return
		}
		if strings.HasPrefix(msg.From, n.g.prefix) {
			st.heardOwn(msg.From) // our own release, or a ForceRelease of our tenure
		}
		switch {
		case msg.Granted && strings.HasPrefix(msg.Locker, n.g.prefix):
			st.heardGrant(grant{locker: msg.Locker, token: msg.Token, at: msg.At, heard: time.Now()})
		case msg.Released: // (one of ours too: a leave or a force that let go a key an attempt of ours held)
			st.heardRelease(msg.Gap)
		case msg.First:
			st.heardFirst(msg.Life)
		}
		n.mu.Lock()
		n.heard++ // after it was handled: a test that sees the count sees its effect
		n.mu.Unlock()
	}
}

// lookup returns the live state of the key whose release channel is channel, if any.
func (n *notifier) lookup(channel string) *lockState {
	n.mu.Lock()
	sub := n.byChannel[channel]
	n.mu.Unlock()
	if sub == nil {
		return nil
	}
	return n.g.lookup(sub.key)
}

// lookupShared returns the live shared lock states whose channel is channel, nil where there is
// none. It runs for every message, and allocates nothing: an array, and the states' keys made
// once, by watch. A read-write lock's and a semaphore's of one name share the channel
// (processor.SharedChannel names no kind), and what it carries is for both: Redis keeps one
// lock of that name, of either kind.
func (n *notifier) lookupShared(channel string) (sts [2]*sharedState) {
	n.mu.Lock()
	sub := n.byChannel[channel]
	n.mu.Unlock()
	if sub == nil || sub.shares[0] == "" {
		return sts
	}
	for i, key := range sub.shares {
		sts[i] = n.g.lookupShared(key)
	}
	return sts
}

// left takes note of an unsubscription of channel confirmed on c: it forgets the channel
// unless it was subscribed again since. It reports false when no UNSUBSCRIBE of ours explains
// it (the server dropped a channel we still want).
func (n *notifier) left(c *psConn, channel string) bool {
	n.mu.Lock()
	if c.unsubs[channel] == 0 {
		sub := n.byChannel[channel]
		n.mu.Unlock()
		return sub == nil || sub.conn != c
	}
	if c.unsubs[channel]--; c.unsubs[channel] == 0 {
		delete(c.unsubs, channel)
	}
	var closing *redis.PubSub
	if sub := n.byChannel[channel]; sub != nil && sub.leaving && sub.conn == c {
		delete(n.byChannel, channel)
		c.subs--
		closing = n.dropIfIdle(c)
	}
	n.mu.Unlock()
	closeAll(closing)
	return true
}

// dropIfIdle forgets a Cluster slot's connection once nothing is subscribed or about to be on
// it, and returns it for the caller to close after unlocking. (A single server's one
// connection is kept.) The caller holds mu.
func (n *notifier) dropIfIdle(c *psConn) *redis.PubSub {
	if !(n.cluster || n.ring) || c.subs > 0 || len(c.ops) > 0 || n.conns[c.group] != c {
		return nil
	}
	delete(n.conns, c.group)
	ps := c.ps
	c.ps = nil
	return ps
}

// active counts the channels subscribed and not leaving.
func (n *notifier) active() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := 0
	for _, sub := range n.byChannel {
		if !sub.leaving {
			c++
		}
	}
	return c
}

// close ends the subscriptions; the receivers then return.
func (n *notifier) close() {
	n.mu.Lock()
	var closing []*redis.PubSub
	for _, c := range n.conns {
		closing = append(closing, c.ps)
		c.ps = nil
	}
	for _, sub := range n.byChannel {
		if sub.idle != nil {
			sub.idle.Stop()
		}
	}
	clear(n.conns)
	clear(n.byChannel)
	n.mu.Unlock()
	closeAll(closing...)
}

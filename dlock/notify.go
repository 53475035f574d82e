package dlock

import (
	"errors"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/dlockgo/dlock/processor"
)

// notifier keeps one subscription connection for all the locks of a Generator: a lock's release
// channel is subscribed while this process has waiters on it. A release message wakes the
// lock's first waiter; so does the confirmation of a subscription (including the ones go-redis
// sends again after reconnecting), because a release that happened before the subscription
// took effect would otherwise cost a poll interval.
//
// SUBSCRIBE and UNSUBSCRIBE are sent, in order, by one goroutine of the notifier's own, so no
// caller waits for them: a connection being dialled during a partition holds up nobody.
type notifier struct {
	g    *Generator
	kick chan struct{} // one slot: ops has work for the sender

	mu        sync.Mutex
	ps        *redis.PubSub            // created by the sender; guarded by mu
	byChannel map[string]*subscription // guarded by mu
	ops       []op                     // to send, in order; guarded by mu
	sending   bool                     // the sender goroutine runs; guarded by mu
}

// op is a SUBSCRIBE (subscribe true) or UNSUBSCRIBE of a channel.
type op struct {
	channel   string
	subscribe bool
}

// subscription is a channel's lock. It stays known after UNSUBSCRIBE is sent (leaving) until
// Redis confirms it, so that a release published just before still wakes the lock's waiters.
type subscription struct {
	st      *lockState
	channel string
	leaving bool // guarded by the notifier's mu
}

func newNotifier(g *Generator) *notifier {
	return &notifier{g: g, kick: make(chan struct{}, 1), byChannel: make(map[string]*subscription)}
}

// queue adds an op for the sender, starting it if needed. The caller holds mu.
func (n *notifier) queue(o op) {
	n.ops = append(n.ops, o)
	if !n.sending {
		n.sending = n.g.group.Go(n.send)
	}
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// send sends the queued ops until the generator closes; the first one creates the
// subscription connection and starts the receiver.
func (n *notifier) send() {
	for {
		select {
		case <-n.g.done.Done():
			return
		case <-n.kick:
		}
		for {
			n.mu.Lock()
			if len(n.ops) == 0 || n.g.done.Err() != nil {
				n.mu.Unlock()
				break
			}
			o := n.ops[0]
			n.ops = n.ops[1:]
			ps := n.ps
			if ps == nil {
				ps = n.g.client.Subscribe(n.g.done) // no channel yet: nothing is sent
				n.ps = ps
				n.g.group.Go(func() { n.receive(ps) })
			}
			n.mu.Unlock()
			var err error
			if o.subscribe {
				err = ps.Subscribe(n.g.done, o.channel)
			} else {
				err = ps.Unsubscribe(n.g.done, o.channel)
			}
			if err != nil {
				n.g.log.Debug("dlock: (un)subscribe failed; the poller covers", zap.String("channel", o.channel), zap.Error(err))
			}
		}
	}
}

// subscribe subscribes st's release channel and returns the subscription (nil once closed).
func (n *notifier) subscribe(st *lockState) *subscription {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.g.done.Err() != nil {
		return nil
	}
	sub := &subscription{st: st, channel: st.channel}
	n.byChannel[st.channel] = sub
	n.queue(op{channel: st.channel, subscribe: true})
	return sub
}

// unsubscribe ends sub, unless its channel was subscribed again since.
func (n *notifier) unsubscribe(sub *subscription) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.byChannel[sub.channel] != sub || sub.leaving {
		return
	}
	sub.leaving = true
	n.queue(op{channel: sub.channel})
}

func (n *notifier) lookup(channel string) *lockState {
	n.mu.Lock()
	defer n.mu.Unlock()
	if sub := n.byChannel[channel]; sub != nil {
		return sub.st
	}
	return nil
}

// left forgets a channel whose unsubscription Redis confirmed, unless it was subscribed again.
func (n *notifier) left(channel string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if sub := n.byChannel[channel]; sub != nil && sub.leaving {
		delete(n.byChannel, channel)
	}
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

// healthCheck is how long the subscription connection may stay silent before it is pinged.
const healthCheck = 5 * time.Second

// receive reads the subscription connection itself (rather than through go-redis's Channel,
// which adds a goroutine hop to every message) until the notifier closes. go-redis reconnects
// and subscribes again after a connection error; a silent connection is pinged.
func (n *notifier) receive(ps *redis.PubSub) {
	backoff := 10 * time.Millisecond
	for n.g.done.Err() == nil {
		m, err := ps.ReceiveTimeout(n.g.done, healthCheck)
		if err != nil {
			if n.g.done.Err() != nil || errors.Is(err, redis.ErrClosed) {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				_ = ps.Ping(n.g.done)
				continue
			}
			n.g.log.Debug("dlock: subscription connection failed; reconnecting", zap.Error(err))
			select {
			case <-n.g.done.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 10 * time.Millisecond
		n.handle(m)
	}
}

func (n *notifier) handle(m any) {
	switch m := m.(type) {
	case *redis.Subscription:
		switch m.Kind {
		case "subscribe":
			if st := n.lookup(m.Channel); st != nil {
				st.signal()
			}
		case "unsubscribe":
			n.left(m.Channel)
		}
	case *redis.Message:
		st := n.lookup(m.Channel)
		locker, ok := processor.ParseMessage(m.Payload)
		if st == nil || !ok || strings.HasPrefix(locker, n.g.prefix) {
			return // our own release woke the local queue already
		}
		// released by another process: the first waiter tries (and, if the key is taken
		// again, leaves our mark for the next release)
		st.heard.Store(n.g.now())
		st.signalBy(HowNotified)
	}
}

// close ends the subscription; receive then returns.
func (n *notifier) close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ps != nil {
		_ = n.ps.Close()
	}
	clear(n.byChannel)
}

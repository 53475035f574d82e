package dlock

import (
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// notifier keeps one subscription connection for all the locks of a Generator: a lock's release
// channel is subscribed while this process has waiters on it. A release message wakes the
// lock's first waiter; so does the confirmation of a subscription (including the ones go-redis
// sends again after reconnecting), because a release that happened before the subscription
// took effect would otherwise cost a poll interval.
type notifier struct {
	g *Generator

	mu        sync.Mutex
	ps        *redis.PubSub         // created on first use; guarded by mu
	byChannel map[string]*lockState // guarded by mu
}

func newNotifier(g *Generator) *notifier {
	return &notifier{g: g, byChannel: make(map[string]*lockState)}
}

func (n *notifier) subscribe(st *lockState) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.g.ctx.Err() != nil {
		return
	}
	n.byChannel[st.channel] = st
	if n.ps == nil {
		n.ps = n.g.client.Subscribe(n.g.ctx, st.channel)
		msgs := n.ps.ChannelWithSubscriptions(redis.WithChannelSize(1024))
		n.g.group.Go(func() { n.receive(msgs) })
		return
	}
	if err := n.ps.Subscribe(n.g.ctx, st.channel); err != nil {
		n.g.log.Debug("dlock: subscribe failed; the poller covers", zap.String("channel", st.channel), zap.Error(err))
	}
}

func (n *notifier) unsubscribe(st *lockState) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.byChannel[st.channel] != st || n.ps == nil {
		return
	}
	delete(n.byChannel, st.channel)
	if err := n.ps.Unsubscribe(n.g.ctx, st.channel); err != nil {
		n.g.log.Debug("dlock: unsubscribe failed", zap.String("channel", st.channel), zap.Error(err))
	}
}

func (n *notifier) lookup(channel string) *lockState {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.byChannel[channel]
}

func (n *notifier) receive(msgs <-chan any) {
	for m := range msgs {
		switch m := m.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				if st := n.lookup(m.Channel); st != nil {
					st.signal()
				}
			}
		case *redis.Message:
			if strings.HasPrefix(m.Payload, n.g.prefix) {
				continue // our own release: the local queue was woken already
			}
			if st := n.lookup(m.Channel); st != nil {
				st.heard.Store(n.g.now())
				st.signal()
			}
		}
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

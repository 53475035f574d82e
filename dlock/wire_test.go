package dlock_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/processor"
)

// wire is a go-redis hook that plays the network between a client and Redis for the scripts
// the library sends (found by name, processor.ScriptName): it keeps a copy of every script
// request, so a test can deliver one again later (a client's retry, a duplicated packet), and
// it can keep requests "on the wire": the caller gets a timeout at once, as after a lost
// reply, and the request reaches Redis only when the test lets it.
type wire struct {
	t *testing.T

	mu      sync.Mutex
	sent    []sentCmd
	next    redis.ProcessHook           // the rest of the client's chain, once a command went through
	holdFor map[string]int              // script name -> how many of its next requests to keep on the wire
	held    []sentCmd                   // kept on the wire, not yet delivered
	fire    map[string]func(args []any) // told of a script's request before it is sent
}

// sentCmd is one script request: its script's name and arguments.
type sentCmd struct {
	name string
	args []any
}

// newWire puts a wire in front of c.
func newWire(t *testing.T, c *redis.Client) *wire {
	w := &wire{t: t, holdFor: map[string]int{}, fire: map[string]func([]any){}}
	c.AddHook(w)
	return w
}

func (w *wire) DialHook(next redis.DialHook) redis.DialHook { return next }
func (w *wire) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (w *wire) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		name := processor.ScriptName(cmd.Args())
		if name == "" {
			return next(ctx, cmd)
		}
		args := append([]any(nil), cmd.Args()...)
		w.mu.Lock()
		w.next = next
		w.sent = append(w.sent, sentCmd{name, args})
		f := w.fire[name]
		hold := w.holdFor[name] > 0
		if hold {
			w.holdFor[name]--
			w.held = append(w.held, sentCmd{name, args})
		}
		w.mu.Unlock()
		if f != nil {
			f(args)
		}
		if hold {
			cmd.SetErr(errors.New("i/o timeout (injected: the request is still on its way)"))
			return cmd.Err()
		}
		return next(ctx, cmd)
	}
}

// hold keeps the next n requests of script name on the wire.
func (w *wire) hold(name string, n int) {
	w.mu.Lock()
	w.holdFor[name] += n
	w.mu.Unlock()
}

// onSend runs f with the arguments of every request of script name, before it is sent.
func (w *wire) onSend(name string, f func(args []any)) {
	w.mu.Lock()
	w.fire[name] = f
	w.mu.Unlock()
}

// heldCount returns how many requests are on the wire.
func (w *wire) heldCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.held)
}

// deliverHeld lets every request on the wire reach Redis now, in the order they were sent,
// and waits for their replies (which nobody reads).
func (w *wire) deliverHeld() {
	w.mu.Lock()
	held := w.held
	w.held = nil
	w.mu.Unlock()
	for _, c := range held {
		w.send(c)
	}
}

// copies returns the requests of the given scripts sent so far (all scripts when none is
// named), in order.
func (w *wire) copies(names ...string) []sentCmd {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []sentCmd
	for _, c := range w.sent {
		if len(names) == 0 || slices.Contains(names, c.name) {
			out = append(out, c)
		}
	}
	return out
}

// send delivers a copy of c to Redis, past the wire (it is neither kept nor recorded), and
// waits for its reply.
func (w *wire) send(c sentCmd) {
	w.mu.Lock()
	next := w.next
	w.mu.Unlock()
	cmd := redis.NewCmd(context.Background(), c.args...)
	if err := next(context.Background(), cmd); err != nil && !errors.Is(err, redis.Nil) {
		w.t.Logf("copy of %s: %v", c.name, err)
	}
}

package dlock_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/domain"
	"github.com/dlockgo/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// A subscription connection that hears nothing of what releases publish (here: dialled to
// another server, as after a Sentinel failover leaves it on the old master) must be replaced,
// so that a release still wakes the waiter by message. The lease is long, so the poller (every
// 5 s, and skipped while the subscription is fresh) would come too late to pass for it: the
// waiter must be woken by the release message.
func TestDeafSubscriptionIsReplaced(t *testing.T) {
	srv.NeedReal(t)
	other, err := redistest.StartReal() // where the first subscription goes: nobody publishes there
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()

	var deafNext atomic.Bool
	var dials, deafDials atomic.Int32
	d := &net.Dialer{Timeout: 5 * time.Second}
	c := redis.NewClient(&redis.Options{
		Addr: srv.Addr,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			if deafNext.CompareAndSwap(true, false) {
				deafDials.Add(1)
				return d.DialContext(ctx, network, other.Addr)
			}
			return d.DialContext(ctx, network, addr)
		},
	})
	defer c.Close()
	ctx := ctxT(t, 30*time.Second)
	if err := c.Ping(ctx).Err(); err != nil { // the command connection, dialled to srv
		t.Fatal(err)
	}
	rec := &howRecorder{}
	gWait, err := dlock.NewGenerator(c, dlock.WithDefaultLease(30*time.Second), dlock.WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	defer gWait.Close(context.Background())
	gHold, _ := newGen(t, dlock.WithDefaultLease(30*time.Second))
	lh, _ := gHold.Gen("DEAF", target(t))
	lw, _ := gWait.Gen("DEAF", target(t))

	deafNext.Store(true) // the next connection the waiter's client dials is the subscription's
	for round := 1; ; round++ {
		owned, err := lh.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() {
			o, err := lw.Lock(ctx)
			if err == nil {
				err = lw.Unlock(o)
			}
			got <- err
		}()
		if round == 1 { // the deaf subscription is noticed and replaced: a dial after the deaf one
			waitFor(t, func() bool { return deafDials.Load() == 1 && dials.Load() >= 3 && gWait.Confirmed() >= 2 })
		}
		// The new subscription's confirmation wakes the waiter, whose attempt fails (held) and
		// renews its entry in the line, saying that Redis hears it now (the deaf subscription
		// was on another server): only the release message can wake it next. (Taking the entry
		// out and waiting for an ask to put it back raced with that ask: the next came half a
		// lease, 15 s, later.)
		waitFor(t, func() bool { _, heard, ok := gWait.Place(key(lw)); return ok && heard })
		confirmed := gWait.Confirmed()
		if err := lh.Unlock(owned); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatal(err)
		}
		rec.mu.Lock()
		how := rec.how[len(rec.how)-1]
		rec.mu.Unlock()
		switch {
		case how == dlock.HowNotified:
			return
		case gWait.Confirmed() > confirmed && round < 3:
			// a probe judged the subscription deaf on a slow machine (its echo later than a
			// second) and subscribed again, and the confirmation's ask met the grant: again
		default:
			t.Fatalf("round %d: the waiter acquired by %v, want by a release message", round, how)
		}
	}
}

// A SUBSCRIBE whose write fails, on a connection that died just before it (a CLIENT KILL, a
// reset) while its reader had not noticed yet, is sent again. (go-redis dials again inside the
// failed call and subscribes again only the channels it had before it.) Here the connection
// keeps hearing another channel, so no probe finds it deaf: without the new SUBSCRIBE the
// waiter's channel would stay unsubscribed while the notifier counts it watched, and every
// grant to the process would wait for a poll.
func TestFailedSubscribeIsSentAgain(t *testing.T) {
	srv.NeedReal(t)
	const lease = 30 * time.Second
	raw := rawClient(t)
	var arm atomic.Pointer[string]
	cb := redis.NewClient(&redis.Options{Addr: srv.Addr, Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return failingSubscribe{Conn: c, arm: &arm}, nil
	}})
	t.Cleanup(func() { cb.Close() })
	ga, _ := newGen(t)
	gb := genOn(t, cb)
	tg := rgTarget(t, 0)
	a1, a2 := mustGen(t, ga, "SUBF", tg+".one", lease), mustGen(t, ga, "SUBF", tg+".two", lease)
	b1, b2 := mustGen(t, gb, "SUBF", tg+".one", lease), mustGen(t, gb, "SUBF", tg+".two", lease)
	ctx := ctxT(t, 60*time.Second)

	// B waits for key one: its subscription connection is up.
	o1 := mustLock(t, a1, ctx)
	d1 := rgLockAsync(b1, ctx)
	waitFor(t, func() bool { _, heard, ok := gb.Place(key(b1)); return ok && heard })
	stop := make(chan struct{})
	defer close(stop)
	go func() { // key one's channels hear a message every 300 ms: no probe
		for {
			select {
			case <-stop:
				return
			case <-time.After(300 * time.Millisecond):
			}
			for _, ch := range raw.PubSubChannels(context.Background(), "{"+key(b1)+"}:released:*").Val() {
				raw.Publish(context.Background(), ch, "x")
			}
		}
	}()

	// B comes to wait for key two as its connection dies under the SUBSCRIBE.
	o2 := mustLock(t, a2, ctx)
	tag := "{" + key(b2) + "}:released"
	arm.Store(&tag)
	d2 := rgLockAsync(b2, ctx)
	waitFor(t, func() bool { return arm.Load() == nil })
	waitFor(t, func() bool { return len(raw.PubSubChannels(context.Background(), tag+":*").Val()) == 1 })
	waitFor(t, func() bool { _, heard, ok := gb.Place(key(b2)); return ok && heard })

	if err := a2.Unlock(o2); err != nil { // grants key two to B
		t.Fatal(err)
	}
	r := rgRecv(t, d2, 20*time.Second, "B's Lock of key two")
	if r.err != nil {
		t.Fatal(r.err)
	}
	_ = b2.Unlock(r.owned)
	_ = a1.Unlock(o1)
	if r := rgRecv(t, d1, 20*time.Second, "B's Lock of key one"); r.err == nil {
		_ = b1.Unlock(r.owned)
	}
}

// A subscription reply that go-redis cannot read (a server that is not quite Redis answers
// SUBSCRIBE with an empty array) makes go-redis panic; in the notifier's own goroutine that
// would end the process. It is a failed connection instead.
func TestUnreadableSubscriptionReplyIsAnError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				buf := make([]byte, 4096)
				for {
					n, err := conn.Read(buf)
					if err != nil {
						return
					}
					reply, req := "+OK\r\n", bytes.ToLower(buf[:n])
					switch {
					case bytes.Contains(req, []byte("hello")):
						reply = "-ERR unknown command 'HELLO'\r\n"
					case bytes.Contains(req, []byte("subscribe")):
						reply = "*0\r\n" // no kind, no channel
					}
					if _, err := conn.Write([]byte(reply)); err != nil {
						return
					}
				}
			}()
		}
	}()
	c := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), DisableIdentity: true})
	defer c.Close()
	ps := c.Subscribe(context.Background(), "x")
	defer ps.Close()
	if _, err := dlock.ReceiveOne(context.Background(), ps); err == nil || !strings.Contains(err.Error(), "could not be read") {
		t.Fatalf("receive = %v, want an error saying the reply could not be read", err)
	}
}

// failingSubscribe fails (and closes) the first write of a SUBSCRIBE of a channel that contains
// *arm, as a connection that died just before it.
type failingSubscribe struct {
	net.Conn
	arm *atomic.Pointer[string]
}

func (c failingSubscribe) Write(b []byte) (int, error) {
	if p := c.arm.Load(); p != nil && bytes.Contains(bytes.ToLower(b), []byte("\r\nsubscribe\r\n")) && bytes.Contains(b, []byte(*p)) && c.arm.CompareAndSwap(p, nil) {
		c.Conn.Close()
		return 0, errors.New("write: connection reset by peer (injected)")
	}
	return c.Conn.Write(b)
}

// A silent subscription connection probes itself on a channel a lock watches, never on one
// that only lingers after its last watcher: that one may be unsubscribed before its probe
// arrives, and the healthy connection would then look deaf and be replaced.
func TestProbeGoesOnAWatchedChannel(t *testing.T) {
	var probes atomic.Value // []string: the channels probed
	probes.Store([]string(nil))
	ga, ca := newGen(t)
	ca.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if args := cmd.Args(); len(args) == 3 && fmt.Sprint(args[0]) == "publish" && strings.HasPrefix(fmt.Sprint(args[2]), "P|") {
			probes.Store(append(probes.Load().([]string), fmt.Sprint(args[1])))
		}
		return next(ctx, cmd)
	}})
	ga.SetLinger(time.Minute) // channels linger long after their last watcher
	gb, _ := newGen(t)
	ctx := ctxT(t, 60*time.Second)
	const lease = 30 * time.Second
	tg := target(t)
	for i := range 5 { // five channels that linger: a waited, took the key and let it go
		la, lb := mustGen(t, ga, "PROBE", fmt.Sprint(tg, "x", i), lease), mustGen(t, gb, "PROBE", fmt.Sprint(tg, "x", i), lease)
		b := mustLock(t, lb, ctx)
		got := lockAsync(t, la, ctx)
		inLine(t, ctx, la, 1)
		if err := b.Unlock(); err != nil {
			t.Fatal(err)
		}
		if err := recv(t, got, "a's Lock").Unlock(); err != nil {
			t.Fatal(err)
		}
	}
	ly, by := mustGen(t, ga, "PROBE", tg+"y", lease), mustGen(t, gb, "PROBE", tg+"y", lease)
	hy := mustLock(t, by, ctx) // b holds y for long; a waits for it, watching y's channel
	defer by.Unlock(hy)        //nolint:errcheck
	_ = lockOnce(ctx, ly)
	inLine(t, ctx, ly, 1)
	start := len(probes.Load().([]string))
	waitFor(t, func() bool { return len(probes.Load().([]string)) >= start+3 }) // a probe a second
	for _, ch := range probes.Load().([]string)[start:] {
		if !strings.Contains(ch, tg+"y") {
			t.Fatalf("a probe went on %s, a channel nobody watches (y's is the one watched)", ch)
		}
	}
}

// A lock on a Cluster shard whose master is well works beside other shards' dead master, as
// the Cluster serves it (cluster-require-full-coverage no): a process's first TryLock gets the
// key, and a waiter in another process is woken by the release's message on its sharded
// channel, not by its poll a sixth of its minute's lease later. Whether pub/sub is sharded is
// asked of the key's own master; asked of any master, it failed with the dead one's error.
func TestClusterLockBesideADeadMaster(t *testing.T) {
	if !srv.Real {
		t.Skip(srv.Why)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close() // (refused from now on)
	const lease = time.Minute
	var slotMap atomic.Pointer[[]redis.ClusterSlot] // (set once the lock's key is known, before any request)
	cluster := func() *redis.ClusterClient {
		c := redis.NewClusterClient(&redis.ClusterOptions{
			ClusterSlots: func(context.Context) ([]redis.ClusterSlot, error) {
				if m := slotMap.Load(); m != nil {
					return *m, nil
				}
				return nil, errors.New("no slot map yet")
			},
			MaxRetries: -1,
		})
		t.Cleanup(func() { c.Close() })
		return c
	}
	ctx := ctxT(t, 30*time.Second) // (the waiter's poll would come after 10 s)
	rec := &howRecorder{}
	gh, err := dlock.NewGenerator(cluster(), dlock.WithDefaultLease(lease))
	if err != nil {
		t.Fatal(err)
	}
	defer gh.Close(ctx) //nolint:errcheck
	gw, err := dlock.NewGenerator(cluster(), dlock.WithDefaultLease(lease), dlock.WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close(ctx) //nolint:errcheck
	tg := target(t)
	lh, lw := mustGen(t, gh, "BESIDEDEAD", tg, lease), mustGen(t, gw, "BESIDEDEAD", tg, lease)
	slot := domain.Slot(key(lh))
	node := func(addr string) []redis.ClusterNode { return []redis.ClusterNode{{Addr: addr}} }
	var slots []redis.ClusterSlot
	if slot > 0 {
		slots = append(slots, redis.ClusterSlot{Start: 0, End: slot - 1, Nodes: node(dead)})
	}
	if slot < 16383 {
		slots = append(slots, redis.ClusterSlot{Start: slot + 1, End: 16383, Nodes: node(dead)})
	}
	slots = append(slots, redis.ClusterSlot{Start: slot, End: slot, Nodes: node(srv.Addr)})
	slotMap.Store(&slots)
	oh, ok, err := lh.TryLock(ctx)
	if err != nil || !ok {
		t.Fatalf("a process's first TryLock on the live shard = %v, %v; want the key", ok, err)
	}
	got := lockAsync(t, lw, ctx)
	waitFor(t, func() bool { r, heard, ok := gw.Place(key(lw)); return ok && heard && r == 0 })
	if err := lh.Unlock(oh); err != nil {
		t.Fatal(err)
	}
	ow := recv(t, got, "the waiter's Lock")
	defer lw.Unlock(ow) //nolint:errcheck
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.how) != 1 || rec.how[0] != dlock.HowNotified {
		t.Fatalf("the waiter acquired by %v, want by the release's message", rec.how)
	}
}

// With a Cluster client a subscription connection is dialled by its first SSUBSCRIBE, to the
// node that owns the channel's slot (a receiver started before it would dial a random node,
// and the SSUBSCRIBE would get MOVED). Healthy cluster, nothing moves: no subscription ends on
// the wrong node.
func TestClusterSubscriptionDialsTheSlotsNode(t *testing.T) {
	t.Parallel()
	addrs := redistest.NeedCluster(t, 3, 0).Addrs()
	core, logs := observer.New(zap.DebugLevel)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	defer cc.Close()
	ctx := ctxT(t, 60*time.Second)
	holder, err := dlock.NewGenerator(cc, dlock.WithDefaultLease(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(context.Background()) //nolint:errcheck
	const n = 30
	for i := 0; i < n; i++ {
		g, err := dlock.NewGenerator(cc, dlock.WithDefaultLease(20*time.Second), dlock.WithLogger(zap.New(core)))
		if err != nil {
			t.Fatal(err)
		}
		lh, _ := holder.Gen("RV3C", fmt.Sprintf("%s-%d", target(t), i))
		lw, _ := g.Gen("RV3C", fmt.Sprintf("%s-%d", target(t), i))
		oh, err := lh.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			if o, err := lw.Lock(wctx); err == nil {
				_ = lw.Unlock(o)
			}
		}()
		waitFor(t, func() bool { return g.Subscribed() == 1 })
		time.Sleep(300 * time.Millisecond) // the subscription is sent (or fails) well within this
		cancel()
		<-done
		_ = lh.Unlock(oh)
		if err := g.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	moved := 0
	for _, e := range logs.All() {
		for _, f := range e.Context {
			if f.Key == "error" {
				if err, ok := f.Interface.(error); ok && strings.Contains(err.Error(), "MOVED") {
					moved++
				}
			}
		}
	}
	if moved > 0 {
		t.Fatalf("%d MOVED replies to SSUBSCRIBE on %d fresh subscription connections: dialled a node that does not own the slot", moved, n)
	}
}

// A Ring client (go-redis's client-side sharding, a UniversalClient) carries locks too: a
// release's grant reaches the waiting process's subscription. Its Subscribe panics without a channel,
// as the notifier's first dial called it.
func TestRingClientNotifies(t *testing.T) {
	ring := func() *redis.Ring {
		return redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": srv.Addr}})
	}
	ra, rb := ring(), ring()
	defer ra.Close()
	defer rb.Close()
	ctx := ctxT(t, 30*time.Second)
	ga, err := dlock.NewGenerator(ra, dlock.WithDefaultLease(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer ga.Close(context.Background()) //nolint:errcheck
	gb, err := dlock.NewGenerator(rb, dlock.WithDefaultLease(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer gb.Close(context.Background()) //nolint:errcheck
	la, _ := ga.Gen("RING", target(t))
	lb, _ := gb.Gen("RING", target(t))
	oa, err := la.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		ob, err := lb.Lock(ctx)
		if err == nil {
			err = lb.Unlock(ob)
		}
		got <- err
	}()
	waitFor(t, func() bool { return gb.Subscribed() == 1 })
	waitFor(t, func() bool { _, heard, ok := gb.Place(key(lb)); return ok && heard })
	heard := gb.Heard()
	if err := la.Unlock(oa); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("the waiter on a Ring client: %v", err)
	}
	// The release's grant reached the waiter's subscription on the Ring (it usually wakes the
	// waiter; a wake-up the subscription's confirmation gave may have raced it to the key).
	waitFor(t, func() bool { return gb.Heard() > heard })
}

// A Ring whose shard is replaced (SetAddrs gives it another address: go-redis closes the
// shard's client, and with it the subscription's connection) keeps notifying: the channels
// are subscribed again through the shard that serves them now. (The connection's client
// being closed was taken for the Generator's client closed, and nothing subscribed again:
// the waiter heard no release, only its polls.)
func TestRingShardReplacedIsSubscribedAgain(t *testing.T) {
	_, port, err := net.SplitHostPort(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	rb := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": srv.Addr}})
	defer rb.Close()
	ctx := ctxT(t, 30*time.Second)
	ga, _ := newGen(t, dlock.WithDefaultLease(time.Minute))
	gb, err := dlock.NewGenerator(rb, dlock.WithDefaultLease(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer gb.Close(context.Background()) //nolint:errcheck
	la, _ := ga.Gen("RINGSHARD", target(t))
	lb, _ := gb.Gen("RINGSHARD", target(t))
	oa, err := la.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		ob, err := lb.Lock(ctx)
		if err == nil {
			err = lb.Unlock(ob)
		}
		got <- err
	}()
	waitFor(t, func() bool { _, heard, ok := gb.Place(key(lb)); return ok && heard && gb.Confirmed() > 0 })
	confirmed := gb.Confirmed()
	rb.SetAddrs(map[string]string{"a": "localhost:" + port}) // the same server, under another address
	waitFor(t, func() bool { return gb.Confirmed() > confirmed })
	heard := gb.Heard()
	if err := la.Unlock(oa); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return gb.Heard() > heard }) // the release's grant reached the subscription
	if err := recv(t, got, "the waiter on the Ring"); err != nil {
		t.Fatal(err)
	}
}

// A Ring whose every shard is down (go-redis's Ring.Subscribe panics then) costs a waiter its
// notifications, never the program: its Lock ends with its context, and nothing panics.
func TestRingWithEveryShardDownDoesNotPanic(t *testing.T) {
	t.Parallel()
	s, err := redistest.StartReal()
	if err != nil {
		t.Skip(err)
	}
	defer s.Close()
	r := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": s.Addr}, HeartbeatFrequency: 10 * time.Millisecond})
	defer r.Close()
	g, err := dlock.NewGenerator(r, dlock.WithDefaultLease(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(context.Background()) //nolint:errcheck
	ctx := ctxT(t, 30*time.Second)
	first, _ := g.Gen("RINGDOWN", target(t)+"-first")
	o, err := first.Lock(ctx) // (the Generator is ready: its scripts are loaded)
	if err != nil {
		t.Fatal(err)
	}
	_ = first.Unlock(o)
	s.Kill()
	waitFor(t, func() bool {
		return errors.Is(r.Ping(ctx).Err(), redis.ErrClosed) || strings.Contains(fmt.Sprint(r.Ping(ctx).Err()), "shards are down")
	})
	l, _ := g.Gen("RINGDOWN", target(t)+"-second") // another hash tag: a new subscription connection
	wctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	if _, err := l.Lock(wctx); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("Lock with every shard down: %v, want ErrNotObtained", err)
	}
}

// dialGate holds up the client's new connections while shut: a subscription connection
// dialled meanwhile subscribes only once it opens.
type dialGate struct {
	shut atomic.Bool
	open chan struct{}
}

func (d *dialGate) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if d.shut.Load() {
			select {
			case <-d.open:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return next(ctx, network, addr)
	}
}

func (d *dialGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (d *dialGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A read-write lock's or semaphore's waiter whose first take puts its process in line before
// its channel is subscribed cannot hear what a release publishes meanwhile: the subscription's
// confirmation makes it ask again at once. Here the confirmation comes while that take's reply
// is still on its way, and the holder let go in between. The reply set the next ask a sixth
// of the lease on (10 s here) over the confirmation's, and the waiter — and every process in
// line behind it — waited that long with the lock free.
func TestFamilyWaiterAsksOnceSubscribedWhileItsTakeWasOnItsWay(t *testing.T) {
	const lease = time.Minute
	for _, kind := range []string{"RW", "Semaphore"} {
		t.Run(kind, func(t *testing.T) {
			tg := uniqueTarget(t)
			ga, _ := newGen(t, dlock.WithDefaultLease(lease))
			ctx := ctxT(t, 30*time.Second)
			hold := func(g *dlock.Generator) (*dlock.Owner, error) {
				if kind == "RW" {
					return rwOf(t, g, tg).RLock(ctx)
				}
				return semOf(t, g, tg, 1).Acquire(ctx, 1)
			}
			want := func(g *dlock.Generator, ctx context.Context) (*dlock.Owner, error) {
				if kind == "RW" {
					return rwOf(t, g, tg).Lock(ctx)
				}
				return semOf(t, g, tg, 1).Acquire(ctx, 1)
			}
			oa, err := hold(ga)
			if err != nil {
				t.Fatal(err)
			}

			c := srv.Client()
			preload(t, c)
			if err := c.Ping(ctx).Err(); err != nil { // (a pooled connection for the take)
				t.Fatal(err)
			}
			gate := &dialGate{open: make(chan struct{})}
			gate.shut.Store(true)
			c.AddHook(gate)
			ran, replied := make(chan struct{}), make(chan struct{})
			var first atomic.Bool
			c.AddHook(fnHook{func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
				err := next(ctx, cmd)
				if sharedArg(cmd.Args(), "op") == "take" && first.CompareAndSwap(false, true) {
					close(ran)
					<-replied // the reply comes after the subscription's confirmation
				}
				return err
			}})
			gw := genOn(t, c, dlock.WithDefaultLease(lease))
			got := make(chan error, 1)
			go func() {
				o, err := want(gw, ctxT(t, 20*time.Second))
				if err == nil {
					err = o.Unlock()
				}
				got <- err
			}()
			recv(t, ran, "the waiter's take")
			if err := oa.Unlock(); err != nil { // its message to the waiter is not heard
				t.Fatal(err)
			}
			close(gate.open)
			waitFor(t, func() bool { return gw.Confirmed() > 0 })
			close(replied)
			select {
			case err := <-got:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the waiter did not ask again once its channel was subscribed: it waits for its next poll with the lock free")
			}
		})
	}
}

// A holder of a read-write lock is told that another process waits (W) by message, or by a
// renewal's reply; one whose subscription drops misses the message, so the subscription's
// confirmation has its holdings renew at once. Here the confirmation comes while a renewal is
// on its way, one that ran in Redis before the writer stood in line (and so answers that
// nobody waits), and the writer stood in line while the holder was deaf. The renewal's reply
// put the next renewal three quarters of the lease on over the confirmation's: the holder went
// on letting its own new readers in beside the waiting writer for that long (45 s here).
func TestFamilyHolderRenewsOnceSubscribedWhileARenewalWasOnItsWay(t *testing.T) {
	const lease = time.Minute
	tg := uniqueTarget(t)
	ctx := ctxT(t, 30*time.Second)
	c := srv.Client()
	preload(t, c)
	gate := &dialGate{open: make(chan struct{})}
	c.AddHook(gate)
	ran, replied := make(chan struct{}), make(chan struct{})
	var armed atomic.Bool
	c.AddHook(fnHook{func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		err := next(ctx, cmd)
		if sharedArg(cmd.Args(), "op") == "renew" && armed.CompareAndSwap(true, false) {
			close(ran)
			<-replied // the reply comes after the second subscription's confirmation
		}
		return err
	}})
	ga := genOn(t, c, dlock.WithDefaultLease(lease))
	la := rwOf(t, ga, tg)
	held, err := la.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return ga.Confirmed() > 0 })
	raw := rawClient(t)
	armed.Store(true)
	killPubSub(t, raw) // subscribed again at once: the holding renews, and its reply is held up
	recv(t, ran, "the holding's renewal")
	gate.shut.Store(true)
	confirmed := ga.Confirmed()
	killPubSub(t, raw) // deaf until the gate opens
	gw, _ := newGen(t, dlock.WithDefaultLease(lease))
	lw := rwOf(t, gw, tg)
	wrote := make(chan error, 1)
	go func() {
		o, err := lw.Lock(ctx)
		if err == nil {
			err = o.Unlock()
		}
		wrote <- err
	}()
	waitFor(t, func() bool { s, err := lw.State(ctx); return err == nil && len(s.Waiting) == 1 })
	close(gate.open)
	waitFor(t, func() bool { return ga.Confirmed() > confirmed })
	close(replied)
	if !rgWaitUntil(5*time.Second, func() bool {
		r, ok, err := la.TryRLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			_ = r.Unlock()
		}
		return !ok
	}) {
		t.Fatal("the holder lets its new readers in beside the waiting writer: it did not renew once subscribed again, and does not know the writer waits")
	}
	if err := held.Unlock(); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, wrote, "the writer"); err != nil {
		t.Fatal(err)
	}
}

// A message on a read-write lock's or semaphore's channel costs its dispatch no allocation:
// the notifier handles every message of every watched lock, while holders and waiters wait on
// them.
func TestSharedMessageDispatchAllocatesNothing(t *testing.T) {
	g, _ := newGen(t)
	o, err := rwOf(t, g, uniqueTarget(t)).RLock(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer o.Unlock()
	hear, n := g.SharedDispatch("(a payload nobody acts on)")
	for deadline := time.Now().Add(10 * time.Second); n == 0 && time.Now().Before(deadline); hear, n = g.SharedDispatch("(a payload nobody acts on)") {
		time.Sleep(10 * time.Millisecond) // (subscribed in the background)
	}
	if n != 1 {
		t.Fatalf("%d shared channels subscribed while a read-lock is held, want 1", n)
	}
	if a := testing.AllocsPerRun(1000, hear); a != 0 {
		t.Fatalf("a message on a shared lock's channel costs its dispatch %v allocations, want none", a)
	}
}

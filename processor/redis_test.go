package processor_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/domain"
	dlerrors "github.com/dlockgo/dlock/errors"
	"github.com/dlockgo/dlock/internal/faultproxy"
	"github.com/dlockgo/dlock/internal/redistest"
	"github.com/dlockgo/dlock/processor"
)

var srv *redistest.Server

func TestMain(m *testing.M) {
	os.Exit(redistest.Main(m, func(s *redistest.Server) { srv = s }))
}

// backends runs f on the shared server and on a fresh miniredis, so the scripts are known to
// behave the same on both.
func backends(t *testing.T, f func(t *testing.T, c *redis.Client)) {
	t.Run("server", func(t *testing.T) {
		c := srv.Client()
		defer c.Close()
		f(t, c)
	})
	t.Run("miniredis", func(t *testing.T) {
		m := miniredis.RunT(t)
		c := redis.NewClient(&redis.Options{Addr: m.Addr()})
		defer c.Close()
		f(t, c)
	})
}

// runs numbers fresh targets: a test run again (-count) on the same server starts from no
// state its earlier run left (settled marks of the same lockers, entries in line). Every
// call of cfg makes a new key.
var runs atomic.Int64

// fresh returns target made unique to this call.
func fresh(target string) string { return target + strconv.FormatInt(runs.Add(1), 10) }

func cfg(t *testing.T, target string) domain.DLockConfig {
	c, err := domain.NewDLockConfig("PROC", fresh(target+"-"+t.Name()), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// proc is one process's processor, named by its mark: its lockers are mark + a number.
type proc struct {
	*processor.RedisLockProcessor
	mark string
	n    int
}

func newProc(t *testing.T, c redis.UniversalClient, mark string) *proc {
	p, err := processor.NewRedisLockProcessor(c, processor.Options{Publish: true, Mark: mark})
	if err != nil {
		t.Fatal(err)
	}
	return &proc{RedisLockProcessor: p, mark: mark}
}

// locker returns a fresh locker of p.
func (p *proc) locker() string {
	p.n++
	return p.mark + strconv.Itoa(p.n)
}

// last returns p's newest locker.
func (p *proc) last() string { return p.mark + strconv.Itoa(p.n) }

// lockWith asks for the key with locker (an attempt p waits with already).
func (p *proc) lockWith(t *testing.T, lc domain.DLockConfig, locker string, wait bool, tokens int) processor.Result {
	t.Helper()
	r, err := p.Lock(context.Background(), lc, processor.LockRequest{Locker: locker, Wait: wait, Tokens: tokens})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// lock asks for the key with a fresh locker, waiting (joining the line) when wait is set.
func (p *proc) lock(t *testing.T, lc domain.DLockConfig, wait bool, tokens int) (string, processor.Result) {
	t.Helper()
	l := p.locker()
	r, err := p.Lock(context.Background(), lc, processor.LockRequest{Locker: l, Wait: wait, Tokens: tokens})
	if err != nil {
		t.Fatal(err)
	}
	return l, r
}

func (p *proc) release(t *testing.T, lc domain.DLockConfig, locker string) processor.Result {
	t.Helper()
	r, err := p.Unlock(context.Background(), lc, processor.ReleaseRequest{Locker: locker})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// entryOf returns the locker the process named mark waits with in lc's line ("" for none).
func entryOf(t *testing.T, c *redis.Client, lc domain.DLockConfig, mark string) string {
	t.Helper()
	e, err := c.HGet(context.Background(), processor.WantKey(lc), mark).Result()
	if errors.Is(err, redis.Nil) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	locker, _, _ := strings.Cut(e, "|")
	return locker
}

// wipeKeys deletes every key of lc's lock, as Redis restarting empty would.
func wipeKeys(t *testing.T, c *redis.Client, lc domain.DLockConfig) {
	t.Helper()
	ctx := context.Background()
	keys, err := c.Keys(ctx, "*"+lc.UniqueKey()+"*").Result()
	if err == nil && len(keys) > 0 {
		err = c.Del(ctx, keys...).Err()
	}
	if err != nil {
		t.Fatal(err)
	}
}

func inspect(t *testing.T, p *proc, lc domain.DLockConfig) processor.Inspection {
	t.Helper()
	in, err := p.Inspect(context.Background(), lc)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

func TestNilClient(t *testing.T) {
	if _, err := processor.NewRedisLockProcessor(nil, processor.Options{Publish: true}); !errors.Is(err, dlerrors.ErrInvalidConfig) {
		t.Fatalf("err = %v, want ErrInvalidConfig", err)
	}
}

// Take, hold elsewhere, renew, release, take again.
func TestLifecycle(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		a, b := newProc(t, c, "pa-"), newProc(t, c, "pb-")
		lc := cfg(t, "life")
		la, r := a.lock(t, lc, true, 1)
		if r.Outcome != processor.Taken || r.Token == 0 {
			t.Fatalf("Lock = %+v", r)
		}
		if _, r := b.lock(t, lc, false, 1); r.Outcome != processor.Held || r.Seen.Holder != la || r.Seen.Fence == 0 {
			t.Fatalf("second Lock = %+v, want held by %s", r, la)
		}
		if e, err := a.Load(ctx, lc); err != nil || e == nil || e.Locker != la || e.Status != domain.StatusProcessing {
			t.Fatalf("Load = %+v, %v", e, err)
		}
		if r, err := a.ExpandLease(ctx, lc, processor.RenewRequest{Locker: la}); err != nil || r.Outcome != processor.Renewed {
			t.Fatalf("renew = %+v, %v", r, err)
		}
		if r, err := b.ExpandLease(ctx, lc, processor.RenewRequest{Locker: b.locker()}); err != nil || r.Outcome != processor.Gone {
			t.Fatalf("renew by a non-holder = %+v, %v; want gone", r, err)
		}
		if r := b.release(t, lc, b.locker()); r.Outcome != processor.Gone {
			t.Fatalf("release by a non-holder = %+v; want gone", r)
		}
		if r := a.release(t, lc, la); r.Outcome != processor.Released || r.Next != "" {
			t.Fatalf("release = %+v; want released, nobody in line", r)
		}
		if r := a.release(t, lc, la); r.Outcome != processor.Settled {
			t.Fatalf("the release sent again = %+v; want settled", r)
		}
		if e, _ := a.Load(ctx, lc); e != nil {
			t.Fatalf("key still held by %q", e.Locker)
		}
		if _, r2 := b.lock(t, lc, false, 1); r2.Outcome != processor.Taken || r2.Token <= r.Token {
			t.Fatalf("relock = %+v after token %d", r2, r.Token)
		}
	})
}

// Waiting processes form a line in arrival order, each with the attempt it waits with; a
// release grants the key to the first: the key holds that attempt's locker, with a block of
// fencing tokens, and nobody else can take it. A process that stops waiting leaves the line.
func TestLineServesInOrder(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		a, b, d := newProc(t, c, "pa-"), newProc(t, c, "pb-"), newProc(t, c, "pd-")
		lc := cfg(t, "line")
		la, r := a.lock(t, lc, true, 1)
		lb, _ := b.lock(t, lc, true, 1)
		d.lock(t, lc, true, 1)
		b.lockWith(t, lc, lb, true, 1) // again, with the same attempt: keeps its place
		if in := inspect(t, a, lc); !slices.Equal(in.Waiting, []string{"pb-", "pd-"}) {
			t.Fatalf("line %v, want [pb- pd-]", in.Waiting)
		}
		rel := a.release(t, lc, la)
		if rel.Outcome != processor.Released || rel.Next != lb {
			t.Fatalf("release = %+v, want granted to %s", rel, lb)
		}
		in := inspect(t, a, lc)
		if in.Holder != lb || !slices.Equal(in.Waiting, []string{"pd-"}) || in.Fence <= r.Token {
			t.Fatalf("after the release: %+v", in)
		}
		if _, r := d.lock(t, lc, true, 1); r.Outcome != processor.Held {
			t.Fatalf("pd- took a key granted to pb-: %+v", r)
		}
		la2, _ := a.lock(t, lc, true, 1)
		if in := inspect(t, a, lc); !slices.Equal(in.Waiting, []string{"pd-", "pa-"}) {
			t.Fatalf("line %v, want [pd- pa-]", in.Waiting)
		}
		// pd- stops waiting: the next release grants pa-
		if _, err := d.Leave(ctx, lc, processor.LeaveRequest{Last: d.last()}); err != nil {
			t.Fatal(err)
		}
		if r := b.release(t, lc, lb); r.Next != la2 {
			t.Fatalf("release = %+v, want granted to %s", r, la2)
		}
		if r := a.release(t, lc, la2); r.Next != "" {
			t.Fatalf("release with nobody in line = %+v", r)
		}
		if in := inspect(t, a, lc); in.Holder != "" || len(in.Waiting) != 0 {
			t.Fatalf("left behind: %+v", in)
		}
	})
}

// A grant tells its grantee Redis's clock as it ran the grant: after the clock (or counter)
// that the grantee's last answer showing it waiting carried, and no later than the grant's
// first token (the larger of the counter and the clock, plus one). The release's reply and the
// message say the same; a release that grants nothing says 0. An operator's removal that
// passes the key on tells the removed holder's process the grant in the form a version before
// the clock reads (no clock: its own locker is found as the releaser).
func TestGrantTellsRedisClock(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		lc := cfg(t, "at")
		ps := c.PSubscribe(ctx, processor.ReleaseChannel(lc)+":*")
		defer ps.Close()
		if _, err := ps.Receive(ctx); err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		heard := func() (string, string) {
			t.Helper()
			msg, err := ps.ReceiveMessage(rctx)
			if err != nil {
				t.Fatal(err)
			}
			return strings.TrimPrefix(msg.Channel, processor.ReleaseChannel(lc)+":"), msg.Payload
		}
		a, b, d := newProc(t, c, "pa-"), newProc(t, c, "pb-"), newProc(t, c, "pd-")
		la, _ := a.lock(t, lc, true, 1)
		lb, rb := b.lock(t, lc, true, 1)
		ld, rd := d.lock(t, lc, true, 1)
		r := a.release(t, lc, la)
		if r.Next != lb || r.At <= rb.Seen.Fence || r.At > r.Token {
			t.Fatalf("release = %+v; want granted to %s at a time after %d (its answer's) and at most %d", r, lb, rb.Seen.Fence, r.Token)
		}
		to, payload := heard()
		if m, ok := processor.ParseMessage(payload); to != "pb-" || !ok || m.Locker != lb || m.At != r.At || m.Token != r.Token {
			t.Fatalf("told %s %q, want the grant to %s at %d", to, payload, lb, r.At)
		}
		f, err := a.ForceRelease(ctx, lc, lb)
		if err != nil || f.Next != ld || f.At <= rd.Seen.Fence || f.At > f.Token {
			t.Fatalf("force = %+v, %v; want granted to %s at a time after %d", f, err, ld, rd.Seen.Fence)
		}
		got := map[string]string{}
		for range 2 {
			to, payload := heard()
			got[to] = payload
		}
		if m, _ := processor.ParseMessage(got["pd-"]); m.Locker != ld || m.At != f.At {
			t.Fatalf("pd- was told %q, want the grant at %d", got["pd-"], f.At)
		}
		if want := "G|" + lb + "|" + ld + "|" + strconv.FormatUint(f.Token, 10); got["pb-"] != want {
			t.Fatalf("pb- was told %q, want %q", got["pb-"], want)
		}
		if r := d.release(t, lc, ld); r.Outcome != processor.Released || r.Next != "" || r.At != 0 {
			t.Fatalf("release = %+v; want the key left free, no time", r)
		}
	})
}

// A release tells the grant (the locker it went to and the first of its block of tokens) to
// that process alone, on its own channel: it holds the key without a further request, and no
// other process wakes. A key left free is told to every process in line; an operator's
// removal is told to the removed holder's process as well.
func TestMessagesGoToTheProcessesConcerned(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		lc := cfg(t, "pub")
		ps := c.PSubscribe(ctx, processor.ReleaseChannel(lc)+":*")
		defer ps.Close()
		if _, err := ps.Receive(ctx); err != nil { // subscription confirmation
			t.Fatal(err)
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		// heard returns the next message and the mark of the process it was told to.
		heard := func() (string, processor.Message) {
			t.Helper()
			msg, err := ps.ReceiveMessage(rctx)
			if err != nil {
				t.Fatal(err)
			}
			m, ok := processor.ParseMessage(msg.Payload)
			if !ok {
				t.Fatalf("message %q", msg.Payload)
			}
			return strings.TrimPrefix(msg.Channel, processor.ReleaseChannel(lc)+":"), m
		}
		a, b, d := newProc(t, c, "pa-"), newProc(t, c, "pb-"), newProc(t, c, "pd-")
		la, _ := a.lock(t, lc, true, 1)
		lb, _ := b.lock(t, lc, true, 4)
		ld, _ := d.lock(t, lc, true, 1)
		a.release(t, lc, la)
		if to, m := heard(); to != "pb-" || !m.Granted || m.From != la || m.Locker != lb || m.Token == 0 {
			t.Fatalf("told %s %+v, want the grant to pb- alone", to, m)
		} else if in := inspect(t, a, lc); in.Holder != lb || in.Fence != m.Token+3 {
			t.Fatalf("after the grant: %+v (token %d)", in, m.Token)
		}
		if r, err := a.ForceReleaseAs(ctx, lc, lb, "force-1"); err != nil || r.Next != ld {
			t.Fatalf("force = %+v, %v; want granted to %s", r, err, ld)
		}
		got := map[string]processor.Message{}
		for range 2 {
			to, m := heard()
			got[to] = m
		}
		if m := got["pd-"]; !m.Granted || m.From != lb || m.Locker != ld {
			t.Fatalf("pd- was told %+v, want the grant", got)
		}
		if r, err := a.ForceReleaseAs(ctx, lc, lb, "force-1"); err != nil || r.Outcome != processor.Settled || r.Next != ld {
			t.Fatalf("a copy of the force = %+v, %v; want settled (removed by it), granted to %s as the first said", r, err, ld)
		} else if in := inspect(t, a, lc); in.Holder != ld {
			t.Fatalf("a copy of the force changed the holder: %+v", in)
		}
		if m, want := got["pb-"], got["pd-"]; m.At != 0 || m.Granted != want.Granted || m.From != want.From || m.Locker != want.Locker || m.Token != want.Token {
			t.Fatalf("pb- was told %+v, want the grant that removed its holding (without the time)", got)
		}
		lb2, _ := b.lock(t, lc, true, 1)
		a.lock(t, lc, true, 1)
		gapped, err := processor.NewRedisLockProcessor(c, processor.Options{Publish: true, Mark: "pd-", GapEvery: time.Minute, GapWindow: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if r, err := gapped.Unlock(ctx, lc, processor.ReleaseRequest{Locker: ld}); err != nil || r.Next != "" || r.Gap != 200*time.Millisecond {
			t.Fatalf("release = %+v, %v; want the key left free for a window", r, err)
		}
		got = map[string]processor.Message{}
		for range 2 {
			to, m := heard()
			got[to] = m
		}
		for _, to := range []string{"pb-", "pa-"} {
			if m := got[to]; !m.Released || m.From != ld || m.Gap != 200*time.Millisecond {
				t.Fatalf("told %+v, want the window told to pb- and pa-, in line", got)
			}
		}
		time.Sleep(210 * time.Millisecond) // the window ends
		la2, _ := a.lock(t, lc, true, 1)
		b.lockWith(t, lc, lb2, true, 1)
		a.release(t, lc, la2)
		if to, m := heard(); to != "pb-" || !m.Granted || m.Locker != lb2 {
			t.Fatalf("told %s %+v, want the grant to pb-", to, m)
		}
		if _, err := b.Leave(ctx, lc, processor.LeaveRequest{Last: lb2}); err != nil { // it no longer wants it
			t.Fatal(err)
		}
		if to, m := heard(); to != "pb-" || !m.Released || m.From != lb2 {
			t.Fatalf("told %s %+v, want the leave that let its grant go told to pb-", to, m)
		}
		if in := inspect(t, a, lc); in.Holder != "" || len(in.Waiting) != 0 {
			t.Fatalf("left behind: %+v", in)
		}
	})
}

// A grant whose message went unheard is found by the process's next attempt with the same
// locker (its retry poller's): the key is its own, renewed for the attempt's lease, with new
// tokens.
func TestUnheardGrantIsFoundByTheNextAttempt(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		a, b := newProc(t, c, "pa-"), newProc(t, c, "pb-")
		lc := cfg(t, "unheard")
		la, _ := a.lock(t, lc, true, 1)
		lb, _ := b.lock(t, lc, true, 1)
		if r := a.release(t, lc, la); r.Next != lb {
			t.Fatalf("release = %+v", r)
		}
		if r := b.lockWith(t, lc, lb, true, 1); r.Outcome != processor.Taken || r.Token == 0 {
			t.Fatalf("the next attempt with the granted locker = %+v, want taken", r)
		}
		if in := inspect(t, a, lc); len(in.Waiting) != 0 {
			t.Fatalf("line %v after pb- found its grant, want empty", in.Waiting)
		}
	})
}

// A release grants the key only to a process that renewed its entry within a third of its
// lease: one that stopped (it may have died) is skipped, and stays in line.
func TestGrantSkipsAStaleEntry(t *testing.T) {
	c := srv.Client() // real time
	defer c.Close()
	a, b, d := newProc(t, c, "pa-"), newProc(t, c, "pb-"), newProc(t, c, "pd-")
	lc, _ := domain.NewDLockConfig("PROC", fresh("stale-"+t.Name()), 300*time.Millisecond)
	slow, _ := lc.WithLease(10 * time.Second)
	la, _ := a.lock(t, slow, true, 1)
	b.lock(t, lc, true, 1) // fresh for 100 ms
	time.Sleep(processor.GrantFresh(lc) + 50*time.Millisecond)
	ld, _ := d.lock(t, slow, true, 1)
	if r := a.release(t, slow, la); r.Next != ld {
		t.Fatalf("release = %+v, want granted to %s (pb- stopped renewing its entry)", r, ld)
	}
	// (Inspect lists pb- no more: a release passes it over. Its place is in the line's key.)
	ctx := context.Background()
	if line, err := c.ZRange(ctx, processor.LineKey(lc), 0, -1).Result(); err != nil || !slices.Equal(line, []string{"pb-"}) {
		t.Fatalf("line %v (%v), want pb- still in it", line, err)
	}
	// A release that finds nobody to grant the key to tells every process in line that it is
	// free: pb-, passed over, listens now (it did not as it renewed its entry), and may take it.
	sub := c.Subscribe(ctx, processor.ProcessChannel(lc, "pb-"))
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	if r := d.release(t, slow, ld); r.Outcome != processor.Released || r.Next != "" {
		t.Fatalf("release = %+v, want the key left free (pb- is still not renewed)", r)
	}
	hear, cancel := context.WithTimeout(ctx, 5*time.Second) // (a hang made a failure)
	defer cancel()
	msg, err := sub.ReceiveMessage(hear)
	if err != nil {
		t.Fatalf("pb- heard nothing (%v), want the key left free", err)
	}
	if m, ok := processor.ParseMessage(msg.Payload); !ok || !m.Released || m.From != ld {
		t.Fatalf("pb- heard %q, want the key left free by %s", msg.Payload, ld)
	}
}

// A process that listens on its channel of the key is granted it however long ago it renewed
// its entry: it hears the grant at once, and a dead process's subscription is gone. Its
// waiting attempts learn its place in line and that Redis hears it; the process first in line
// after a grant is told so when its entry is older than a sixth of its lease.
func TestGrantGoesToAProcessThatListens(t *testing.T) {
	c := srv.Client() // real time
	defer c.Close()
	ctx := context.Background()
	a, b, d := newProc(t, c, "pa-"), newProc(t, c, "pb-"), newProc(t, c, "pd-")
	lc, _ := domain.NewDLockConfig("PROC", fresh("listen-"+t.Name()), 300*time.Millisecond)
	slow, _ := lc.WithLease(10 * time.Second)
	la, _ := a.lock(t, slow, true, 1)
	lb, rb := b.lock(t, lc, true, 1)
	if rb.Seen.Rank != 0 || rb.Seen.Heard {
		t.Fatalf("pb- waits with %+v, want first in line and not heard", rb.Seen)
	}
	ps := c.Subscribe(ctx, processor.ProcessChannel(lc, "pb-"), processor.ProcessChannel(lc, "pd-"))
	defer ps.Close()
	for range 2 {
		if _, err := ps.Receive(ctx); err != nil { // the confirmations
			t.Fatal(err)
		}
	}
	if r := b.lockWith(t, lc, lb, true, 1); r.Seen.Rank != 0 || !r.Seen.Heard {
		t.Fatalf("pb- asks again: %+v, want first in line and heard", r.Seen)
	}
	_, rd := d.lock(t, lc, true, 1)
	if rd.Seen.Rank != 1 || !rd.Seen.Heard {
		t.Fatalf("pd- waits with %+v, want second in line and heard", rd.Seen)
	}
	time.Sleep(processor.GrantFresh(lc) + 50*time.Millisecond) // neither renews its entry
	if r := a.release(t, slow, la); r.Next != lb {
		t.Fatalf("release = %+v, want granted to %s (it listens)", r, lb)
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for _, want := range []string{"pb-", "pd-"} {
		msg, err := ps.ReceiveMessage(rctx)
		if err != nil {
			t.Fatal(err)
		}
		m, _ := processor.ParseMessage(msg.Payload)
		switch to := strings.TrimPrefix(msg.Channel, processor.ReleaseChannel(lc)+":"); {
		case to != want:
			t.Fatalf("%q told to %s, want a message to %s", msg.Payload, to, want)
		case want == "pb-" && !m.Granted, want == "pd-" && (!m.First || m.From != la):
			t.Fatalf("%q told to %s", msg.Payload, to)
		}
	}
	ps.Close()
	waitForNoSubscriber(t, c, processor.ProcessChannel(lc, "pd-"))
	if r := b.release(t, lc, lb); r.Next != "" {
		t.Fatalf("release = %+v, want pd- skipped: stale, and nobody listens", r)
	}
}

// The first process in line that listens is told so when the process before it leaves the
// line or is granted the key: 'F', with the key's life as it was told (the lease just granted,
// or what is left of the holding; 0 when the key is free). A process further back is not,
// nor one that does not listen.
func TestFirstInLineIsTold(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		lc := cfg(t, "first")
		a, b, q, d, e, f := newProc(t, c, "pa-"), newProc(t, c, "pb-"), newProc(t, c, "pq-"), newProc(t, c, "pd-"), newProc(t, c, "pe-"), newProc(t, c, "pf-")
		ps := c.Subscribe(ctx, processor.ProcessChannel(lc, "pb-"), processor.ProcessChannel(lc, "pd-"), processor.ProcessChannel(lc, "pe-"), processor.ProcessChannel(lc, "pf-"))
		defer ps.Close()
		for range 4 {
			if _, err := ps.Receive(ctx); err != nil {
				t.Fatal(err)
			}
		}
		la, _ := a.lock(t, lc, true, 1)
		b.lock(t, lc, true, 1)
		q.lock(t, lc, true, 1) // (it does not listen: never told)
		ld, _ := d.lock(t, lc, true, 1)
		e.lock(t, lc, true, 1)
		if _, err := b.Leave(ctx, lc, processor.LeaveRequest{Last: b.last()}); err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		next := func() (string, processor.Message) {
			t.Helper()
			msg, err := ps.ReceiveMessage(rctx)
			if err != nil {
				t.Fatal(err)
			}
			m, _ := processor.ParseMessage(msg.Payload)
			return strings.TrimPrefix(msg.Channel, processor.ReleaseChannel(lc)+":"), m
		}
		if to, m := next(); to != "pd-" || !m.First || m.From != "pb-" || m.Life <= 0 || m.Life > lc.Lease() {
			t.Fatalf("after pb- left: told %s %+v, want pd- told it is first (pq- before it does not listen), with what is left of pa-'s %v", to, m, lc.Lease())
		}
		lq := q.last()
		if r := a.release(t, lc, la); r.Next != lq { // (its entry is fresh)
			t.Fatalf("release = %+v, want granted to %s", r, lq)
		}
		if to, m := next(); to != "pd-" || !m.First || m.From != la || m.Life != lc.Lease() {
			t.Fatalf("told %s %+v, want pd- told again that it is the first that listens, with the lease granted (%v)", to, m, lc.Lease())
		}
		q.release(t, lc, lq)
		if to, m := next(); to != "pd-" || !m.Granted || m.Locker != ld {
			t.Fatalf("told %s %+v, want the grant to pd-", to, m)
		}
		if to, m := next(); to != "pe-" || !m.First || m.From != lq || m.Life != lc.Lease() {
			t.Fatalf("told %s %+v, want pe- told it is first", to, m)
		}
		f.lock(t, lc, true, 1)
		c.Del(ctx, lc.UniqueKey()) // (pd-'s holding expired, as if it died)
		if _, err := e.Leave(ctx, lc, processor.LeaveRequest{Last: e.last()}); err != nil {
			t.Fatal(err)
		}
		if to, m := next(); to != "pf-" || !m.First || m.From != "pe-" || m.Life != 0 {
			t.Fatalf("told %s %+v, want pf- told it is first, the key free", to, m)
		}
	})
}

// After a grant, the process told it is first is the first behind the grantee whose entry is
// alive and listened: an entry whose time ran out, though its process listens now, is passed
// over (and the release goes through: the grant is not left half told).
func TestFirstInLineIsToldPastAnExpiredEntry(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		lc := cfg(t, "first-expired")
		a, b, d, e := newProc(t, c, "pa-"), newProc(t, c, "pb-"), newProc(t, c, "pd-"), newProc(t, c, "pe-")
		ps := c.Subscribe(ctx, processor.ProcessChannel(lc, "pd-"), processor.ProcessChannel(lc, "pe-"))
		defer ps.Close()
		for range 2 {
			if _, err := ps.Receive(ctx); err != nil {
				t.Fatal(err)
			}
		}
		la, _ := a.lock(t, lc, true, 1)
		lb, _ := b.lock(t, lc, true, 1)
		d.lock(t, lc, true, 1)
		e.lock(t, lc, true, 1)
		w := c.HGet(ctx, processor.WantKey(lc), "pd-").Val()
		f := strings.Split(w, "|")
		if len(f) != 6 || f[5] != "1" {
			t.Fatalf("pd-'s entry %q, want one that listens", w)
		}
		f[4] = "1" // (its time ran out long ago)
		c.HSet(ctx, processor.WantKey(lc), "pd-", strings.Join(f, "|"))
		r, err := a.Unlock(ctx, lc, processor.ReleaseRequest{Locker: la})
		if err != nil || r.Next != lb {
			t.Fatalf("the release = %+v, %v; want granted to %s", r, err, lb)
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		msg, err := ps.ReceiveMessage(rctx)
		if err != nil {
			t.Fatal(err)
		}
		if to := strings.TrimPrefix(msg.Channel, processor.ReleaseChannel(lc)+":"); to != "pe-" || msg.Payload[:1] != "F" {
			t.Fatalf("told %s %q, want pe- told it is first (pd-'s entry expired)", to, msg.Payload)
		}
	})
}

// The process told it is first is the first in line that listens and that Redis hears: one
// that listened and stopped (its subscription gone, its entry still fresh) is passed over, so
// that the live one behind it is told, not a dead channel.
func TestFirstInLineIsToldPastAProcessThatStoppedListening(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		lc := cfg(t, "first-deaf")
		a, b, d, e := newProc(t, c, "pa-"), newProc(t, c, "pb-"), newProc(t, c, "pd-"), newProc(t, c, "pe-")
		psd := c.Subscribe(ctx, processor.ProcessChannel(lc, "pd-"))
		if _, err := psd.Receive(ctx); err != nil {
			t.Fatal(err)
		}
		ps := c.Subscribe(ctx, processor.ProcessChannel(lc, "pe-"))
		defer ps.Close()
		if _, err := ps.Receive(ctx); err != nil {
			t.Fatal(err)
		}
		a.lock(t, lc, true, 1)
		b.lock(t, lc, true, 1) // (first in line, not listening)
		d.lock(t, lc, true, 1)
		e.lock(t, lc, true, 1)
		psd.Close()
		waitForNoSubscriber(t, c, processor.ProcessChannel(lc, "pd-"))
		if _, err := b.Leave(ctx, lc, processor.LeaveRequest{Last: b.last()}); err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		msg, err := ps.ReceiveMessage(rctx)
		if err != nil {
			t.Fatalf("pe- told nothing after pb- left (pd- before it stopped listening): %v", err)
		}
		if m, _ := processor.ParseMessage(msg.Payload); !m.First || strings.TrimPrefix(msg.Channel, processor.ReleaseChannel(lc)+":") != "pe-" {
			t.Fatalf("told %s %+v, want pe- told it is first", msg.Channel, m)
		}
	})
}

// After a grant, the next process in line that listens is not told it is first when its pace
// further back is the first's already: its entry lives no longer than its lease (a lease of
// 2 s or more: it asks every third of its lease either way) and the key was granted for more
// than a third of that lease (it asks again before the new holding could expire unrenewed).
// It is told after a grant of a third of its lease or less, when its own lease is under 2 s,
// and after a leave (the holding it waits behind may expire at any time).
func TestFirstInLineIsToldOnlyWhenItsPaceChanges(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		lc, err := domain.NewDLockConfig("PROC", fresh("pace-"+t.Name()), 3*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		short, _ := lc.WithLease(time.Second) // a third of lc's lease
		marks := []string{"pa-", "pb-", "pd-", "pe-", "pf-", "pg-"}
		p := map[string]*proc{}
		var channels []string
		for _, m := range marks {
			p[m] = newProc(t, c, m)
			channels = append(channels, processor.ProcessChannel(lc, m))
		}
		ps := c.Subscribe(ctx, channels...)
		defer ps.Close()
		for range channels {
			if _, err := ps.Receive(ctx); err != nil {
				t.Fatal(err)
			}
		}
		la, _ := p["pa-"].lock(t, lc, true, 1)
		lb, _ := p["pb-"].lock(t, lc, true, 1)
		ld, _ := p["pd-"].lock(t, lc, true, 1)
		le, _ := p["pe-"].lock(t, short, true, 1) // (its entry lives 2 s, longer than its lease)
		p["pf-"].lock(t, lc, true, 1)
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		next := func() string {
			t.Helper()
			msg, err := ps.ReceiveMessage(rctx)
			if err != nil {
				t.Fatal(err)
			}
			return strings.TrimPrefix(msg.Channel, processor.ReleaseChannel(lc)+":") + " " + msg.Payload[:1]
		}
		// (Messages on one connection come in order: a message missing shows as the next one.)
		p["pa-"].release(t, lc, la) // to pb-, 3 s; pd- (3 s) keeps the first's pace already
		p["pb-"].release(t, lc, lb) // to pd-, 3 s; pe- (1 s) asks seldom further back
		p["pd-"].release(t, lc, ld) // to pe-, 1 s: not more than a third of pf-'s lease
		for _, want := range []string{"pb- G", "pd- G", "pe- F", "pe- G", "pf- F"} {
			if got := next(); got != want {
				t.Fatalf("told %q, want %q", got, want)
			}
		}
		p["pg-"].lock(t, lc, true, 1)
		if _, err := p["pf-"].Leave(ctx, lc, processor.LeaveRequest{Last: p["pf-"].last()}); err != nil {
			t.Fatal(err)
		}
		if got := next(); got != "pg- F" {
			t.Fatalf("after pf- left: told %q, want pg- told it is first", got)
		}
		p["pe-"].release(t, short, le)
	})
}

// Entries of the version before the listening flag ("<locker>|<lease>|<tokens>|<renewed>|
// <expires>") are read as not listening, so judged by how recently they were renewed; that
// version reads this one's entries as expired (it takes the flag, 0 or 1, for the expiry), so
// it never grants a key to what it misreads as their locker, and drops them.
func TestLineEntriesOfTheVersionBefore(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		a := newProc(t, c, "pa-")
		lc := cfg(t, "before")
		la, _ := a.lock(t, lc, true, 1)
		now, err := c.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		ms := now.UnixMilli()
		old := fmt.Sprintf("pb-7|1000|1|%d|%d", ms, ms+2000)
		c.ZAdd(ctx, processor.LineKey(lc), redis.Z{Score: float64(now.UnixMicro()), Member: "pb-"})
		c.HSet(ctx, processor.WantKey(lc), "pb-", old)
		if r := a.release(t, lc, la); r.Next != "pb-7" {
			t.Fatalf("release = %+v, want granted to pb-7, the entry of the version before", r)
		}
		b := newProc(t, c, "pb-")
		b.n = 7
		b.release(t, lc, "pb-7")
		a.lock(t, lc, true, 1)
		b.lock(t, lc, true, 1)
		entry, err := c.HGet(ctx, processor.WantKey(lc), "pb-").Result()
		if err != nil {
			t.Fatal(err)
		}
		// how the version before read an entry
		got, err := c.Eval(ctx, `local l, lease, n, renewed, expires = string.match(ARGV[1], '^(.*)|(%d+)|(%d+)|(%d+)|(%d+)$')
			return {l or '', expires or ''}`, nil, entry).StringSlice()
		if err != nil {
			t.Fatal(err)
		}
		if got[0] != "" && got[1] != "0" && got[1] != "1" {
			t.Fatalf("the version before reads %q as locker %q expiring at %q: want it expired", entry, got[0], got[1])
		}
	})
}

// A process that listened on its channel when it renewed its entry, and does not listen any
// more (its connection closed: it died), is passed over however fresh its entry — even when a
// request of its runs after Redis dropped its subscription (on its way as the process died,
// or a client's copy): that renewal counts only once the process asks again, which a dead
// one never does.
func TestGrantPassesOverAProcessThatStoppedListening(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		a, d := newProc(t, c, "pa-"), newProc(t, c, "pd-")
		lc, _ := domain.NewDLockConfig("PROC", fresh("deaf-"+t.Name()), 10*time.Second)
		la, _ := a.lock(t, lc, true, 1)
		ps := c.Subscribe(ctx, processor.ProcessChannel(lc, "pd-"))
		if _, err := ps.Receive(ctx); err != nil {
			t.Fatal(err)
		}
		ld, r := d.lock(t, lc, true, 1)
		if !r.Seen.Heard {
			t.Fatalf("pd- waits with %+v, want heard", r.Seen)
		}
		ps.Close()
		waitForNoSubscriber(t, c, processor.ProcessChannel(lc, "pd-"))
		if r := a.release(t, lc, la); r.Next != "" {
			t.Fatalf("release = %+v, want pd- passed over: it listened, and does not now", r)
		}
		la, _ = a.lock(t, lc, true, 1)
		if r := d.lockWith(t, lc, ld, true, 1); r.Outcome != processor.Held || r.Seen.Heard {
			t.Fatalf("pd-'s late ask = %+v, want held, not heard", r)
		}
		if r := a.release(t, lc, la); r.Next != "" {
			t.Fatalf("release = %+v, want pd- passed over: it listened, and does not now (its late ask does not count)", r)
		}
		// A live process asks again: from then on its entry counts as renewed (without
		// listening), and the next release grants it the key.
		la, _ = a.lock(t, lc, true, 1)
		if r := d.lockWith(t, lc, ld, true, 1); r.Outcome != processor.Held {
			t.Fatalf("pd- asks again = %+v, want held", r)
		}
		if r := a.release(t, lc, la); r.Next != ld {
			t.Fatalf("release = %+v, want granted to %s: it asked again after it stopped listening", r, ld)
		}
	})
}

// A release that cannot tell whether a process listens (its processor publishes nothing, so it
// names no channel; or its user may not run PUBSUB NUMSUB) counts one that listened as it last
// renewed its entry as not heard, and passes it over: it may have died since, Redis dropping
// its subscription, and a grant to it would hold the key for its lease.
func TestGrantThatCannotTellPassesOverAListener(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		d := newProc(t, c, "pd-")
		quiet, err := processor.NewRedisLockProcessor(c, processor.Options{Publish: false, Mark: "pa-"})
		if err != nil {
			t.Fatal(err)
		}
		a := &proc{RedisLockProcessor: quiet, mark: "pa-"}
		lc, _ := domain.NewDLockConfig("PROC", fresh("cannot-tell-"+t.Name()), 10*time.Second)
		la, _ := a.lock(t, lc, true, 1)
		ps := c.Subscribe(ctx, processor.ProcessChannel(lc, "pd-"))
		if _, err := ps.Receive(ctx); err != nil {
			t.Fatal(err)
		}
		if _, r := d.lock(t, lc, true, 1); !r.Seen.Heard {
			t.Fatalf("pd- waits with %+v, want heard", r.Seen)
		}
		ps.Close() // (it died)
		waitForNoSubscriber(t, c, processor.ProcessChannel(lc, "pd-"))
		if r := a.release(t, lc, la); r.Next != "" {
			t.Fatalf("release that cannot tell = %+v, want pd- passed over (it listened: Redis cannot tell whether it still does)", r)
		}
	})
}

// A process that says it counts itself heard (LockRequest.Listening, and ReleaseRequest's and
// RenewRequest's with Next), and that Redis does not hear, may have died with the request on
// its way: Redis dropped its subscription with its connection, and then ran the request — or
// a client's copy of it, any number of times. Its entry counts as renewed long ago, and no
// release grants it the key, however it stood in line: an ask, a relocking release, a yield
// check. The same request saying otherwise counts from when it ran (a live process told that
// Redis does not hear it, judged as one without notifications).
func TestGrantPassesOverAProcessThatSaysItListensAndIsNotHeard(t *testing.T) {
	ctx := context.Background()
	// stand has the dying process pd- stand in line with a fresh locker, saying listening
	// (or not), after Redis dropped its subscription: the other process pa- holds the key
	// when stand returns. It returns pd-'s locker in line and pa-'s holding.
	stands := map[string]func(t *testing.T, c *redis.Client, lc domain.DLockConfig, a, d *proc, listening bool) (string, string){
		"ask and its copies": func(t *testing.T, c *redis.Client, lc domain.DLockConfig, a, d *proc, listening bool) (string, string) {
			la, _ := a.lock(t, lc, true, 1)
			ld := d.locker()
			dies := subscribe(t, c, processor.ProcessChannel(lc, "pd-"))
			if r, err := d.Lock(ctx, lc, processor.LockRequest{Locker: ld, Wait: true, Listening: true, Tokens: 1}); err != nil || !r.Seen.Heard {
				t.Fatalf("pd- (it listens) asks: %+v, %v; want heard", r, err)
			}
			dies()
			for range 2 { // (the ask that ran as it died, and a client's copy of it)
				if r, err := d.Lock(ctx, lc, processor.LockRequest{Locker: ld, Wait: true, Listening: listening, Tokens: 1}); err != nil || r.Outcome != processor.Held || r.Seen.Heard {
					t.Fatalf("pd-'s late ask: %+v, %v; want held, not heard", r, err)
				}
			}
			return ld, la
		},
		"relocking release": func(t *testing.T, c *redis.Client, lc domain.DLockConfig, a, d *proc, listening bool) (string, string) {
			dies := subscribe(t, c, processor.ProcessChannel(lc, "pd-"))
			ld, _ := d.lock(t, lc, true, 1)
			la, _ := a.lock(t, lc, true, 1)
			dies()
			next := d.locker()
			r, err := d.Unlock(ctx, lc, processor.ReleaseRequest{Locker: ld, Next: next, NextLease: lc.Lease(), NextTokens: 1, Listening: listening})
			if err != nil || r.Next != la || !r.Queued || r.Seen.Heard {
				t.Fatalf("pd-'s release as it died: %+v, %v; want granted to %s and pd- in line again, not heard", r, err, la)
			}
			return next, la
		},
		"yield check": func(t *testing.T, c *redis.Client, lc domain.DLockConfig, a, d *proc, listening bool) (string, string) {
			dies := subscribe(t, c, processor.ProcessChannel(lc, "pd-"))
			ld, _ := d.lock(t, lc, true, 1)
			la, _ := a.lock(t, lc, true, 1)
			dies()
			next := d.locker()
			r, err := d.ExpandLease(ctx, lc, processor.RenewRequest{Locker: ld, Yield: true, Check: d.locker(), Next: next, NextLease: lc.Lease(), NextTokens: 1, Listening: listening})
			if err != nil || r.Outcome != processor.Yielded || r.Next != la || r.Seen.Heard {
				t.Fatalf("pd-'s yield check as it died: %+v, %v; want yielded to %s, not heard", r, err, la)
			}
			return next, la
		},
	}
	for name, stand := range stands {
		t.Run(name, func(t *testing.T) {
			backends(t, func(t *testing.T, c *redis.Client) {
				for _, listening := range []bool{true, false} {
					if !listening && name == "ask and its copies" {
						continue // (its copies find its entry saying it listened: TestGrantPassesOverAProcessThatStoppedListening)
					}
					a, d := newProc(t, c, "pa-"), newProc(t, c, "pd-")
					lc, _ := domain.NewDLockConfig("PROC", fresh("claim-"+t.Name()), 10*time.Second)
					ld, la := stand(t, c, lc, a, d, listening)
					r := a.release(t, lc, la)
					switch {
					case listening && r.Next != "":
						t.Fatalf("release = %+v, want pd- passed over: its request said it listens, and Redis does not hear it", r)
					case !listening && r.Next != ld:
						t.Fatalf("release = %+v, want granted to %s: its request said it does not listen, and it ran just now", r, ld)
					}
				}
			})
		})
	}
}

// A user not allowed PUBSUB NUMSUB: Redis cannot tell whether a process listens, and judges
// every entry as one without notifications — also one whose request says the process counts
// itself heard (LockRequest.Listening): it is granted the key, not passed over for good.
func TestGrantToAProcessRedisCannotCountHeedsNoClaim(t *testing.T) {
	srv.NeedReal(t)
	ctx := context.Background()
	c := srv.Client()
	defer c.Close()
	user := "nonumsub" + strconv.FormatInt(runs.Add(1), 10)
	if err := c.Do(ctx, "acl", "setuser", user, "on", ">pw", "~*", "&*", "+@all", "-pubsub|numsub").Err(); err != nil {
		t.Fatal(err)
	}
	defer c.Do(ctx, "acl", "deluser", user)
	uc := redis.NewClient(&redis.Options{Addr: c.Options().Addr, Username: user, Password: "pw"})
	defer uc.Close()
	a, d := newProc(t, c, "pa-"), newProc(t, uc, "pd-")
	lc, _ := domain.NewDLockConfig("PROC", fresh("nonumsub-"+t.Name()), 10*time.Second)
	la, _ := a.lock(t, lc, true, 1)
	ld := d.locker()
	for range 2 { // (the second as the poller's next ask)
		if r, err := d.Lock(ctx, lc, processor.LockRequest{Locker: ld, Wait: true, Listening: true, Tokens: 1}); err != nil || r.Outcome != processor.Held || r.Seen.Heard {
			t.Fatalf("pd- asks: %+v, %v; want held, not heard (Redis cannot tell)", r, err)
		}
	}
	if r := a.release(t, lc, la); r.Next != ld {
		t.Fatalf("release = %+v, want granted to %s: Redis cannot tell whether it listens, and it asked just now", r, ld)
	}
}

// A line entry that no script of dlock's writes (another client's: a lease under a
// millisecond or over domain.MaxLease, a block of more than processor.MaxTokens tokens) counts
// as expired: a release passes it over to the next live process and drops it, rather than
// fail halfway (after it settled the releaser) on every try, or push the fencing counter past
// 2^53. A request for more than MaxTokens tokens is refused (ErrInvalidConfig) before it is sent.
func TestGrantPassesOverAnEntryNoScriptWrites(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		a, f := newProc(t, c, "pa-"), newProc(t, c, "pf-")
		lc := cfg(t, "malformed")
		la, _ := a.lock(t, lc, true, 1)
		now, err := c.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		ms := now.UnixMilli()
		bad := map[string]string{
			"pb-": "pb-7|0|1", "pc-": "pc-7|604800001|1", "pd-": "pd-7|1000|1073741825", "pe-": "pe-7|1000|73786976294838206464",
		}
		for m, w := range bad {
			c.ZAdd(ctx, processor.LineKey(lc), redis.Z{Score: float64(now.UnixMicro() - 1000), Member: m})
			c.HSet(ctx, processor.WantKey(lc), m, fmt.Sprintf("%s|%d|%d|0", w, ms, ms+60000))
		}
		lf, _ := f.lock(t, lc, true, 1)
		r, err := a.Unlock(ctx, lc, processor.ReleaseRequest{Locker: la})
		if err != nil || r.Outcome != processor.Released || r.Next != lf {
			t.Fatalf("release = %+v, %v; want granted to %s past the entries no script writes", r, err, lf)
		}
		if line := c.ZRange(ctx, processor.LineKey(lc), 0, -1).Val(); len(line) != 0 {
			t.Fatalf("line %v, want the malformed entries dropped", line)
		}
		if _, err := f.ExpandLease(ctx, lc, processor.RenewRequest{Locker: lf, Tokens: processor.MaxTokens}); err != nil {
			t.Fatalf("the grantee's renewal with a block of MaxTokens: %v", err)
		}
		before := c.Get(ctx, processor.FenceKey(lc)).Val()
		for name, do := range map[string]func() error{
			"lock": func() error {
				_, err := f.Lock(ctx, lc, processor.LockRequest{Locker: f.locker(), Tokens: processor.MaxTokens + 1})
				return err
			},
			"renew": func() error {
				_, err := f.ExpandLease(ctx, lc, processor.RenewRequest{Locker: lf, Tokens: processor.MaxTokens + 1})
				return err
			},
			"release": func() error {
				_, err := f.Unlock(ctx, lc, processor.ReleaseRequest{Locker: lf, Next: f.locker(), NextLease: lc.Lease(), NextTokens: processor.MaxTokens + 1})
				return err
			},
		} {
			if err := do(); !errors.Is(err, dlerrors.ErrInvalidConfig) || !strings.Contains(err.Error(), "fencing tokens") {
				t.Fatalf("%s asking for MaxTokens+1 tokens: %v, want refused as ErrInvalidConfig", name, err)
			}
		}
		if got := c.Get(ctx, lc.UniqueKey()).Val(); got != lf || c.Get(ctx, processor.FenceKey(lc)).Val() != before {
			t.Fatalf("after the refusals the key holds %q and the counter %q, want %q and %q", got, c.Get(ctx, processor.FenceKey(lc)).Val(), lf, before)
		}
		// Entries at the bounds are dlock's own: the longest lease, the largest block, a lease
		// of one millisecond (listening processes: live whenever they last renewed).
		lc2 := cfg(t, "bounds")
		la, _ = a.lock(t, lc2, true, 1)
		for i, w := range []string{"ph-7|604800000|1", "pi-7|1000|1073741824", "pg-7|1|1"} {
			m := w[:3]
			ps := c.Subscribe(ctx, processor.ProcessChannel(lc2, m))
			defer ps.Close()
			if _, err := ps.Receive(ctx); err != nil {
				t.Fatal(err)
			}
			c.ZAdd(ctx, processor.LineKey(lc2), redis.Z{Score: float64(now.UnixMicro() + int64(i)), Member: m})
			c.HSet(ctx, processor.WantKey(lc2), m, fmt.Sprintf("%s|%d|%d|1", w, ms, ms+60000))
		}
		holder := la
		for _, want := range []string{"ph-7", "pi-7", "pg-7"} {
			p := newProc(t, c, holder[:3])
			r, err := p.Unlock(ctx, lc2, processor.ReleaseRequest{Locker: holder})
			if err != nil || r.Next != want {
				t.Fatalf("release of %s = %+v, %v; want granted to %s, an entry at the bounds", holder, r, err, want)
			}
			holder = want
		}
	})
}

// waitForNoSubscriber waits until Redis dropped channel's subscriptions (its sharded ones on a
// Cluster client).
func waitForNoSubscriber(t *testing.T, c redis.UniversalClient, channel string) {
	t.Helper()
	_, sharded := c.(*redis.ClusterClient)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		count := c.PubSubNumSub
		if sharded {
			count = c.PubSubShardNumSub
		}
		n, err := count(context.Background(), channel).Result()
		if err == nil && n[channel] == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still has subscribers: %v %v", channel, n, err)
		}
	}
}

// An attempt that does not wait is settled when it finds the key held: a copy of it that
// arrives after the key came free cannot take it (it would hold the key for a locker nobody
// owns). A waiting attempt stays open: the process waits with it.
func TestFailedAttemptIsSettled(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		a, b := newProc(t, c, "pa-"), newProc(t, c, "pb-")
		lc := cfg(t, "failed")
		la, _ := a.lock(t, lc, false, 1)
		req := processor.LockRequest{Locker: b.locker(), Tokens: 1}
		if r, _ := b.Lock(ctx, lc, req); r.Outcome != processor.Held {
			t.Fatalf("attempt = %+v", r)
		}
		a.release(t, lc, la)                                              // free: nobody in line
		if r, _ := b.Lock(ctx, lc, req); r.Outcome != processor.Settled { // the copy
			t.Fatalf("a copy of the failed attempt = %+v, want settled", r)
		}
		if _, r := b.lock(t, lc, true, 1); r.Outcome != processor.Taken { // a new attempt takes it
			t.Fatalf("a new attempt = %+v", r)
		}
	})
}

// A renewal, and a copy of the acquiring request, only ever lengthen the key's life: a late
// or repeated copy cannot cut short what a later renewal set.
func TestRenewalsNeverShorten(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		a := newProc(t, c, "pa-")
		lc := cfg(t, "short") // 1 s
		long, _ := lc.WithLease(time.Minute)
		req := processor.LockRequest{Locker: a.locker(), Tokens: 1}
		if r, _ := a.Lock(ctx, lc, req); r.Outcome != processor.Taken {
			t.Fatal(r)
		}
		if r, _ := a.ExpandLease(ctx, long, processor.RenewRequest{Locker: req.Locker}); r.Outcome != processor.Renewed {
			t.Fatal(r)
		}
		if r, _ := a.ExpandLease(ctx, lc, processor.RenewRequest{Locker: req.Locker}); r.Outcome != processor.Renewed {
			t.Fatal(r)
		}
		if r, _ := a.Lock(ctx, lc, req); r.Outcome != processor.Taken { // the acquiring request again
			t.Fatal(r)
		}
		if ttl := c.PTTL(ctx, lc.UniqueKey()).Val(); ttl < 30*time.Second {
			t.Fatalf("PTTL %v after a renewal to a minute and copies with a second", ttl)
		}
	})
}

// A take never shortens the fencing counter's life: it is kept for twice the longest lease
// that took it lately. Were a take of a shorter lease to cut it, it could expire while ahead of
// the server's clock (by the tokens its holders reserved), and a later take's first token, the
// clock's, could repeat one handed out.
func TestFencingCounterLifeIsNeverShortened(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		a, b := newProc(t, c, "pa-"), newProc(t, c, "pb-")
		lc := cfg(t, "fence-life") // 1 s
		long, _ := lc.WithLease(time.Minute)
		la, _ := a.lock(t, long, true, 1)
		a.release(t, long, la)
		if _, r := b.lock(t, lc, true, 1); r.Outcome != processor.Taken {
			t.Fatalf("a take with a lease of a second = %+v", r)
		}
		if ttl := c.PTTL(ctx, processor.FenceKey(lc)).Val(); ttl < time.Minute {
			t.Fatalf("the counter's PTTL %v after a take with a lease of a second; want what the minute's take kept (%v)", ttl, processor.FenceTTL(long))
		}
	})
}

// A tenure's renewals name the holding it began with (Origin): a key that holds the tenure's
// locker in another holding — taken anew by a late copy of the tenure's own take after an
// empty restart wiped the key, while others may have held it in between — answers Gone and is
// let go (a waiter in line is granted it). The origin of a holding is the take's first token,
// or, for a key granted to the locker (or taken by an earlier copy of the request), that
// grant's or copy's, which the tenure's renewals then name without a loss.
func TestRenewalNamesTheHoldingItBeganWith(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		a, b := newProc(t, c, "pa-"), newProc(t, c, "pb-")
		lc := cfg(t, "origin")
		req := processor.LockRequest{Locker: a.locker(), Tokens: 1}
		r, err := a.Lock(ctx, lc, req)
		if err != nil || r.Outcome != processor.Taken || r.Origin != r.Token {
			t.Fatalf("take = %+v, %v; want taken, its origin its token", r, err)
		}
		began := r.Origin
		if r, err := a.Lock(ctx, lc, req); err != nil || r.Outcome != processor.Taken || r.Origin != began {
			t.Fatalf("a copy of the take = %+v, %v; want taken, origin %d", r, err, began)
		}
		if r, err := a.ExpandLease(ctx, lc, processor.RenewRequest{Locker: req.Locker, Origin: began}); err != nil || r.Outcome != processor.Renewed {
			t.Fatalf("renewal naming its origin = %+v, %v", r, err)
		}
		// An empty restart: every key of the lock is gone.
		c.Del(ctx, c.Keys(ctx, "*"+lc.UniqueKey()+"*").Val()...)
		if r, err := a.Lock(ctx, lc, req); err != nil || r.Outcome != processor.Taken || r.Origin == began {
			t.Fatalf("a late copy of the take after the restart = %+v, %v; want taken anew", r, err)
		}
		lb, rb := b.lock(t, lc, true, 1)
		if rb.Outcome != processor.Held {
			t.Fatalf("pb- = %+v, want in line", rb)
		}
		if r, err := a.ExpandLease(ctx, lc, processor.RenewRequest{Locker: req.Locker, Origin: began}); err != nil || r.Outcome != processor.Gone {
			t.Fatalf("the tenure's renewal after the key was taken anew = %+v, %v; want Gone", r, err)
		}
		if in := inspect(t, b, lc); in.Holder != lb {
			t.Fatalf("the key holds %q, want it let go to %s", in.Holder, lb)
		}
		if r, _ := a.Lock(ctx, lc, req); r.Outcome != processor.Settled {
			t.Fatalf("another copy of the take = %+v, want it settled", r)
		}
		// A grant: the grantee's request again finds the key its own, with the grant's origin.
		rel := b.release(t, lc, lb)
		if rel.Outcome != processor.Released || rel.Next != "" {
			t.Fatalf("release = %+v", rel)
		}
		la, _ := a.lock(t, lc, true, 1)
		lb2, _ := b.lock(t, lc, true, 1)
		g := a.release(t, lc, la)
		if g.Next != lb2 || g.Token == 0 {
			t.Fatalf("release = %+v, want granted to %s", g, lb2)
		}
		again := b.lockWith(t, lc, lb2, true, 1)
		if again.Outcome != processor.Taken || again.Origin != g.Token || again.Token == g.Token {
			t.Fatalf("the grantee's request again = %+v; want taken with a new block and the grant's origin %d", again, g.Token)
		}
		if r, err := b.ExpandLease(ctx, lc, processor.RenewRequest{Locker: lb2, Origin: g.Token}); err != nil || r.Outcome != processor.Renewed {
			t.Fatalf("the grantee's renewal naming the grant = %+v, %v", r, err)
		}
		if r, err := b.ExpandLease(ctx, lc, processor.RenewRequest{Locker: lb2}); err != nil || r.Outcome != processor.Renewed {
			t.Fatalf("a renewal naming no origin (an older version's) = %+v, %v", r, err)
		}
	})
}

// A hand-off limit's check (renew, and yield if another process waits) marks its own number:
// a copy of a check that found nobody in line cannot give the key away later. A yield grants
// the key to the first in line, for the lease it waits with, and puts the yielding process back
// in line with its next attempt.
func TestYieldCheck(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		a, b := newProc(t, c, "pa-"), newProc(t, c, "pb-")
		lc := cfg(t, "yield")
		la, r := a.lock(t, lc, true, 8)
		for _, bad := range []processor.RenewRequest{
			{Locker: la, Yield: true, Check: a.locker(), Next: b.locker(), NextLease: lc.Lease()}, // another owner's next
			{Locker: la, Yield: true, Next: a.locker(), NextLease: lc.Lease()},                    // no check
			{Locker: "px-1", Yield: true, Check: "px-2", Next: "px-3", NextLease: lc.Lease()},     // not this process's mark
			{Locker: la, Yield: true, Check: a.locker(), Next: a.locker()},                        // no lease
		} {
			if _, err := a.ExpandLease(ctx, lc, bad); !errors.Is(err, dlerrors.ErrInvalidConfig) {
				t.Fatalf("yield check %+v = %v, want ErrInvalidConfig", bad, err)
			}
		}
		check := processor.RenewRequest{Locker: la, Yield: true, Check: a.locker(), Next: a.locker(), NextLease: lc.Lease(), NextTokens: 1}
		if r, err := a.ExpandLease(ctx, lc, check); err != nil || r.Outcome != processor.Renewed {
			t.Fatalf("check with nobody in line = %+v, %v", r, err)
		}
		long, _ := lc.WithLease(10 * time.Second)
		lb, _ := b.lock(t, long, true, 1) // pb- waits with a lease of its own
		if r, _ := a.ExpandLease(ctx, lc, check); r.Outcome != processor.Settled {
			t.Fatalf("a copy of the check = %+v, want settled", r)
		}
		if in := inspect(t, a, lc); in.Holder != la {
			t.Fatalf("the copy gave the key away: %+v", in)
		}
		check.Check, check.Next = a.locker(), a.locker()
		ps := c.Subscribe(ctx, processor.ProcessChannel(lc, "pa-")) // pa- listens as it stands in line again
		defer ps.Close()
		if _, err := ps.Receive(ctx); err != nil {
			t.Fatal(err)
		}
		if r, _ := a.ExpandLease(ctx, lc, check); r.Outcome != processor.Yielded {
			t.Fatalf("check with pb- in line = %+v, want yielded", r)
		} else if r.Seen.Rank != 0 || !r.Seen.Heard || r.Seen.Holder != lb || r.Seen.Life <= 5*time.Second {
			t.Fatalf("the yield answers %+v, want pa- first in line again, and heard, the key granted to %s for its lease", r.Seen, lb)
		}
		in := inspect(t, a, lc)
		if in.Holder != lb || in.TTL <= 5*time.Second || !slices.Equal(in.Waiting, []string{"pa-"}) {
			t.Fatalf("after the yield: %+v; want the key granted to %s for its lease (%v)", in, lb, long.Lease())
		}
		if in.Fence <= r.Token+7 {
			t.Fatalf("fence %d after the yield, want above pa-'s block, which ends at %d", in.Fence, r.Token+7)
		}
		if r, _ := a.ExpandLease(ctx, lc, processor.RenewRequest{Locker: la}); r.Outcome != processor.Settled {
			t.Fatalf("a renewal after the yield = %+v, want settled", r)
		}
		if r := b.release(t, lc, lb); r.Next != check.Next {
			t.Fatalf("pb-'s release = %+v, want granted to pa-'s next attempt %s", r, check.Next)
		}
	})
}

// renew.lua itself treats a yield without a check number as a plain renewal: the check's mark
// is what keeps a copy of a yield from giving the key away later, so a yield that cannot mark
// one does not yield. (The processor refuses to send one, above; another client could.)
func TestYieldWithoutACheckOnlyRenews(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		a, b := newProc(t, c, "pa-"), newProc(t, c, "pb-")
		lc := cfg(t, "nocheck")
		la, _ := a.lock(t, lc, true, 1)
		b.lock(t, lc, true, 1) // pb- waits in line: a yield would give it the key
		byName := map[string]string{"locker": la, "seq": strings.TrimPrefix(la, "pa-"),
			"lease": strconv.FormatInt(lc.Lease().Milliseconds(), 10), "mark": "pa-", "wait": "0", "tokens": "0",
			"fence_ttl": "2000", "entry_ttl": "2000", "done_ttl": "2000", "yield": "1", "check": "",
			"next": a.locker(), "next_lease": strconv.FormatInt(lc.Lease().Milliseconds(), 10), "next_tokens": "1"}
		var argv []any
		for _, name := range processor.ArgNames() {
			argv = append(argv, byName[name])
		}
		src := processor.Sources()["prelude"] + "\n" + processor.Sources()["renew"]
		keys := []string{lc.UniqueKey(), processor.FenceKey(lc), processor.LineKey(lc), processor.DoneKey(lc, "pa-"),
			processor.CheckKey(lc, "pa-"), processor.ForcedKey(lc, "pa-"), processor.WantKey(lc), processor.GapKey(lc), processor.FirstKey(lc)}
		got, err := c.Eval(ctx, src, keys, argv...).Slice()
		if err != nil || len(got) == 0 || got[0] != int64(1) {
			t.Fatalf("renew.lua with yield and no check = %v, %v; want renewed {1, 0}", got, err)
		}
		if in := inspect(t, a, lc); in.Holder != la || !slices.Equal(in.Waiting, []string{"pb-"}) {
			t.Fatalf("after it: %+v; want %s holding, pb- waiting", in, la)
		}
	})
}

// A release with a next attempt that grants the key to another process puts its own process
// back at the end of the line with that attempt, and says where it stands; one that leaves
// the key free puts nobody in line; a copy of it, late or repeated, changes nothing; a next
// attempt of another owner is refused.
func TestReleaseStandsInLineAgain(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		a, b := newProc(t, c, "pa-"), newProc(t, c, "pb-")
		lc := cfg(t, "stay")
		la, _ := a.lock(t, lc, true, 1)
		stay := processor.ReleaseRequest{Locker: la, Next: a.locker(), NextLease: lc.Lease(), NextTokens: 1}
		if r, err := a.Unlock(ctx, lc, stay); err != nil || r.Outcome != processor.Released || r.Next != "" || r.Queued {
			t.Fatalf("a release with nobody in line = %+v, %v; want the key left free, pa- not in line", r, err)
		}
		if in := inspect(t, a, lc); in.Holder != "" || len(in.Waiting) != 0 {
			t.Fatalf("after it: %+v; want the key free and nobody in line", in)
		}

		la, _ = a.lock(t, lc, true, 1)
		lb, _ := b.lock(t, lc, true, 1)
		ps := c.Subscribe(ctx, processor.ProcessChannel(lc, "pa-")) // pa- listens as it stands in line again
		defer ps.Close()
		if _, err := ps.Receive(ctx); err != nil {
			t.Fatal(err)
		}
		bad := processor.ReleaseRequest{Locker: la, Next: b.locker(), NextLease: lc.Lease()}
		if _, err := a.Unlock(ctx, lc, bad); !errors.Is(err, dlerrors.ErrInvalidConfig) {
			t.Fatalf("a release naming another owner's attempt = %v, want ErrInvalidConfig", err)
		}
		bad = processor.ReleaseRequest{Locker: "px-1", Next: "px-2", NextLease: lc.Lease()}
		if _, err := a.Unlock(ctx, lc, bad); !errors.Is(err, dlerrors.ErrInvalidConfig) {
			t.Fatalf("a release standing in line for an owner not its process's mark = %v, want ErrInvalidConfig", err)
		}
		stay = processor.ReleaseRequest{Locker: la, Next: a.locker(), NextLease: lc.Lease(), NextTokens: 1}
		r, err := a.Unlock(ctx, lc, stay)
		if err != nil || r.Outcome != processor.Released || r.Next != lb || !r.Queued || r.Seen.Rank != 0 || !r.Seen.Heard ||
			r.Seen.Holder != lb || r.Seen.Life <= lc.Lease()/2 || r.Seen.Life > lc.Lease() {
			t.Fatalf("a release with pb- in line = %+v, %v; want granted to %s for its lease, pa- first in line again and heard", r, err, lb)
		}
		if in := inspect(t, a, lc); in.Holder != lb || !slices.Equal(in.Waiting, []string{"pa-"}) {
			t.Fatalf("after it: %+v; want the key granted to %s and pa- in line", in, lb)
		}
		if r, err := a.Unlock(ctx, lc, stay); err != nil || r.Outcome != processor.Settled || r.Queued {
			t.Fatalf("a copy of the release = %+v, %v; want settled", r, err)
		}
		if g := b.release(t, lc, lb); g.Next != stay.Next {
			t.Fatalf("pb-'s release = %+v, want granted to pa-'s next attempt %s", g, stay.Next)
		}
		// The next attempt, granted the key, lets it go with nobody in line: a copy of the
		// first release, after a leave settled the next attempt too, puts nobody back.
		if g := a.release(t, lc, stay.Next); g.Next != "" {
			t.Fatalf("pa-'s second release = %+v, want the key left free", g)
		}
		if _, err := a.Leave(ctx, lc, processor.LeaveRequest{Last: a.last()}); err != nil {
			t.Fatal(err)
		}
		if r, err := a.Unlock(ctx, lc, stay); err != nil || r.Queued {
			t.Fatalf("a late copy of the first release = %+v, %v; want nothing done", r, err)
		}
		if in := inspect(t, a, lc); in.Holder != "" || len(in.Waiting) != 0 {
			t.Fatalf("at the end: %+v; want the key free and nobody in line", in)
		}
	})
}

// A release stands its process in line again only with a next that may wait there: not one
// that is settled — here by a failed TryLock numbered after it, and in the second part by a
// give-back after an empty restart, which a late copy of the release then follows (a late copy
// of the take revived its released acquisition) — and not when it grants the key to its own
// process (an attempt of it that asked while the release was on its way), nor in place of a
// newer attempt its process waits with, nor with a next numbered below what it lets go.
func TestReleaseStandsInLineOnlyWithAWaitingNext(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		a, b, d := newProc(t, c, "pa-"), newProc(t, c, "pb-"), newProc(t, c, "pd-")
		lc := cfg(t, "standnext")
		la, _ := a.lock(t, lc, true, 1)
		lb, _ := b.lock(t, lc, true, 1)
		next := a.locker()
		if _, r := a.lock(t, lc, false, 1); r.Outcome != processor.Held { // a TryLock: settles pa- up to it
			t.Fatalf("the TryLock = %+v, want held", r)
		}
		r, err := a.Unlock(ctx, lc, processor.ReleaseRequest{Locker: la, Next: next, NextLease: lc.Lease(), NextTokens: 1})
		if err != nil || r.Outcome != processor.Released || r.Next != lb || r.Queued {
			t.Fatalf("a release with a settled next = %+v, %v; want granted to %s, pa- not in line", r, err, lb)
		}
		if e := entryOf(t, c, lc, "pa-"); e != "" {
			t.Fatalf("pa- stands in line with %s, settled", e)
		}
		b.release(t, lc, lb)

		// Late copies across an empty restart.
		take := processor.LockRequest{Locker: a.locker(), Wait: true, Tokens: 1}
		if r, err := a.Lock(ctx, lc, take); err != nil || r.Outcome != processor.Taken {
			t.Fatalf("take = %+v, %v", r, err)
		}
		lb, _ = b.lock(t, lc, true, 1)
		rel := processor.ReleaseRequest{Locker: take.Locker, Next: a.locker(), NextLease: lc.Lease(), NextTokens: 1}
		if r, err := a.Unlock(ctx, lc, rel); err != nil || r.Next != lb || !r.Queued {
			t.Fatalf("release with next = %+v, %v; want granted to %s, pa- in line", r, err, lb)
		}
		if g := b.release(t, lc, lb); g.Next != rel.Next {
			t.Fatalf("pb-'s release = %+v, want granted to %s", g, rel.Next)
		}
		wipeKeys(t, c, lc) // Redis restarts empty
		if r, err := a.Lock(ctx, lc, take); err != nil || r.Outcome != processor.Taken {
			t.Fatalf("the late copy of the take = %+v, %v; want taken anew (the restart's window)", r, err)
		}
		if g := a.release(t, lc, rel.Next); g.Outcome != processor.Gone { // the holding of next is gone: given back, settled
			t.Fatalf("give-back of %s = %+v", rel.Next, g)
		}
		ld, _ := d.lock(t, lc, true, 1)
		if r, err := a.Unlock(ctx, lc, rel); err != nil || r.Next != ld || r.Queued { // the late copy of the release
			t.Fatalf("the late copy of the release = %+v, %v; want granted to %s, pa- not in line", r, err, ld)
		}
		if g := d.release(t, lc, ld); g.Next == rel.Next {
			t.Fatalf("pd-'s release granted the key to %s, settled", rel.Next)
		}

		// A release that grants the key to its own process.
		la, _ = a.lock(t, lc, true, 1)
		next = a.locker()
		if r := a.lockWith(t, lc, next, true, 1); r.Outcome != processor.Held { // next asks while the release is on its way
			t.Fatalf("next's ask = %+v, want held", r)
		}
		r, err = a.Unlock(ctx, lc, processor.ReleaseRequest{Locker: la, Next: next, NextLease: lc.Lease(), NextTokens: 1})
		if err != nil || r.Outcome != processor.Released || r.Next != next || r.Queued {
			t.Fatalf("a release granting its own next = %+v, %v; want granted to %s, not queued", r, err, next)
		}
		if in := inspect(t, a, lc); in.Holder != next || len(in.Waiting) != 0 {
			t.Fatalf("after it: %+v; want %s holding, nobody in line", in, next)
		}

		// A (late) release whose next is older than the attempt its process waits with.
		la = next
		lb, _ = b.lock(t, lc, true, 1)
		next = a.locker()
		newer := a.locker()
		if r := a.lockWith(t, lc, newer, true, 1); r.Outcome != processor.Held {
			t.Fatalf("the newer attempt = %+v, want held", r)
		}
		r, err = a.Unlock(ctx, lc, processor.ReleaseRequest{Locker: la, Next: next, NextLease: lc.Lease(), NextTokens: 1})
		if err != nil || r.Next != lb || r.Queued {
			t.Fatalf("a release with an older next = %+v, %v; want granted to %s, not queued", r, err, lb)
		}
		if e := entryOf(t, c, lc, "pa-"); e != newer {
			t.Fatalf("pa- waits with %q, want its newer attempt %s", e, newer)
		}

		// A release whose next waits in line already (it asked while the release was on its
		// way), behind another process: the key goes to that process, and the releaser stays
		// in line with next, as the answer says.
		same := cfg(t, "standsame")
		la, _ = a.lock(t, same, true, 1)
		lb, _ = b.lock(t, same, true, 1)
		next = a.locker()
		if r := a.lockWith(t, same, next, true, 1); r.Outcome != processor.Held {
			t.Fatalf("next's ask = %+v, want held", r)
		}
		r, err = a.Unlock(ctx, same, processor.ReleaseRequest{Locker: la, Next: next, NextLease: same.Lease(), NextTokens: 1})
		if err != nil || r.Next != lb || !r.Queued || entryOf(t, c, same, "pa-") != next {
			t.Fatalf("a release whose next waits already = %+v, %v, pa- in line with %q; want granted to %s, pa- queued with %s", r, err, entryOf(t, c, same, "pa-"), lb, next)
		}

		// A release whose next is numbered below the acquisition it lets go (which settles
		// next too).
		below := cfg(t, "standbelow")
		older := a.locker()
		la, _ = a.lock(t, below, true, 1)
		lb, _ = b.lock(t, below, true, 1)
		r, err = a.Unlock(ctx, below, processor.ReleaseRequest{Locker: la, Next: older, NextLease: below.Lease(), NextTokens: 1})
		if err != nil || r.Next != lb || r.Queued || entryOf(t, c, below, "pa-") != "" {
			t.Fatalf("a release with a next numbered below it = %+v, %v, pa- in line with %q; want granted to %s, pa- not in line", r, err, entryOf(t, c, below, "pa-"), lb)
		}
	})
}

// A check's mark lives as long as the key holds the tenure's locker: a copy of a check that
// found nobody in line, arriving after the tenure outlived the mark's own life (two leases of
// its lock.lua; here an Extend made the lease longer), still cannot give the key away. A
// renewal with a lease shorter than the key's life (an Extend to a shorter one), and a copy
// of the acquiring request that renews the key, keep the mark as long as the key. Real time:
// miniredis's TIME does not follow FastForward.
func TestYieldCheckMarkLivesWithTheTenure(t *testing.T) {
	c := srv.Client()
	defer c.Close()
	ctx := context.Background()
	a, b := newProc(t, c, "pa-"), newProc(t, c, "pb-")
	short, err := domain.NewDLockConfig("PROC", fresh("checklife-"+t.Name()), 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	long, _ := short.WithLease(5 * time.Second)
	// pa- takes the key for 5 s by a second handle of its process (the tenure holds however late
	// the check comes on a loaded machine); a's own marks live 600 ms (two of its leases, 300 ms)
	la := a.locker()
	if r := newProc(t, c, "pa-").lockWith(t, long, la, true, 1); r.Outcome != processor.Taken {
		t.Fatalf("pa-'s take = %+v", r)
	}
	check := processor.RenewRequest{Locker: la, Yield: true, Check: a.locker(), Next: a.locker(), NextLease: short.Lease(), NextTokens: 1}
	if r, err := a.ExpandLease(ctx, short, check); err != nil || r.Outcome != processor.Renewed {
		t.Fatalf("check with nobody in line = %+v, %v", r, err)
	}
	outlives := func(what string) {
		t.Helper()
		mark, key := c.PTTL(ctx, processor.CheckKey(short, "pa-")).Val(), c.PTTL(ctx, short.UniqueKey()).Val()
		if mark < key-time.Second {
			t.Fatalf("after %s the check's mark lives %v, the key %v", what, mark, key)
		}
	}
	c.PExpire(ctx, processor.CheckKey(short, "pa-"), 600*time.Millisecond) // the mark's own life
	if r, err := a.ExpandLease(ctx, long, processor.RenewRequest{Locker: la}); err != nil || r.Outcome != processor.Renewed {
		t.Fatalf("renewal to %v = %+v, %v", long.Lease(), r, err)
	}
	outlives("a renewal")
	c.PExpire(ctx, processor.CheckKey(short, "pa-"), 600*time.Millisecond) // the mark's own life again
	if r, err := a.ExpandLease(ctx, short, processor.RenewRequest{Locker: la}); err != nil || r.Outcome != processor.Renewed {
		t.Fatalf("renewal to %v = %+v, %v", short.Lease(), r, err)
	}
	outlives("a renewal shorter than the key's life")
	c.PExpire(ctx, processor.CheckKey(short, "pa-"), 600*time.Millisecond)
	if r := a.lockWith(t, short, la, true, 1); r.Outcome != processor.Taken { // a copy of the acquiring request
		t.Fatalf("a copy of the take = %+v", r)
	}
	outlives("a copy of the take")
	time.Sleep(700 * time.Millisecond) // past the mark's own life
	b.lock(t, short, true, 1)
	if r, err := a.ExpandLease(ctx, short, check); err != nil || r.Outcome != processor.Settled {
		t.Fatalf("a late copy of the check = %+v, %v; want settled", r, err)
	}
	if in := inspect(t, a, short); in.Holder != la {
		t.Fatalf("the late copy gave the key away: %+v", in)
	}
	a.release(t, short, la)
}

// An entry in line counts as expired from the millisecond its expiry names on: a release or a
// yield that finds its own process's entry expiring now (settle, standing) drops it, and stands
// the process in line again with its next even when that entry waited with a newer attempt;
// a release grants the key to no other process's entry expiring now (waiting), and drops it.
// (On miniredis, whose clock the test stops.)
func TestAnEntryExpiresAtItsExpiryMillisecond(t *testing.T) {
	m := miniredis.RunT(t)
	now := time.UnixMilli(1_800_000_000_000)
	m.SetTime(now)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer c.Close()
	ctx := context.Background()
	if got := c.Time(ctx).Val(); !got.Equal(now) {
		t.Fatalf("miniredis TIME = %v, want the stopped clock %v", got, now)
	}
	a, b := newProc(t, c, "pa-"), newProc(t, c, "pb-")
	// expiresNow makes mark's entry expire at this very millisecond.
	expiresNow := func(lc domain.DLockConfig, mark string) {
		t.Helper()
		e := c.HGet(ctx, processor.WantKey(lc), mark).Val()
		f := strings.Split(e, "|")
		if len(f) != 6 {
			t.Fatalf("%s's entry %q", mark, e)
		}
		f[4] = strconv.FormatInt(now.UnixMilli(), 10)
		c.HSet(ctx, processor.WantKey(lc), mark, strings.Join(f, "|"))
	}
	// expiringNow has pa- wait with a newer attempt than next, whose entry expires now.
	expiringNow := func(lc domain.DLockConfig) (next string) {
		t.Helper()
		next = a.locker()
		newer := a.locker()
		if r := a.lockWith(t, lc, newer, true, 1); r.Outcome != processor.Held {
			t.Fatalf("the newer attempt = %+v, want held", r)
		}
		expiresNow(lc, "pa-")
		return next
	}

	lc := cfg(t, "expiry-release")
	la, _ := a.lock(t, lc, true, 1)
	lb, _ := b.lock(t, lc, true, 1)
	next := expiringNow(lc)
	r, err := a.Unlock(ctx, lc, processor.ReleaseRequest{Locker: la, Next: next, NextLease: lc.Lease(), NextTokens: 1})
	if err != nil || r.Next != lb || !r.Queued {
		t.Fatalf("the release = %+v, %v; want granted to %s, pa- in line again", r, err, lb)
	}
	if e := entryOf(t, c, lc, "pa-"); e != next {
		t.Fatalf("pa- waits with %q, want %s (its entry with a newer attempt had expired)", e, next)
	}

	lc = cfg(t, "expiry-yield")
	la, _ = a.lock(t, lc, true, 8)
	lb, _ = b.lock(t, lc, true, 1)
	next = expiringNow(lc)
	check := processor.RenewRequest{Locker: la, Yield: true, Check: a.locker(), Next: next, NextLease: lc.Lease(), NextTokens: 1}
	if r, err := a.ExpandLease(ctx, lc, check); err != nil || r.Outcome != processor.Yielded || r.Seen.Rank != 0 {
		t.Fatalf("the yield = %+v, %v; want yielded to %s, pa- first in line again", r, err, lb)
	}
	if e := entryOf(t, c, lc, "pa-"); e != next {
		t.Fatalf("pa- waits with %q, want %s (its entry with a newer attempt had expired)", e, next)
	}

	// A release grants the key to no entry that expires at this millisecond: it is dropped.
	lc = cfg(t, "expiry-grant")
	la, _ = a.lock(t, lc, true, 1)
	b.lock(t, lc, true, 1)
	expiresNow(lc, "pb-")
	if r := a.release(t, lc, la); r.Outcome != processor.Released || r.Next != "" {
		t.Fatalf("the release = %+v, want the key left free (pb-'s entry had expired)", r)
	}
	if e := entryOf(t, c, lc, "pb-"); e != "" {
		t.Fatalf("pb- waits with %q, want its expired entry dropped", e)
	}
}

// A yield goes to another process, never back to its own: a late check of a tenure its process
// gave up, arriving while the process stands in line with a newer attempt (the key still holds
// the older acquisition, not yet passed on), grants the key to the next process in line, and
// the yielding process stays in line with its newer attempt — not the check's older next.
func TestYieldPassesOverItsOwnProcess(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		a, b := newProc(t, c, "pa-"), newProc(t, c, "pb-")
		lc := cfg(t, "yieldown")
		la, _ := a.lock(t, lc, true, 1)
		check := processor.RenewRequest{Locker: la, Yield: true, Next: a.locker(), Check: a.locker(), NextLease: lc.Lease(), NextTokens: 1} // late (next numbered first, as dlock does)
		newer := a.locker()
		if r := a.lockWith(t, lc, newer, true, 1); r.Outcome != processor.Held {
			t.Fatalf("the newer attempt = %+v, want held (by %s)", r, la)
		}
		lb, _ := b.lock(t, lc, true, 1)
		if r, err := a.ExpandLease(ctx, lc, check); err != nil || r.Outcome != processor.Yielded || r.Next != lb {
			t.Fatalf("the late check = %+v, %v; want yielded to %s", r, err, lb)
		}
		if in := inspect(t, a, lc); in.Holder != lb || !slices.Equal(in.Waiting, []string{"pa-"}) {
			t.Fatalf("after the yield: %+v; want %s holding, pa- in line", in, lb)
		}
		if e := entryOf(t, c, lc, "pa-"); e != newer {
			t.Fatalf("pa- waits with %s, want its newer attempt %s", e, newer)
		}
		if g := b.release(t, lc, lb); g.Next != newer {
			t.Fatalf("pb-'s release = %+v, want granted to pa-'s newer attempt %s", g, newer)
		}
	})
}

// A block of tokens: the counter holds the end of the block while it is held, and the last
// token handed out once it is let go, so the next holder's tokens follow on (the counter runs
// ahead of the clock only as far as holders use tokens).
func TestTokenBlocks(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		a, b := newProc(t, c, "pa-"), newProc(t, c, "pb-")
		lc := cfg(t, "block")
		la, r := a.lock(t, lc, true, 1024)
		if in := inspect(t, a, lc); in.Fence != r.Token+1023 {
			t.Fatalf("fence %d, want %d", in.Fence, r.Token+1023)
		}
		rr, err := a.ExpandLease(ctx, lc, processor.RenewRequest{Locker: la, Tokens: 16})
		if err != nil || rr.Token <= r.Token+1023 {
			t.Fatalf("new block from %d (%v) after %d", rr.Token, err, r.Token+1023)
		}
		if _, err := a.Unlock(ctx, lc, processor.ReleaseRequest{Locker: la, Last: rr.Token + 3}); err != nil {
			t.Fatal(err)
		}
		if in := inspect(t, a, lc); in.Fence != rr.Token+3 {
			t.Fatalf("fence %d after the release, want %d", in.Fence, rr.Token+3)
		}
		lb, r2 := b.lock(t, lc, false, 1024)
		if r2.Token <= rr.Token+3 {
			t.Fatalf("next token %d after %d", r2.Token, rr.Token+3)
		}
		// A holding that handed out no token gives back its whole block.
		if _, err := b.Unlock(ctx, lc, processor.ReleaseRequest{Locker: lb, Last: r2.Token - 1}); err != nil {
			t.Fatal(err)
		}
		if in := inspect(t, a, lc); in.Fence != r2.Token-1 {
			t.Fatalf("fence %d after a release that used no token, want %d", in.Fence, r2.Token-1)
		}
	})
}

// A release lowers the counter no further than the first token of the holding it ends, even
// when its holder's last token is stale: after an empty restart, a late copy of the holder's
// own lock.lua put it in line and a release granted it a new block it never heard of; tokens
// below that block went to another holder.
func TestReleaseNeverLowersTheCounterBelowItsHolding(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		a, b := newProc(t, c, "pa-"), newProc(t, c, "pb-")
		lc := cfg(t, "stalelast")
		la, r := a.lock(t, lc, true, 8)
		stale := r.Token + 3                                         // handed out before the restart
		emptied, err := c.Keys(ctx, "*"+lc.UniqueKey()+"*").Result() // an empty restart, for this key
		if err != nil || len(emptied) == 0 || c.Del(ctx, emptied...).Err() != nil {
			t.Fatalf("emptying %v: %v", emptied, err)
		}
		const many = 1_000_000_000 // b uses tokens far ahead of the clock (1000 s of µs)
		lb, rb := b.lock(t, lc, true, many)
		if rb.Outcome != processor.Taken {
			t.Fatalf("b on the emptied server = %+v", rb)
		}
		used := rb.Token + many - 1
		if r := a.lockWith(t, lc, la, true, 8); r.Outcome != processor.Held {
			t.Fatalf("the late copy of a's attempt = %+v, want held (a in line)", r)
		}
		g, err := b.Unlock(ctx, lc, processor.ReleaseRequest{Locker: lb, Last: used})
		if err != nil || g.Next != la {
			t.Fatalf("b's release = %+v, %v; want granted to %s", g, err, la)
		}
		if _, err := a.Unlock(ctx, lc, processor.ReleaseRequest{Locker: la, Last: stale}); err != nil {
			t.Fatal(err)
		}
		if _, r := b.lock(t, lc, false, 1); r.Token <= used {
			t.Fatalf("token %d after b's %d: the release lowered the counter below a token handed out", r.Token, used)
		}
	})
}

// A release of a holding that {K}:first does not name (its holding began by a script that did
// not record it, as an older version's grant) leaves the counter where it is: the first token
// of its holding is not known, so no token it reserved is given back.
func TestReleaseWithoutItsFirstTokenKeepsTheCounter(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		a := newProc(t, c, "pa-")
		lc := cfg(t, "nofirst")
		la, r := a.lock(t, lc, true, 8)
		if err := c.Set(ctx, processor.FirstKey(lc), "1|pb-1", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Unlock(ctx, lc, processor.ReleaseRequest{Locker: la, Last: r.Token}); err != nil {
			t.Fatal(err)
		}
		if in := inspect(t, a, lc); in.Fence != r.Token+7 {
			t.Fatalf("fence %d after a release its first token does not name, want the block's end %d", in.Fence, r.Token+7)
		}
	})
}

// Tokens keep increasing when the counter is lost (as after an empty restart): they never
// fall below the server's clock in microseconds.
func TestTokensIncreaseWhenCounterIsLost(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		a := newProc(t, c, "pa-")
		lc := cfg(t, "fence")
		var last uint64
		for i := 0; i < 50; i++ {
			l, r := a.lock(t, lc, false, 1)
			if r.Token <= last {
				t.Fatalf("token %d after %d", r.Token, last)
			}
			last = r.Token
			a.release(t, lc, l)
			if i%10 == 9 { // as if Redis had restarted empty
				c.Del(ctx, processor.FenceKey(lc))
			}
		}
	})
}

// A window for processes not in line (Java DLock): once every GapEvery a release leaves the key
// free for GapWindow instead of granting it; a process in line cannot take it meanwhile (it
// stays in line), one that does not wait can. The next window is due a period later: until
// then releases grant the key.
func TestGapLeavesTheKeyFree(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		a, b := newProc(t, c, "pa-"), newProc(t, c, "pb-")
		gapped, err := processor.NewRedisLockProcessor(c, processor.Options{Publish: true, Mark: "pa-", GapEvery: time.Minute, GapWindow: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		lc := cfg(t, "gap")
		la, _ := a.lock(t, lc, true, 1)
		lb, _ := b.lock(t, lc, true, 1)
		if r, err := gapped.Unlock(ctx, lc, processor.ReleaseRequest{Locker: la}); err != nil || r.Outcome != processor.Released || r.Next != "" {
			t.Fatalf("release = %+v, %v; want the key left free", r, err)
		}
		if left := c.PTTL(ctx, processor.GapKey(lc)).Val(); left <= 5*time.Second {
			t.Fatalf("the window's mark lives %v; want the period (a minute): the next window is due only then", left)
		}
		if r := b.lockWith(t, lc, lb, true, 1); r.Outcome != processor.Held || r.Seen.Holder != "" || r.Seen.Life <= 0 {
			t.Fatalf("pb- in the window = %+v, want held (the window) and in line", r)
		}
		java := redis.NewClient(&redis.Options{Addr: c.Options().Addr})
		defer java.Close()
		if ok, err := java.SetNX(ctx, lc.UniqueKey(), "java-7", time.Second).Result(); err != nil || !ok {
			t.Fatalf("a SET NX in the window = %v, %v", ok, err)
		}
		for _, w := range [][2]time.Duration{{time.Second, time.Second}, {900 * time.Microsecond, 100 * time.Microsecond}, {time.Second, 1500 * time.Microsecond}, {0, time.Millisecond}} {
			// (A window under a millisecond would be sent as 0, a time to live Redis refuses:
			// every release would fail after it settled its acquisition.)
			if _, err := processor.NewRedisLockProcessor(c, processor.Options{GapEvery: w[0], GapWindow: w[1]}); !errors.Is(err, dlerrors.ErrInvalidConfig) {
				t.Fatalf("a window of %v every %v: %v, want ErrInvalidConfig", w[1], w[0], err)
			}
		}
	})
}

// A window left free for processes not in line ends at the millisecond its mark names: a take
// then finds the key free. (On miniredis, whose clock the test stops.)
func TestWindowEndsAtItsEndMillisecond(t *testing.T) {
	m := miniredis.RunT(t)
	now := time.UnixMilli(1_800_000_000_000)
	m.SetTime(now)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer c.Close()
	ctx := context.Background()
	a := newProc(t, c, "pa-")
	lc := cfg(t, "gap-end")
	if err := c.Set(ctx, processor.GapKey(lc), strconv.FormatInt(now.UnixMilli(), 10), time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if _, r := a.lock(t, lc, true, 1); r.Outcome != processor.Taken {
		t.Fatalf("a take as the window ends = %+v, want taken", r)
	}
}

// A hand-off limit's check opens a window that is due even with nobody in line: a process
// whose goroutines never stop wanting the key lets it go for the window, and stands in line
// again with its next attempt; while the window's period runs, its checks renew.
func TestYieldCheckOpensAWindowThatIsDue(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		a, err := processor.NewRedisLockProcessor(c, processor.Options{Publish: true, Mark: "pa-", GapEvery: time.Minute, GapWindow: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		lc := cfg(t, "gapcheck")
		p := &proc{RedisLockProcessor: a, mark: "pa-"}
		la, _ := p.lock(t, lc, true, 1)
		check := processor.RenewRequest{Locker: la, Yield: true, Check: p.locker(), Next: p.locker(), NextLease: lc.Lease(), NextTokens: 1}
		r, err := a.ExpandLease(ctx, lc, check)
		if err != nil || r.Outcome != processor.Yielded || r.Gap != 5*time.Second || r.Next != "" {
			t.Fatalf("check with a window due = %+v, %v; want yielded, the key left free for 5 s", r, err)
		}
		if in := inspect(t, p, lc); in.Holder != "" || !slices.Equal(in.Waiting, []string{"pa-"}) {
			t.Fatalf("after the check: %+v; want the key free and pa- in line", in)
		}
		java := redis.NewClient(&redis.Options{Addr: c.Options().Addr})
		defer java.Close()
		if ok, err := java.SetNX(ctx, lc.UniqueKey(), "java-7", time.Second).Result(); err != nil || !ok {
			t.Fatalf("a SET NX in the window = %v, %v", ok, err)
		}
		java.Del(ctx, lc.UniqueKey())
		lb, r2 := p.lock(t, lc, true, 1)
		if r2.Outcome != processor.Held {
			t.Fatalf("an attempt in the window = %+v; want it in line", r2)
		}
		c.Del(ctx, processor.GapKey(lc))
		c.Set(ctx, processor.GapKey(lc), "0", time.Minute) // the window passed; the next is due in a minute
		if r := p.lockWith(t, lc, lb, true, 1); r.Outcome != processor.Taken {
			t.Fatalf("take after the window: %+v", r)
		}
		check = processor.RenewRequest{Locker: lb, Yield: true, Check: p.locker(), Next: p.locker(), NextLease: lc.Lease(), NextTokens: 1}
		if r, err := a.ExpandLease(ctx, lc, check); err != nil || r.Outcome != processor.Renewed {
			t.Fatalf("check with no window due = %+v, %v; want renewed", r, err)
		}
	})
}

// An entry that its process stops renewing expires: it never blocks the head of the line.
func TestLineEntriesExpire(t *testing.T) {
	c := srv.Client() // real time: miniredis's TIME does not follow FastForward
	defer c.Close()
	a, b, d := newProc(t, c, "pa-"), newProc(t, c, "pb-"), newProc(t, c, "pd-")
	lc, _ := domain.NewDLockConfig("PROC", fresh("expire-"+t.Name()), 100*time.Millisecond)
	slow, _ := lc.WithLease(10 * time.Second)
	la, _ := a.lock(t, slow, true, 1)
	b.lock(t, lc, true, 1) // its entry lives processor.EntryTTL(lc): 2 s
	time.Sleep(processor.EntryTTL(lc) + 200*time.Millisecond)
	ld, _ := d.lock(t, slow, true, 1)
	if in := inspect(t, a, lc); !slices.Equal(in.Waiting, []string{"pd-"}) {
		t.Fatalf("line %v, want only pd- (pb-'s entry expired)", in.Waiting)
	}
	if r := a.release(t, slow, la); r.Next != ld {
		t.Fatalf("release = %+v, want granted to %s", r, ld)
	}
}

// Inspect lists, first in line first, the processes that a release would grant the key to,
// and changes nothing: not one whose entry expired (even one that listens), nor one that
// listened on its channel as it last renewed its entry and does not now (it died), nor one
// that did not listen and has not renewed its entry within a third of its lease; one that
// listens is listed however old its entry, while the entry lives. A processor that does not
// publish lists the same.
func TestInspectListsOnlyLiveWaiters(t *testing.T) {
	c := srv.Client() // real time
	defer c.Close()
	ctx := context.Background()
	a, e, q, l, d, f := newProc(t, c, "pa-"), newProc(t, c, "pe-"), newProc(t, c, "pq-"), newProc(t, c, "pl-"), newProc(t, c, "pd-"), newProc(t, c, "pf-")
	m := newProc(t, c, "pm-")
	quiet, err := processor.NewRedisLockProcessor(c, processor.Options{Publish: false, Mark: "po-"})
	if err != nil {
		t.Fatal(err)
	}
	// entries live 6 s (the listener's outlives the sleep past the short entries' 2 s and a
	// loaded machine's stalls after it); fresh for 2 s, less than that sleep
	lc, _ := domain.NewDLockConfig("PROC", fresh("inspect-"+t.Name()), 6*time.Second)
	short, _ := lc.WithLease(100 * time.Millisecond) // an entry of 2 s
	brief, _ := lc.WithLease(2 * time.Second)        // an entry of 2 s too, fresh for 667 ms (a loaded machine takes longer than 33 ms to the first Inspect)
	slow, _ := lc.WithLease(10 * time.Second)
	a.lock(t, slow, true, 1)
	listen := func(mark string) *redis.PubSub {
		ps := c.Subscribe(ctx, processor.ProcessChannel(lc, mark))
		t.Cleanup(func() { ps.Close() })
		if _, err := ps.Receive(ctx); err != nil {
			t.Fatal(err)
		}
		return ps
	}
	listen("pl-")
	dead := listen("pd-")
	listen("pm-")
	e.lock(t, brief, true, 1) // its entry expires
	m.lock(t, short, true, 1) // its entry expires, though it listens
	q.lock(t, lc, true, 1)    // does not listen, and stops renewing its entry
	for _, p := range []*proc{l, d} {
		if _, r := p.lock(t, lc, true, 1); !r.Seen.Heard {
			t.Fatalf("%s waits with %+v, want heard", p.mark, r.Seen)
		}
	}
	if in := inspect(t, a, lc); !slices.Equal(in.Waiting, []string{"pe-", "pm-", "pq-", "pl-", "pd-"}) {
		t.Fatalf("line %v, want every process at first", in.Waiting)
	}
	time.Sleep(processor.EntryTTL(short) + 200*time.Millisecond)
	dead.Close()
	waitForNoSubscriber(t, c, processor.ProcessChannel(lc, "pd-"))
	f.lock(t, lc, true, 1) // does not listen, renewed just now
	for _, p := range []processor.DLockProcessor{a, quiet} {
		in, err := p.Inspect(ctx, lc)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(in.Waiting, []string{"pl-", "pf-"}) {
			t.Errorf("line %v, want pl- (listens) and pf- (renewed just now)", in.Waiting)
		}
	}
	if line, err := c.ZRange(ctx, processor.LineKey(lc), 0, -1).Result(); err != nil || !slices.Equal(line, []string{"pe-", "pm-", "pq-", "pl-", "pd-", "pf-"}) {
		t.Fatalf("line's key %v (%v), want every entry kept: Inspect changes nothing", line, err)
	}
}

// Inspect lists the first MaxListed live processes of a longer line, first in line first.
func TestInspectListsTheFirstOfALongLine(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		lc, _ := domain.NewDLockConfig("PROC", fresh("inspect-long-"+t.Name()), 30*time.Second) // fresh for 10 s
		a := newProc(t, c, "pa-")
		a.lock(t, lc, true, 1)
		var marks []string
		for i := range processor.MaxListed + 1 {
			p := newProc(t, c, fmt.Sprintf("p%d-", i))
			if _, r := p.lock(t, lc, true, 1); r.Outcome != processor.Held {
				t.Fatalf("%s: %+v, want held", p.mark, r)
			}
			marks = append(marks, p.mark)
		}
		ends := func(ms []string) string {
			if len(ms) == 0 {
				return "none"
			}
			return fmt.Sprintf("%q to %q", ms[0], ms[len(ms)-1])
		}
		if in, want := inspect(t, a, lc), marks[:processor.MaxListed]; !slices.Equal(in.Waiting, want) {
			t.Fatalf("Inspect lists %d processes (%s), want the first %d of the %d in line (%s)",
				len(in.Waiting), ends(in.Waiting), len(want), len(marks), ends(want))
		}
	})
}

// On a Cluster client (sharded pub/sub) Inspect lists a waiting process that listens with
// SSUBSCRIBE, however old its entry.
func TestInspectHearsShardedListeners(t *testing.T) {
	srv.NeedReal(t)
	ctx := context.Background()
	cc := shardedClient()
	defer cc.Close()
	a, b := newProc(t, cc, "pa-"), newProc(t, cc, "pb-")
	lc, _ := domain.NewDLockConfig("PROC", fresh("inspect-sharded-"+t.Name()), 300*time.Millisecond)
	slow, _ := lc.WithLease(10 * time.Second)
	a.lock(t, slow, true, 1)
	ps := cc.SSubscribe(ctx, processor.ProcessChannel(lc, "pb-"))
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	if _, r := b.lock(t, lc, true, 1); !r.Seen.Heard {
		t.Fatalf("pb- waits with %+v, want heard", r.Seen)
	}
	time.Sleep(processor.GrantFresh(lc) + 50*time.Millisecond)
	if in := inspect(t, a, lc); !slices.Equal(in.Waiting, []string{"pb-"}) {
		t.Fatalf("line %v, want pb-: it listens", in.Waiting)
	}
}

// A grant drops the entries whose time ran out that it passes on its way to a live one (else
// a line headed by sixteen dead entries would hide the live ones behind them).
func TestGrantDropsTheExpiredEntriesItPasses(t *testing.T) {
	c := srv.Client() // real time
	defer c.Close()
	a, b, e := newProc(t, c, "pa-"), newProc(t, c, "pb-"), newProc(t, c, "pe-")
	lc, _ := domain.NewDLockConfig("PROC", fresh("passdead-"+t.Name()), 100*time.Millisecond)
	slow, _ := lc.WithLease(10 * time.Second)
	la, _ := a.lock(t, slow, true, 1)
	b.lock(t, lc, true, 1) // its entry lives processor.EntryTTL(lc): 2 s
	le, _ := e.lock(t, slow, true, 1)
	for end := time.Now().Add(processor.EntryTTL(lc) + 200*time.Millisecond); time.Now().Before(end); {
		time.Sleep(300 * time.Millisecond)
		e.lockWith(t, slow, le, true, 1) // pe- renews its entry (and the line's key lives on)
	}
	if r := a.release(t, slow, la); r.Next != le {
		t.Fatalf("release = %+v, want granted to %s", r, le)
	}
	if err := c.ZScore(context.Background(), processor.LineKey(lc), "pb-").Err(); err != redis.Nil {
		t.Fatalf("pb-'s expired entry is still in line after a grant passed it (%v)", err)
	}
}

// An entry whose time ran out goes with the next settle of its process, even one that only
// settles an attempt before the entry's (a late leave): the line keeps nothing of a process
// that stopped waiting.
func TestSettleDropsAnExpiredEntry(t *testing.T) {
	c := srv.Client() // real time: miniredis's TIME does not follow FastForward
	defer c.Close()
	ctx := context.Background()
	a, b, d := newProc(t, c, "pa-"), newProc(t, c, "pb-"), newProc(t, c, "pd-")
	lc, _ := domain.NewDLockConfig("PROC", fresh("expired-"+t.Name()), 100*time.Millisecond)
	slow, _ := lc.WithLease(10 * time.Second)
	a.lock(t, slow, true, 1)
	early := b.locker()    // an attempt whose leave comes late
	b.lock(t, lc, true, 1) // its entry lives processor.EntryTTL(lc): 2 s
	d.lock(t, slow, true, 1)
	time.Sleep(processor.EntryTTL(lc) + 200*time.Millisecond)
	if _, err := b.Leave(ctx, lc, processor.LeaveRequest{Last: early}); err != nil {
		t.Fatal(err)
	}
	if ok, err := c.HExists(ctx, processor.WantKey(lc), "pb-").Result(); err != nil || ok {
		t.Fatalf("pb-'s expired entry after its settle: kept %v (%v)", ok, err)
	}
	if err := c.ZScore(ctx, processor.LineKey(lc), "pb-").Err(); err != redis.Nil {
		t.Fatalf("pb- is still in line after its settle (%v)", err)
	}
}

// A settled mark outlives the copies of every request it settles: a release sent with a
// shorter lease than the acquisition's lock.lua (a taker's shorter lease) sets it for two of
// the longer lease.
func TestMarkOutlivesTheLongestLease(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		a := newProc(t, c, "pa-")
		long := cfg(t, "marklife") // 1 s
		short, _ := long.WithLease(200 * time.Millisecond)
		la, _ := a.lock(t, long, true, 1)
		if _, err := a.ExpandLease(ctx, short, processor.RenewRequest{Locker: la}); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Unlock(ctx, short, processor.ReleaseRequest{Locker: la}); err != nil {
			t.Fatal(err)
		}
		if a.MarkLife(short) != processor.DoneTTL(long) {
			t.Fatalf("MarkLife(%v) = %v, want %v (two of the longest lease sent)", short.Lease(), a.MarkLife(short), processor.DoneTTL(long))
		}
		if ttl := c.PTTL(ctx, processor.DoneKey(long, "pa-")).Val(); ttl <= processor.DoneTTL(short) {
			t.Fatalf("the settled mark lives %v, no more than two of the release's lease; the lock.lua it settles had %v", ttl, long.Lease())
		}
		if r := a.lockWith(t, long, la, true, 1); r.Outcome != processor.Settled {
			t.Fatalf("a copy of the acquisition after its release = %+v, want settled", r)
		}
	})
}

// An operator's ForceRelease, made with a shorter lease than the removed acquisition's, sets
// the removed owner's marks, and its own record, for at least two of the removed
// acquisition's leases: a late copy of its lock.lua cannot take the key back (nor cut the mark
// short), its renewals answer gone, and a copy of the force answers that it removed the
// holder, that long. The
// operator does not know that lease, only the key's remaining life, which is a quarter of the
// lease as its holder renews: the force finds it so here.
func TestForceMarksOutliveTheRemovedLease(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		a, op := newProc(t, c, "pa-"), newProc(t, c, "op-")
		short := cfg(t, "forcelife") // 1 s: the operator's
		long, _ := short.WithLease(20 * time.Second)
		la, _ := a.lock(t, long, true, 1)
		c.PExpire(ctx, long.UniqueKey(), long.Lease()/4) // (its holder is about to renew)
		if r, err := op.ForceRelease(ctx, short, la); err != nil || r.Outcome != processor.Released {
			t.Fatalf("ForceRelease = %+v, %v", r, err)
		}
		// (the force's own record too: a copy of the force after the operator's lease answers
		// that it removed the holder, not that it found it gone)
		for _, k := range []string{processor.DoneKey(long, "pa-"), processor.ForcedKey(long, "pa-"), processor.RemovedKey(long, la)} {
			// (slack: the time from the PEXPIRE to the force counts eight times)
			if ttl := c.PTTL(ctx, k).Val(); ttl < processor.DoneTTL(long)-4*time.Second {
				t.Errorf("%s lives %v after the force, want two of the removed acquisition's lease (%v)", k, ttl, long.Lease())
			}
		}
		// a late copy of the removed acquisition's take, sent with a shorter mark life (before
		// its process's grew: here a processor that has not seen the long lease), finds it
		// settled and does not cut its mark short (after which a later copy could take the key)
		early := newProc(t, c, "pa-")
		if r, err := early.Lock(ctx, short, processor.LockRequest{Locker: la, Wait: true, Tokens: 1}); err != nil || r.Outcome == processor.Taken {
			t.Fatalf("a late copy of the removed take = %+v, %v", r, err)
		}
		if ttl := c.PTTL(ctx, processor.DoneKey(long, "pa-")).Val(); ttl < processor.DoneTTL(long)-4*time.Second {
			t.Errorf("the settled mark lives %v after a late copy with a lease of %v, want what the force kept", ttl, short.Lease())
		}
	})
}

// A locker removed by ForceRelease makes its own release and renewals answer gone, and only
// its own: a copy of a later holding's release or renewal, after that holding was released,
// answers settled, so its holder is not told of a loss that never was.
func TestForcedLockerAnswersGoneAndNoOtherOfItsOwner(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		a, op := newProc(t, c, "pa-"), newProc(t, c, "op-")
		lc := cfg(t, "forcedonly")
		la, _ := a.lock(t, lc, true, 1)
		if r, err := op.ForceRelease(ctx, lc, la); err != nil || r.Outcome != processor.Released {
			t.Fatalf("ForceRelease = %+v, %v", r, err)
		}
		lb, r := a.lock(t, lc, true, 1)
		if r.Outcome != processor.Taken {
			t.Fatalf("the later take = %+v", r)
		}
		req := processor.ReleaseRequest{Locker: lb, Last: r.Token, Origin: r.Origin}
		for i, want := range []processor.Outcome{processor.Released, processor.Settled} {
			if rel, err := a.Unlock(ctx, lc, req); err != nil || rel.Outcome != want {
				t.Fatalf("the later holding's release (copy %d) = %+v, %v; want %v", i, rel, err, want)
			}
		}
		if rn, err := a.ExpandLease(ctx, lc, processor.RenewRequest{Locker: lb, Origin: r.Origin}); err != nil || rn.Outcome != processor.Settled {
			t.Fatalf("a late renewal of the released holding = %+v, %v; want settled", rn, err)
		}
		if rel := a.release(t, lc, la); rel.Outcome != processor.Gone {
			t.Fatalf("the removed holding's release = %+v; want gone", rel)
		}
	})
}

// The owner's removed lockers are remembered up to FORCED_KEPT, the newest: five holdings of
// one process removed one after another leave the four newest answering gone, and the oldest,
// forgotten, answers settled (it was let go), as any older settled acquisition does.
func TestForcedRemembersTheNewestFourLockersOfItsOwner(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		a, op := newProc(t, c, "pa-"), newProc(t, c, "op-")
		lc := cfg(t, "forcedfour")
		var removed []string
		for range 5 {
			l, r := a.lock(t, lc, true, 1)
			if r.Outcome != processor.Taken {
				t.Fatalf("take %d = %+v", len(removed), r)
			}
			if f, err := op.ForceRelease(ctx, lc, l); err != nil || f.Outcome != processor.Released {
				t.Fatalf("ForceRelease of %s = %+v, %v", l, f, err)
			}
			removed = append(removed, l)
		}
		if got, want := c.Get(ctx, processor.ForcedKey(lc, "pa-")).Val(), strings.Join(removed[1:], " "); got != want {
			t.Fatalf("%s holds %q, want the newest four removed lockers %q", processor.ForcedKey(lc, "pa-"), got, want)
		}
		for i, l := range removed {
			want := processor.Gone
			if i == 0 {
				want = processor.Settled
			}
			if r := a.release(t, lc, l); r.Outcome != want {
				t.Fatalf("release of removed holding %d (%s) = %+v; want %v", i, l, r, want)
			}
		}
	})
}

// Removed lockers whose releases their process retries (every request of the process names
// each of them: Unreleased) stay among the remembered ones however many newer holdings of the
// process are removed meanwhile: each newer holding began with a request that named them, which
// makes them the newest again; their releases then answer gone, not settled. So do the
// process's tries refused meanwhile, each of which takes a place too (lock.lua's refuse).
// Three such releases at once (FORCED_KEPT - 1: each newer removal or refusal takes a place
// too) are all kept.
func TestForcedKeepsTheRetriedLockersPastNewerRemovals(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		a, b, op := newProc(t, c, "pa-"), newProc(t, c, "pb-"), newProc(t, c, "op-")
		lc := cfg(t, "forcedretried")
		var u []processor.Unreleased
		take := func(what string) (string, uint64) {
			t.Helper()
			l := a.locker()
			r, err := a.Lock(ctx, lc, processor.LockRequest{Locker: l, Tokens: 1, Unreleased: u})
			if err != nil || r.Outcome != processor.Taken {
				t.Fatalf("%s = %+v, %v", what, r, err)
			}
			if f, err := op.ForceRelease(ctx, lc, l); err != nil || f.Outcome != processor.Released {
				t.Fatalf("ForceRelease of %s = %+v, %v", l, f, err)
			}
			return l, r.Origin
		}
		for i := range 3 {
			l, origin := take(fmt.Sprintf("retried holding %d's take", i))
			u = append(u, processor.Unreleased{Locker: l, Origin: origin})
		}
		for i := range 6 {
			take(fmt.Sprintf("newer take %d", i))
		}
		if _, r := b.lock(t, lc, false, 1); r.Outcome != processor.Taken {
			t.Fatalf("pb-'s take = %+v", r)
		}
		for i := range 6 {
			r, err := a.Lock(ctx, lc, processor.LockRequest{Locker: a.locker(), Tokens: 1, Unreleased: u})
			if err != nil || r.Outcome != processor.Held {
				t.Fatalf("pa-'s try %d of the key pb- holds = %+v, %v; want held", i, r, err)
			}
		}
		for i, r := range u {
			if rel := a.release(t, lc, r.Locker); rel.Outcome != processor.Gone {
				t.Fatalf("the retried release of removed holding %d (%s) = %+v; want gone", i, r.Locker, rel)
			}
		}
	})
}

// ForceRelease names the holder it removes: a second copy finds it gone.
func TestForceReleaseNamesTheHolder(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		a, b, op := newProc(t, c, "pa-"), newProc(t, c, "pb-"), newProc(t, c, "op-")
		lc := cfg(t, "force")
		la, _ := a.lock(t, lc, true, 1)
		if r, err := op.ForceRelease(ctx, lc, "nobody-1"); err != nil || r.Outcome != processor.Gone {
			t.Fatalf("ForceRelease of another holder = %v, %v", r, err)
		}
		first, err := op.ForceReleaseAs(ctx, lc, la, "op-force")
		if err != nil || first.Outcome != processor.Released {
			t.Fatalf("ForceRelease = %v, %v", first, err)
		}
		lb, _ := b.lock(t, lc, true, 1)
		if r, err := op.ForceRelease(ctx, lc, la); err != nil || r.Outcome != processor.Gone {
			t.Fatalf("ForceRelease again = %v, %v; want gone (another request)", r, err)
		}
		if r, err := op.ForceReleaseAs(ctx, lc, la, "op-forc"); err != nil || r.Outcome != processor.Gone {
			t.Fatalf("ForceRelease again, under a name the first's begins with = %v, %v; want gone", r, err)
		}
		if r, err := op.ForceReleaseAs(ctx, lc, la, "op-force"); err != nil || r.Outcome != processor.Settled || r.Next != first.Next {
			t.Fatalf("a copy of the first ForceRelease = %v, %v; want settled (removed by it), granted as the first said (%q)", r, err, first.Next)
		}
		for _, bad := range []string{"", "a|b"} {
			if _, err := op.ForceReleaseAs(ctx, lc, lb, bad); !errors.Is(err, dlerrors.ErrInvalidConfig) {
				t.Fatalf("ForceReleaseAs named %q: %v", bad, err)
			}
		}
		if in := inspect(t, a, lc); in.Holder != lb {
			t.Fatalf("holder %q, want %q", in.Holder, lb)
		}
		if r := a.release(t, lc, la); r.Outcome != processor.Gone {
			t.Fatalf("the removed holder's release = %+v, want gone (it learns of the loss)", r)
		}
		if r := b.release(t, lc, lb); r.Outcome != processor.Released {
			t.Fatalf("the next holder's release = %+v", r)
		}
		if r, err := op.ForceRelease(ctx, lc, lb); err != nil || r.Outcome != processor.Gone {
			t.Fatalf("ForceRelease of a holder that released = %v, %v; want gone", r, err)
		}
	})
}

// An operator's removal grants the key to the first live process in line even when that is
// the removed holder's own process, waiting with a later attempt: it wants the key still.
func TestForceReleaseGrantsTheRemovedHoldersLaterAttempt(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		a, op := newProc(t, c, "pa-"), newProc(t, c, "op-")
		lc := cfg(t, "forceown")
		la, _ := a.lock(t, lc, true, 1)
		later, r := a.lock(t, lc, true, 1)
		if r.Outcome != processor.Held {
			t.Fatalf("the later attempt = %+v, want held (by %s)", r, la)
		}
		if r, err := op.ForceRelease(ctx, lc, la); err != nil || r.Outcome != processor.Released || r.Next != later {
			t.Fatalf("ForceRelease of %s = %+v, %v; want granted to its process's later attempt %s", la, r, err, later)
		}
		if in := inspect(t, a, lc); in.Holder != later || len(in.Waiting) != 0 {
			t.Fatalf("after the force: %+v, want %s holding and nobody in line", in, later)
		}
	})
}

// An operator's removal of a locker of another form (of no process of dlock's: it has no
// settled mark nor channel) tells the processes in line, as a release does, and nobody else:
// not the operator's own process.
func TestForceReleaseOfALockerOfAnotherFormTellsNoOtherProcess(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		op, b := newProc(t, c, "op-"), newProc(t, c, "pb-")
		lc := cfg(t, "forceforeign")
		ps := c.PSubscribe(ctx, processor.ReleaseChannel(lc)+":*")
		defer ps.Close()
		if _, err := ps.Receive(ctx); err != nil { // subscription confirmation
			t.Fatal(err)
		}
		const foreign = "javaholder"
		if r, err := op.Lock(ctx, lc, processor.LockRequest{Locker: foreign, Tokens: 1}); err != nil || r.Outcome != processor.Taken {
			t.Fatalf("Lock with %q = %+v, %v; want taken", foreign, r, err)
		}
		lb, _ := b.lock(t, lc, true, 1)
		if r, err := op.ForceRelease(ctx, lc, foreign); err != nil || r.Next != lb {
			t.Fatalf("ForceRelease = %+v, %v; want granted to %s", r, err, lb)
		}
		// (then a message of the test's own to op-: what the force told it comes before it)
		if err := c.Publish(ctx, processor.ProcessChannel(lc, "op-"), "R|end-of-test|0").Err(); err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		for _, want := range []string{"pb-", "op-"} {
			msg, err := ps.ReceiveMessage(rctx)
			if err != nil {
				t.Fatal(err)
			}
			to := strings.TrimPrefix(msg.Channel, processor.ReleaseChannel(lc)+":")
			m, _ := processor.ParseMessage(msg.Payload)
			switch {
			case to != want:
				t.Fatalf("%q told to %s, want a message to %s", msg.Payload, to, want)
			case want == "pb-" && (!m.Granted || m.Locker != lb):
				t.Fatalf("pb- told %q, want the grant", msg.Payload)
			case want == "op-" && m.From != "end-of-test":
				t.Fatalf("op- told %q by the force, want nothing", msg.Payload)
			}
		}
	})
}

// An acquisition an operator removed is settled: a late copy of the request that took the key
// cannot take it back once it is free again, and the holder's renewals and release say the key
// is gone, so that it learns of the loss.
func TestForceReleaseSettlesTheRemoved(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		a, b, op := newProc(t, c, "pa-"), newProc(t, c, "pb-"), newProc(t, c, "op-")
		lc := cfg(t, "forcesettle")
		req := processor.LockRequest{Locker: a.locker(), Tokens: 1}
		if r, _ := a.Lock(ctx, lc, req); r.Outcome != processor.Taken {
			t.Fatalf("Lock = %+v", r)
		}
		if r, err := op.ForceRelease(ctx, lc, req.Locker); err != nil || r.Outcome != processor.Released {
			t.Fatalf("ForceRelease = %v, %v", r, err)
		}
		lb, _ := b.lock(t, lc, false, 1)
		b.release(t, lc, lb) // free again
		if r, _ := a.Lock(ctx, lc, req); r.Outcome != processor.Settled {
			t.Fatalf("a late copy of the removed acquisition's request = %+v, want settled", r)
		}
		if in := inspect(t, a, lc); in.Holder != "" {
			t.Fatalf("the key holds %q after the late copy", in.Holder)
		}
		if r, err := a.ExpandLease(ctx, lc, processor.RenewRequest{Locker: req.Locker}); err != nil || r.Outcome != processor.Gone {
			t.Fatalf("the removed holder's renewal = %+v, %v; want gone", r, err)
		}
		if r := a.release(t, lc, req.Locker); r.Outcome != processor.Gone {
			t.Fatalf("the removed holder's release = %+v, want gone", r)
		}
	})
}

// A process that stops waiting settles every attempt it numbered so far: one still on its way
// cannot put it back in line, nor take the key; one that took the key already is let go.
func TestLeaveSettlesTheAttemptsBeforeIt(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		a, b, d := newProc(t, c, "pa-"), newProc(t, c, "pb-"), newProc(t, c, "pd-")
		lc := cfg(t, "leave")
		la, _ := a.lock(t, lc, true, 1)
		late := processor.LockRequest{Locker: b.locker(), Wait: true, Tokens: 1} // on its way
		if _, err := b.Leave(ctx, lc, processor.LeaveRequest{Last: late.Locker}); err != nil {
			t.Fatal(err)
		}
		if r, _ := b.Lock(ctx, lc, late); r.Outcome != processor.Settled {
			t.Fatalf("the attempt arriving after its process left = %+v, want settled", r)
		}
		if in := inspect(t, a, lc); len(in.Waiting) != 0 {
			t.Fatalf("line %v after the late attempt, want empty", in.Waiting)
		}
		// An attempt that took the key before its process's leave arrived is let go, to the
		// next in line.
		a.release(t, lc, la)
		lb, r := b.lock(t, lc, false, 1)
		if r.Outcome != processor.Taken {
			t.Fatalf("b's attempt on a free key = %+v", r)
		}
		ld, _ := d.lock(t, lc, true, 1) // d waits
		if r, err := b.Leave(ctx, lc, processor.LeaveRequest{Last: lb}); err != nil || r.Outcome != processor.Released || r.Next != ld || r.Token == 0 {
			t.Fatalf("b's leave = %+v, %v; want the key it held passed on to %s", r, err, ld)
		}
		if in := inspect(t, a, lc); in.Holder != ld {
			t.Fatalf("after b left, the key holds %q, want it granted to %s", in.Holder, ld)
		}
		// A leave that comes after its process waits again, with a later attempt, leaves the
		// later entry in line.
		la2, _ := a.lock(t, lc, true, 1)
		if r, err := a.Leave(ctx, lc, processor.LeaveRequest{Last: la}); err != nil || r.Outcome != processor.Gone {
			t.Fatalf("a's late leave = %+v, %v; want gone (it held nothing to pass on)", r, err)
		}
		if in := inspect(t, a, lc); !slices.Equal(in.Waiting, []string{"pa-"}) {
			t.Fatalf("line %v: a late leave removed the entry of %s", in.Waiting, la2)
		}
		// The leave of a process that holds the key and waits in line with a later attempt
		// settles both: the key is let go, not granted to that later attempt.
		e, lo := newProc(t, c, "pe-"), cfg(t, "leave-own")
		e.lock(t, lo, true, 1)
		if _, r := e.lock(t, lo, true, 1); r.Outcome != processor.Held {
			t.Fatalf("a second attempt of the holder's process = %+v, want held (in line)", r)
		}
		if _, err := e.Leave(ctx, lo, processor.LeaveRequest{Last: e.last()}); err != nil {
			t.Fatal(err)
		}
		if h := c.Get(ctx, lo.UniqueKey()).Val(); h != "" {
			t.Fatalf("after the leave the key holds %q, want it free (every acquisition of pe- settled)", h)
		}
	})
}

// A leave that names an acquisition of its process whose release went unanswered (Unreleased)
// settles it as any leave does, but one that the key no longer held, unsettled (lost by Redis),
// it remembers as removed: its release then answers gone, not settled, and its holder learns of
// the loss. One the key still held it lets go (its release answers settled: no loss), and so
// it does with one whose release ran before.
func TestLeaveNamingAnUnansweredReleaseKeepsItsLossKnown(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		a := newProc(t, c, "pa-")
		for _, how := range []string{"lost", "held", "released"} {
			lc := cfg(t, "unreleased-"+how)
			la, r := a.lock(t, lc, false, 1)
			if r.Outcome != processor.Taken {
				t.Fatalf("%s: the attempt on a free key = %+v", how, r)
			}
			switch how {
			case "lost":
				c.Del(ctx, lc.UniqueKey())
			case "released":
				if r := a.release(t, lc, la); r.Outcome != processor.Released {
					t.Fatalf("%s: release = %+v, want released", how, r)
				}
			}
			if _, err := a.Leave(ctx, lc, processor.LeaveRequest{Last: a.last(), Unreleased: []processor.Unreleased{{Locker: la, Origin: r.Origin}}}); err != nil {
				t.Fatal(err)
			}
			want := processor.Settled
			if how == "lost" {
				want = processor.Gone
			}
			if r := a.release(t, lc, la); r.Outcome != want {
				t.Fatalf("%s: the release after the leave = %+v, want %v", how, r, want)
			}
			if in := inspect(t, a, lc); in.Holder != "" {
				t.Fatalf("%s: the key holds %q after the leave, want it free", how, in.Holder)
			}
		}
	})
}

// Every request that settles acquisitions of its process (a newer holding's release, a yield,
// a take that does not wait) while it names one whose release went unanswered (Unreleased)
// keeps that one's loss known, as a leave does: one the key no longer held, unsettled (lost by
// Redis), it remembers as removed, so that its retried release answers gone, not settled. One
// whose release ran before still answers settled, and one the key still holds is released.
func TestSettlingRequestsNamingAnUnansweredReleaseKeepItsLossKnown(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		settlers := map[string]func(t *testing.T, a, b *proc, lc domain.DLockConfig, u []processor.Unreleased){
			"a newer holding's release": func(t *testing.T, a, _ *proc, lc domain.DLockConfig, u []processor.Unreleased) {
				l, r := a.lock(t, lc, false, 1)
				if r.Outcome != processor.Taken {
					t.Fatalf("the newer take = %+v", r)
				}
				if rel, err := a.Unlock(ctx, lc, processor.ReleaseRequest{Locker: l, Last: r.Token, Origin: r.Origin, Unreleased: u}); err != nil || rel.Outcome != processor.Released {
					t.Fatalf("the newer release = %+v, %v", rel, err)
				}
			},
			"a take that does not wait": func(t *testing.T, a, b *proc, lc domain.DLockConfig, u []processor.Unreleased) {
				if in := inspect(t, a, lc); in.Holder == "" {
					if _, r := b.lock(t, lc, false, 1); r.Outcome != processor.Taken {
						t.Fatalf("pb-'s take = %+v", r)
					}
				}
				if r, err := a.Lock(ctx, lc, processor.LockRequest{Locker: a.locker(), Tokens: 1, Unreleased: u}); err != nil || r.Outcome != processor.Held {
					t.Fatalf("the take = %+v, %v; want held", r, err)
				}
			},
			"a yield": func(t *testing.T, a, b *proc, lc domain.DLockConfig, u []processor.Unreleased) {
				l, r := a.lock(t, lc, false, 1)
				if r.Outcome != processor.Taken {
					t.Fatalf("the newer take = %+v", r)
				}
				b.lock(t, lc, true, 1)
				req := processor.RenewRequest{Locker: l, Origin: r.Origin, Yield: true, Check: a.locker(), Next: a.locker(), NextLease: lc.Lease(), Unreleased: u}
				if y, err := a.ExpandLease(ctx, lc, req); err != nil || y.Outcome != processor.Yielded {
					t.Fatalf("the yield = %+v, %v", y, err)
				}
			},
		}
		for name, settle := range settlers {
			for _, how := range []string{"lost", "released", "held"} {
				if how == "held" && name != "a take that does not wait" {
					continue // (the others need the key free or theirs)
				}
				t.Run(name+", "+how, func(t *testing.T) {
					a, b := newProc(t, c, "pa-"), newProc(t, c, "pb-")
					lc := cfg(t, "settler")
					la, r := a.lock(t, lc, false, 1)
					if r.Outcome != processor.Taken {
						t.Fatalf("the take on a free key = %+v", r)
					}
					want := processor.Released
					switch how {
					case "lost":
						c.Del(ctx, lc.UniqueKey())
						want = processor.Gone
					case "released":
						if r := a.release(t, lc, la); r.Outcome != processor.Released {
							t.Fatalf("release = %+v", r)
						}
						want = processor.Settled
					}
					settle(t, a, b, lc, []processor.Unreleased{{Locker: la, Origin: r.Origin}})
					if rel, err := a.Unlock(ctx, lc, processor.ReleaseRequest{Locker: la, Origin: r.Origin}); err != nil || rel.Outcome != want {
						t.Fatalf("the retried release = %+v, %v; want %v", rel, err, want)
					}
				})
			}
		}
		t.Run("an operator removed the newer holding", func(t *testing.T) {
			// The newer take names the lost one, and the operator's removal settles both: both
			// removals stay known, the newer holding's release answers gone however often it is
			// sent, and so does the lost one's.
			a := newProc(t, c, "pa-")
			lc := cfg(t, "settler-forced")
			la, r := a.lock(t, lc, false, 1)
			c.Del(ctx, lc.UniqueKey())
			u := []processor.Unreleased{{Locker: la, Origin: r.Origin}}
			later := a.locker()
			rl, err := a.Lock(ctx, lc, processor.LockRequest{Locker: later, Tokens: 1, Unreleased: u})
			if err != nil || rl.Outcome != processor.Taken {
				t.Fatalf("the newer take = %+v, %v", rl, err)
			}
			if _, err := a.ForceRelease(ctx, lc, later); err != nil {
				t.Fatal(err)
			}
			for i := range 2 { // (go-redis sends a script again whose reply a read timeout cut)
				if rel, err := a.Unlock(ctx, lc, processor.ReleaseRequest{Locker: later, Origin: rl.Origin, Unreleased: u}); err != nil || rel.Outcome != processor.Gone {
					t.Fatalf("copy %d of the removed holding's release = %+v, %v; want gone", i+1, rel, err)
				}
			}
			if rel, err := a.Unlock(ctx, lc, processor.ReleaseRequest{Locker: la, Origin: r.Origin}); err != nil || rel.Outcome != processor.Gone {
				t.Fatalf("the lost one's release = %+v, %v; want gone", rel, err)
			}
		})
		t.Run("not the request's owner", func(t *testing.T) {
			a := newProc(t, c, "pa-")
			lc := cfg(t, "settler-other")
			u := []processor.Unreleased{{Locker: "pb-1"}}
			if _, err := a.Unlock(ctx, lc, processor.ReleaseRequest{Locker: a.locker(), Unreleased: u}); !errors.Is(err, dlerrors.ErrInvalidConfig) {
				t.Fatalf("a release naming another process's locker: err = %v, want ErrInvalidConfig", err)
			}
		})
		t.Run("a locker with a space", func(t *testing.T) { // (the scripts read the lockers named separated by spaces)
			a := newProc(t, c, "p a-")
			lc := cfg(t, "settler-space")
			u := []processor.Unreleased{{Locker: "p a-1"}}
			if _, err := a.Unlock(ctx, lc, processor.ReleaseRequest{Locker: a.locker(), Unreleased: u}); !errors.Is(err, dlerrors.ErrInvalidConfig) {
				t.Fatalf("a release naming a locker with a space: err = %v, want ErrInvalidConfig", err)
			}
		})
	})
}

// A leave that names an acquisition whose release went unanswered, while the key holds that
// locker in a holding it did not begin with (taken anew: a late copy of its take ran after an
// empty restart, another process having held the key in between), remembers it as removed:
// the key is let go, and the release answers gone, as it would have without the leave.
func TestLeaveNamingAnUnansweredReleaseOfAHoldingTakenAnewKeepsItsLossKnown(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		a, b := newProc(t, c, "pa-"), newProc(t, c, "pb-")
		lc := cfg(t, "unreleased-anew")
		req := processor.LockRequest{Locker: a.locker(), Tokens: 1}
		r, err := a.Lock(ctx, lc, req)
		if err != nil || r.Outcome != processor.Taken {
			t.Fatalf("take = %+v, %v", r, err)
		}
		wipeKeys(t, c, lc) // Redis restarts empty
		lb, rb := b.lock(t, lc, false, 1)
		if rb.Outcome != processor.Taken {
			t.Fatalf("pb- after the restart = %+v", rb)
		}
		if rel := b.release(t, lc, lb); rel.Outcome != processor.Released {
			t.Fatalf("pb- release = %+v", rel)
		}
		if again, err := a.Lock(ctx, lc, req); err != nil || again.Outcome != processor.Taken || again.Origin == r.Origin {
			t.Fatalf("the late copy = %+v, %v; want taken anew", again, err)
		}
		if _, err := a.Leave(ctx, lc, processor.LeaveRequest{Last: a.last(), Unreleased: []processor.Unreleased{{Locker: req.Locker, Origin: r.Origin}}}); err != nil {
			t.Fatal(err)
		}
		if in := inspect(t, a, lc); in.Holder != "" {
			t.Fatalf("the key holds %q after the leave, want it let go", in.Holder)
		}
		release := processor.ReleaseRequest{Locker: req.Locker, Last: r.Token, Origin: r.Origin}
		if rel, err := a.Unlock(ctx, lc, release); err != nil || rel.Outcome != processor.Gone {
			t.Fatalf("the release after the leave = %+v, %v; want gone (its holding was taken anew: a loss)", rel, err)
		}
	})
}

// A late or repeated copy of a leave that names an acquisition whose release went unanswered
// changes nothing for a holding that is live: not who holds the key, nor the answers of its
// renewals and release; nor does it turn a release that ran (no loss) into a loss, or hide an
// operator's removal of a later holding of the process.
func TestLateLeaveNamingAnUnansweredReleaseReportsNoFalseLoss(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		leave := func(p *proc, lc domain.DLockConfig, last, unreleased string, origin uint64) {
			t.Helper()
			for range 2 { // (go-redis sends a script again whose reply a read timeout cut)
				if _, err := p.Leave(ctx, lc, processor.LeaveRequest{Last: last, Unreleased: []processor.Unreleased{{Locker: unreleased, Origin: origin}}}); err != nil {
					t.Fatal(err)
				}
			}
		}
		renews := func(p *proc, lc domain.DLockConfig, locker string, origin uint64, want processor.Outcome) {
			t.Helper()
			if r, err := p.ExpandLease(ctx, lc, processor.RenewRequest{Locker: locker, Origin: origin}); err != nil || r.Outcome != want {
				t.Fatalf("renewal of %s = %+v, %v; want %v", locker, r, err, want)
			}
		}
		t.Run("passed on, then copied", func(t *testing.T) {
			a, b := newProc(t, c, "pa-"), newProc(t, c, "pb-")
			lc := cfg(t, "unreleased-copy")
			la, r := a.lock(t, lc, false, 1)
			lb, _ := b.lock(t, lc, true, 1)
			leave(a, lc, a.last(), la, r.Origin) // the first copy passes the key to pb-
			in := inspect(t, a, lc)
			if in.Holder != lb {
				t.Fatalf("after the leave the key holds %q, want %s", in.Holder, lb)
			}
			renews(b, lc, lb, 0, processor.Renewed)
			if rel := a.release(t, lc, la); rel.Outcome != processor.Settled {
				t.Fatalf("the release after the leave let the key go = %+v, want settled (no loss)", rel)
			}
		})
		for _, lost := range []bool{false, true} {
			// the release ran (a copy of it answers settled: no loss), or the acquisition was
			// lost by Redis before any release of it ran (its release answers gone)
			t.Run(map[bool]string{false: "after the release ran", true: "lost"}[lost]+", a later attempt holding the key", func(t *testing.T) {
				a := newProc(t, c, "pa-")
				lc := cfg(t, "unreleased-later")
				la, r := a.lock(t, lc, false, 1)
				want := processor.Gone
				if lost {
					c.Del(ctx, lc.UniqueKey())
				} else if rel := a.release(t, lc, la); rel.Outcome != processor.Released {
					t.Fatalf("release = %+v", rel)
				} else {
					want = processor.Settled
				}
				later, rl := a.lock(t, lc, false, 1)
				if rl.Outcome != processor.Taken {
					t.Fatalf("the later attempt = %+v", rl)
				}
				leave(a, lc, la, la, r.Origin)
				if in := inspect(t, a, lc); in.Holder != later {
					t.Fatalf("after the late leave the key holds %q, want %s", in.Holder, later)
				}
				renews(a, lc, later, rl.Origin, processor.Renewed)
				if rel := a.release(t, lc, la); rel.Outcome != want {
					t.Fatalf("the named acquisition's release = %+v, want %v", rel, want)
				}
				if rel := a.release(t, lc, later); rel.Outcome != processor.Released {
					t.Fatalf("the later attempt's release = %+v, want released", rel)
				}
			})
		}
		t.Run("after an operator removed a later holding", func(t *testing.T) {
			a := newProc(t, c, "pa-")
			lc := cfg(t, "unreleased-forced")
			la, r := a.lock(t, lc, false, 1)
			c.Del(ctx, lc.UniqueKey())
			later, rl := a.lock(t, lc, false, 1)
			if rl.Outcome != processor.Taken {
				t.Fatalf("the later attempt = %+v", rl)
			}
			if _, err := a.ForceRelease(ctx, lc, later); err != nil {
				t.Fatal(err)
			}
			leave(a, lc, la, la, r.Origin)
			renews(a, lc, later, rl.Origin, processor.Gone) // (the removal stays known)
			if rel := a.release(t, lc, later); rel.Outcome != processor.Gone {
				t.Fatalf("the removed holding's release = %+v, want gone", rel)
			}
		})
		t.Run("after an empty restart, a later attempt holding the key", func(t *testing.T) {
			a := newProc(t, c, "pa-")
			lc := cfg(t, "unreleased-restart")
			la, r := a.lock(t, lc, false, 1)
			if rel := a.release(t, lc, la); rel.Outcome != processor.Released {
				t.Fatalf("release = %+v", rel)
			}
			wipeKeys(t, c, lc) // Redis restarts empty
			later, rl := a.lock(t, lc, false, 1)
			if rl.Outcome != processor.Taken {
				t.Fatalf("the later attempt = %+v", rl)
			}
			leave(a, lc, la, la, r.Origin)
			if in := inspect(t, a, lc); in.Holder != later {
				t.Fatalf("after the late leave the key holds %q, want %s", in.Holder, later)
			}
			renews(a, lc, later, rl.Origin, processor.Renewed)
			if rel := a.release(t, lc, later); rel.Outcome != processor.Released {
				t.Fatalf("the later attempt's release = %+v, want released", rel)
			}
		})
	})
}

// A leave that arrives late, after its process took the key with a later attempt, settles only
// the attempts it numbered: the later holding keeps the key. A leave of a process that
// numbered no attempt ("" for Last) settles nothing and lets nothing go.
func TestLateLeaveKeepsTheKeyOfALaterAttempt(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		a := newProc(t, c, "pa-")
		lc := cfg(t, "lateleave")
		given := a.locker() // an attempt given up; its leave is on its way
		later, r := a.lock(t, lc, true, 1)
		if r.Outcome != processor.Taken {
			t.Fatalf("the later attempt = %+v, want taken", r)
		}
		for _, last := range []string{given, ""} {
			if r, err := a.Leave(ctx, lc, processor.LeaveRequest{Last: last}); err != nil || r.Outcome != processor.Gone {
				t.Fatalf("a leave up to %q, while %s holds the key = %+v, %v; want gone (nothing of it to let go)", last, later, r, err)
			}
			if in := inspect(t, a, lc); in.Holder != later {
				t.Fatalf("after a leave up to %q the key holds %q, want %s", last, in.Holder, later)
			}
		}
		if r := a.release(t, lc, later); r.Outcome != processor.Released {
			t.Fatalf("the later attempt's release = %+v, want released", r)
		}
	})
}

// A leave of a process that waits again, with a later attempt, while an attempt it settles
// holds the key (a grant it no longer wanted) lets the key go to the first in line as a release
// does: to that later attempt, when it is first.
func TestLeaveGrantsTheProcesssLaterAttempt(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		b, d := newProc(t, c, "pb-"), newProc(t, c, "pd-")
		lc := cfg(t, "leaveown")
		lb, _ := b.lock(t, lc, true, 1)
		later, r := b.lock(t, lc, true, 1)
		if r.Outcome != processor.Held {
			t.Fatalf("the later attempt = %+v, want held (by %s)", r, lb)
		}
		ld, _ := d.lock(t, lc, true, 1) // behind it
		if r, err := b.Leave(ctx, lc, processor.LeaveRequest{Last: lb}); err != nil || r.Outcome != processor.Released || r.Next != later {
			t.Fatalf("the leave up to %s = %+v, %v; want the key granted to the later attempt %s", lb, r, err, later)
		}
		if in := inspect(t, b, lc); in.Holder != later || !slices.Equal(in.Waiting, []string{"pd-"}) {
			t.Fatalf("after the leave: %+v, want %s holding and %s in line", in, later, ld)
		}
	})
}

// A request older than the acquisition of its owner that holds the key is a stale copy: it is
// refused (settled), and does not put its process in line behind itself, nor take the key
// once that holding is gone.
func TestStaleAttemptIsRefused(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		a := newProc(t, c, "pa-")
		lc := cfg(t, "stale")
		old := processor.LockRequest{Locker: a.locker(), Wait: true, Tokens: 1} // never arrived
		la, _ := a.lock(t, lc, true, 1)
		if r, _ := a.Lock(ctx, lc, old); r.Outcome != processor.Settled {
			t.Fatalf("the older attempt = %+v, want settled", r)
		}
		if in := inspect(t, a, lc); in.Holder != la || len(in.Waiting) != 0 {
			t.Fatalf("after the stale copy: %+v", in)
		}
		c.Del(ctx, lc.UniqueKey()) // the holding expires (its process died): nothing is newer now
		if r, _ := a.Lock(ctx, lc, old); r.Outcome != processor.Settled {
			t.Fatalf("a second copy of the older attempt, once the key is free = %+v, want settled", r)
		}
	})
}

// A copy of an attempt older than the one its process stands in line with is refused, even
// when the key holds an older acquisition still of that process (a grant it gave up, not yet
// passed on): the entry keeps the newer attempt.
func TestStaleAttemptBetweenHolderAndEntryIsRefused(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		a := newProc(t, c, "pa-")
		lc := cfg(t, "stalemid")
		la, _ := a.lock(t, lc, true, 1)
		mid := processor.LockRequest{Locker: a.locker(), Wait: true, Tokens: 1} // late
		newer := a.locker()
		if r := a.lockWith(t, lc, newer, true, 1); r.Outcome != processor.Held {
			t.Fatalf("the newer attempt = %+v, want held (by %s)", r, la)
		}
		if r, _ := a.Lock(ctx, lc, mid); r.Outcome != processor.Settled {
			t.Fatalf("the copy of the attempt in between = %+v, want settled", r)
		}
		e, err := c.HGet(ctx, processor.WantKey(lc), "pa-").Result()
		if err != nil || !strings.HasPrefix(e, newer+"|") {
			t.Fatalf("the entry after the stale copy: %q, %v; want it to wait with %s", e, err, newer)
		}
	})
}

// A copy of the take of the very acquisition that holds the key is refused when its process
// stands in line with a newer attempt (it gave that tenure up: a renewal's reply was lost past
// its lease, and its give-back is on its way): the copy neither lengthens the key nor takes
// the process out of line, and the give-back grants the key to the newer attempt's process
// in its turn.
func TestStaleCopyOfTheHoldersTakeIsRefused(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		p, q := newProc(t, c, "pp-"), newProc(t, c, "pq-")
		lc := cfg(t, "staleheld")
		held, _ := p.lock(t, lc, true, 1)
		before := c.PTTL(ctx, lc.UniqueKey()).Val()
		newer, r := p.lock(t, lc, true, 1)
		if r.Outcome != processor.Held {
			t.Fatalf("the newer attempt = %+v, want held (by %s)", r, held)
		}
		q.lock(t, lc, true, 1) // behind p
		time.Sleep(5 * time.Millisecond)
		if r := p.lockWith(t, lc, held, true, 1); r.Outcome != processor.Settled {
			t.Fatalf("the copy of %s's take = %+v, want refused (its process waits with %s); entry now %q",
				held, r, newer, entryOf(t, c, lc, "pp-"))
		}
		if e := entryOf(t, c, lc, "pp-"); e != newer {
			t.Fatalf("the entry after the copy: %q, want %s", e, newer)
		}
		if after := c.PTTL(ctx, lc.UniqueKey()).Val(); after > before {
			t.Fatalf("the copy lengthened the key: %v, before it %v", after, before)
		}
	})
}

// A yield check that arrives after its process left the line (its number settled) changes
// nothing: it cannot give the key away again and put the process back in line.
func TestYieldCheckAfterLeaveIsRefused(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		a, b := newProc(t, c, "pa-"), newProc(t, c, "pb-")
		lc := cfg(t, "yieldleave")
		la, _ := a.lock(t, lc, true, 1)
		lb, _ := b.lock(t, lc, true, 1) // b in line
		check, next := a.locker(), a.locker()
		if _, err := a.Leave(ctx, lc, processor.LeaveRequest{Last: next}); err != nil {
			t.Fatal(err)
		}
		r, err := a.ExpandLease(ctx, lc, processor.RenewRequest{Locker: la, Yield: true, Check: check, Next: next, NextLease: lc.Lease(), NextTokens: 1})
		if err != nil || r.Outcome != processor.Settled {
			t.Fatalf("the yield check after leave = %+v, %v; want settled", r, err)
		}
		// (its leave let go of the key its process no longer wants: to pb-, first in line)
		if in := inspect(t, a, lc); in.Holder != lb || len(in.Waiting) != 0 {
			t.Fatalf("after the late yield check: %+v", in)
		}
	})
}

func TestRedisDown(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	p, _ := processor.NewRedisLockProcessor(c, processor.Options{Publish: true, Mark: "p1-"})
	lc := cfg(t, "down")
	_, err := p.Lock(context.Background(), lc, processor.LockRequest{Locker: "p1-1", Tokens: 1})
	var pe *dlerrors.RedisProcessError
	if !errors.As(err, &pe) || pe.Op != "lock" || pe.Key != lc.UniqueKey() || pe.Err == nil {
		t.Fatalf("err = %#v, want RedisProcessError naming op and key", err)
	}
}

func TestSideKeysShareTheSlot(t *testing.T) {
	for _, key := range []string{"DLOCK_T_order 42", "DLOCK_T_{user}7", "DLOCK_T_{x"} {
		for _, side := range []string{"fence", "line", "done:p-", "check:p-", "forced:p-", "want", "gap", "released"} {
			if s := domain.SideKey(key, side); domain.Slot(s) != domain.Slot(key) {
				t.Errorf("%q and %q hash to different slots", key, s)
			}
		}
	}
}

// No lock's key is a key kept beside another lock's: a target with a hash tag of its own that
// would name one (the lock key, a colon and a name) is refused, for every key the scripts
// keep, the mutex's and the lock family's, and a target beside them that names none is not.
func TestSideKeysAreNoLocksKey(t *testing.T) {
	lc, err := domain.NewDLockConfig("T", "{acct}a", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	keys := append([]string{processor.FenceKey(lc), processor.LineKey(lc), processor.DoneKey(lc, "p-"),
		processor.CheckKey(lc, "p-"), processor.ForcedKey(lc, "p-"), processor.RemovedKey(lc, "p-1"), processor.WantKey(lc),
		processor.FirstKey(lc), processor.GapKey(lc), processor.ReleaseChannel(lc)}, processor.SharedKeys(lc)...)
	for _, k := range keys {
		target, ok := strings.CutPrefix(k, "DLOCK_T_")
		if !ok {
			t.Fatalf("side key %q", k)
		}
		_, err := domain.NewDLockConfig("T", target, time.Second)
		if !errors.Is(err, dlerrors.ErrInvalidConfig) {
			t.Errorf("target %q, naming lock %q's key %q: %v; want ErrInvalidConfig", target, lc.UniqueKey(), k, err)
			continue
		}
		// (the refusal names what it refuses)
		if name, _, _ := strings.Cut(strings.TrimPrefix(k, lc.UniqueKey()+":"), ":"); !strings.Contains(err.Error(), " "+name+",") {
			t.Errorf("target %q: %v; want it to name %q among the refused", target, err, name)
		}
	}
	// (and a lock whose own keys beside it would be one's: {acct}a:shared's fencing counter
	// is {acct}a's read-write lock's)
	for _, target := range []string{"{acct}a:shared", "{acct}a:done", "{acct}a:check", "{acct}a:forced", "{acct}a:removed"} {
		if _, err := domain.NewDLockConfig("T", target, time.Second); !errors.Is(err, dlerrors.ErrInvalidConfig) {
			t.Errorf("target %q, whose keys beside it are lock %q's: %v; want ErrInvalidConfig", target, lc.UniqueKey(), err)
		}
	}
	for _, target := range []string{"{acct}a:fenced", "{acct}a:line:7", "{acct}:cart", "a:fence", "a:done:p-", "{acct}a:doner:p-", "{acct}:shared:doc7"} {
		if _, err := domain.NewDLockConfig("T", target, time.Second); err != nil {
			t.Errorf("target %q: %v; want it valid (no lock's key beside)", target, err)
		}
	}
}

func TestSplitLocker(t *testing.T) {
	for _, tc := range []struct{ in, owner, seq string }{
		{"10.0.0.1-42-abcdef-17", "10.0.0.1-42-abcdef-", "17"},
		{"p1-0", "p1-", "0"},
		{"p1-x", "p1-x", ""},
		{"p1-", "p1-", ""},
		{"plain", "plain", ""},
		{"p1-1234567890123456", "p1-1234567890123456", ""}, // too long for an exact number in Lua
	} {
		if owner, seq := processor.SplitLocker(tc.in); owner != tc.owner || seq != tc.seq {
			t.Errorf("SplitLocker(%q) = %q, %q; want %q, %q", tc.in, owner, seq, tc.owner, tc.seq)
		}
	}
}

// Nothing stays beyond a few leases: the fencing counter and the settled marks live two leases
// after the last write, the line's keys an entry's life.
func TestSideKeysExpire(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		a, b := newProc(t, c, "pa-"), newProc(t, c, "pb-")
		lc := cfg(t, "expire")
		la, _ := a.lock(t, lc, true, 1)
		b.lock(t, lc, true, 1)
		for k, limit := range map[string]time.Duration{
			processor.LineKey(lc): processor.EntryTTL(lc),
			processor.WantKey(lc): processor.EntryTTL(lc),
		} {
			if ttl := c.PTTL(ctx, k).Val(); ttl <= 0 || ttl > limit {
				t.Errorf("%s: PTTL %v, want in (0, %v]", k, ttl, limit)
			}
		}
		a.release(t, lc, la)
		for k, limit := range map[string]time.Duration{
			processor.FenceKey(lc):       processor.FenceTTL(lc),
			processor.DoneKey(lc, "pa-"): processor.DoneTTL(lc),
			lc.UniqueKey():               lc.Lease(), // granted to pb-
		} {
			if ttl := c.PTTL(ctx, k).Val(); ttl <= 0 || ttl > limit {
				t.Errorf("%s: PTTL %v, want in (0, %v]", k, ttl, limit)
			}
		}
		if n := c.Exists(ctx, processor.LineKey(lc), processor.WantKey(lc)).Val(); n != 0 {
			t.Errorf("the line's keys outlive its last entry (%d left)", n)
		}
		if processor.FenceTTL(lc) > 2*lc.Lease() || processor.DoneTTL(lc) > 2*lc.Lease() || processor.EntryTTL(lc) > max(lc.Lease(), 2*time.Second) {
			t.Error("a side key outlives its bound")
		}
	})
}

func TestParseMessage(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want processor.Message
		ok   bool
	}{
		{"R|a-1|0", processor.Message{Released: true, From: "a-1"}, true},
		{"R|a-1|250", processor.Message{Released: true, From: "a-1", Gap: 250 * time.Millisecond}, true},
		{"R|java-7|0", processor.Message{Released: true, From: "java-7"}, true},
		{"R|a-1", processor.Message{}, false},
		{"G|at=1700000000000000|a-1|b-7|1700000000000001", processor.Message{Granted: true, From: "a-1", Locker: "b-7", Token: 1700000000000001, At: 1700000000000000}, true},
		{"G|at=-3|a-1|b-7|1700000000000001", processor.Message{}, false},
		{"G|at=12|b-7|1", processor.Message{}, false},
		{"G|a-1|b-7|1700000000000001", processor.Message{Granted: true, From: "a-1", Locker: "b-7", Token: 1700000000000001}, true}, // (no time: to the releaser's process, or a version before it)
		{"G|a-1|b-7|x", processor.Message{}, false},
		{"G|b-7|1", processor.Message{}, false},
		{"F|life=60000|a-1", processor.Message{First: true, Life: time.Minute, From: "a-1"}, true},
		{"F|life=0|a-1", processor.Message{First: true, From: "a-1"}, true},                        // (the key was free)
		{"F|life=-1|a-1", processor.Message{First: true, Life: -1, From: "a-1"}, true},             // (no expiry: not known)
		{"F|a-1", processor.Message{First: true, Life: -1, From: "a-1"}, true},                     // (a version before it)
		{"F|java|thread-7", processor.Message{First: true, Life: -1, From: "java|thread-7"}, true}, // (another holder's value)
		{"F|life=x|a-1", processor.Message{}, false},
		{"P|a-7", processor.Message{}, false},
		{"a-1", processor.Message{}, false},
	} {
		got, ok := processor.ParseMessage(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ParseMessage(%q) = %+v %v", tc.in, got, ok)
		}
	}
}

func TestScriptName(t *testing.T) {
	c := srv.Client()
	defer c.Close()
	p := newProc(t, c, "pa-")
	if err := p.Preload(context.Background()); err != nil { // (else a fresh server's first call of each is an EVALSHA and an EVAL)
		t.Fatal(err)
	}
	var names []string
	c.AddHook(nameHook{&names})
	lc := cfg(t, "names")
	l, _ := p.lock(t, lc, false, 1)
	p.release(t, lc, l)
	_, _ = p.Leave(context.Background(), lc, processor.LeaveRequest{})
	c.Ping(context.Background())
	if got := strings.Join(names, " "); got != "lock release leave -" {
		t.Fatalf("names %q", got)
	}
}

type nameHook struct{ names *[]string }

func (h nameHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h nameHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h nameHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if n := processor.ScriptName(cmd.Args()); n != "" {
			*h.names = append(*h.names, n)
		} else if cmd.Name() == "ping" {
			*h.names = append(*h.names, "-")
		}
		return err
	}
}

// The arguments the Go side writes follow the one order the prelude declares (its table A):
// each name reads the next argument.
func TestArgsFollowThePreludesNames(t *testing.T) {
	src := processor.Sources()["prelude"]
	start := strings.Index(src, "local A = {")
	end := strings.Index(src[start:], "\n}")
	if start < 0 || end < 0 {
		t.Fatal("no table A in the prelude")
	}
	var names []string
	for _, line := range strings.Split(src[start:start+end], "\n")[1:] {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), " = ARGV[")
		if !ok {
			continue
		}
		if want := strconv.Itoa(len(names)+1) + "] or ''"; !strings.HasPrefix(rest, want) {
			t.Fatalf("%s reads ARGV[%s, want %s", name, rest, want)
		}
		names = append(names, name)
	}
	if got := processor.ArgNames(); !slices.Equal(got, names) {
		t.Fatalf("the Go side writes %v,\nthe prelude reads %v", got, names)
	}
}

// A release that grants the key gives back the tokens its holder did not use before it
// reserves the grantee's: the counter runs ahead of the clock only as far as holders use
// tokens.
func TestReleaseGivesUnusedTokensBackBeforeItGrants(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		a, b := newProc(t, c, "pa-"), newProc(t, c, "pb-")
		lc := cfg(t, "giveback")
		const many = 1_000_000_000 // a block far ahead of the clock (1000 s of µs)
		la, r := a.lock(t, lc, true, many)
		lb, _ := b.lock(t, lc, true, 1)
		g, err := a.Unlock(ctx, lc, processor.ReleaseRequest{Locker: la, Last: r.Token})
		if err != nil || g.Next != lb {
			t.Fatalf("release = %+v, %v; want granted to %s", g, err, lb)
		}
		if g.Token != r.Token+1 && g.Token >= r.Token+many {
			t.Fatalf("granted block starts at %d, after a's unused block (%d..%d): it was not given back", g.Token, r.Token, r.Token+many-1)
		}
	})
}

// Without notifications (no channel) nobody counts as listening: a grant goes only to an entry
// renewed within a third of its lease.
func TestGrantSkipsAStaleEntryWithoutNotifications(t *testing.T) {
	c := srv.Client() // real time
	defer c.Close()
	mk := func(mark string) *proc {
		p, err := processor.NewRedisLockProcessor(c, processor.Options{Publish: false, Mark: mark})
		if err != nil {
			t.Fatal(err)
		}
		return &proc{RedisLockProcessor: p, mark: mark}
	}
	a, b, d := mk("pa-"), mk("pb-"), mk("pd-")
	lc, _ := domain.NewDLockConfig("PROC", fresh("stale-quiet"), 300*time.Millisecond)
	slow, _ := lc.WithLease(10 * time.Second)
	la, _ := a.lock(t, slow, true, 1)
	b.lock(t, lc, true, 1)
	time.Sleep(processor.GrantFresh(lc) + 50*time.Millisecond)
	ld, _ := d.lock(t, slow, true, 1) // (fresh for seconds: a stall before the release does not make it stale too)
	if r := a.release(t, slow, la); r.Next != ld {
		t.Fatalf("release = %+v, want granted to %s (pb- stopped renewing its entry)", r, ld)
	}
}

// shardedClient returns a Cluster client over the one real server, all of whose slots it
// serves: Redis 7 serves sharded pub/sub (SPUBLISH, SSUBSCRIBE) outside a cluster too.
func shardedClient(tune ...func(*redis.ClusterOptions)) *redis.ClusterClient {
	o := &redis.ClusterOptions{
		ClusterSlots: func(context.Context) ([]redis.ClusterSlot, error) {
			return []redis.ClusterSlot{{Start: 0, End: 16383, Nodes: []redis.ClusterNode{{Addr: srv.Addr}}}}, nil
		},
	}
	for _, f := range tune {
		f(o)
	}
	return redis.NewClusterClient(o)
}

// On a Cluster client (sharded pub/sub: SPUBLISH, SSUBSCRIBE) a process that listens on its
// channel is heard, and a grant to it reaches it there (published by SPUBLISH: a PUBLISH goes
// to no sharded subscriber). (A Cluster client over the one server: Redis 7 serves sharded
// pub/sub outside a cluster too.)
func TestShardedChannelsAreHeard(t *testing.T) {
	srv.NeedReal(t)
	ctx := context.Background()
	cc := shardedClient()
	defer cc.Close()
	a, b := newProc(t, cc, "pa-"), newProc(t, cc, "pb-")
	if sharded, err := a.Sharded(ctx); err != nil || !sharded {
		t.Fatalf("Sharded = %v, %v; want sharded pub/sub on Redis 7", sharded, err)
	}
	lc := cfg(t, "sharded")
	la, _ := a.lock(t, lc, true, 1)
	ps := cc.SSubscribe(ctx, processor.ProcessChannel(lc, "pb-"))
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	lb, r := b.lock(t, lc, true, 1)
	if r.Outcome != processor.Held || !r.Seen.Heard {
		t.Fatalf("a process listening with SSUBSCRIBE waits with %+v, want heard", r)
	}
	if r := a.release(t, lc, la); r.Next != lb {
		t.Fatalf("release = %+v, want granted to %s", r, lb)
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	msg, err := ps.ReceiveMessage(rctx)
	if err != nil {
		t.Fatalf("the grant to %s was not heard on its sharded channel: %v", lb, err)
	}
	if m, _ := processor.ParseMessage(msg.Payload); !m.Granted || m.Locker != lb {
		t.Fatalf("heard %+v, want the grant to %s", m, lb)
	}
}

// On a Cluster client, whether release messages go by sharded pub/sub is asked of the master
// that serves the lock's key: with every other slot's master down, a lock on the live shard is
// taken, and the question asked of any master fails (as it did for every lock's first request
// when it went to any master: the first TryLock of a process failed with the dead master's
// error while the key's own shard was well).
func TestShardedIsAskedOfTheKeysMaster(t *testing.T) {
	srv.NeedReal(t)
	ctx := context.Background()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close() // (refused from now on)
	lc := cfg(t, "keysmaster")
	slot := domain.Slot(lc.UniqueKey())
	node := func(addr string) []redis.ClusterNode { return []redis.ClusterNode{{Addr: addr}} }
	var slots []redis.ClusterSlot // (the dead master first: the first of the client's masters)
	if slot > 0 {
		slots = append(slots, redis.ClusterSlot{Start: 0, End: slot - 1, Nodes: node(dead)})
	}
	if slot < 16383 {
		slots = append(slots, redis.ClusterSlot{Start: slot + 1, End: 16383, Nodes: node(dead)})
	}
	slots = append(slots, redis.ClusterSlot{Start: slot, End: slot, Nodes: node(srv.Addr)})
	cc := shardedClient(func(o *redis.ClusterOptions) {
		o.ClusterSlots = func(context.Context) ([]redis.ClusterSlot, error) { return slots, nil }
		o.ShardPicker = firstShard{} // a command naming no key goes to the dead master
		o.MaxRetries = -1
	})
	defer cc.Close()
	p, err := processor.NewRedisLockProcessor(cc, processor.Options{Publish: true, Mark: "pa-"})
	if err != nil {
		t.Fatal(err)
	}
	a := &proc{RedisLockProcessor: p, mark: "pa-"}
	if _, r := a.lock(t, lc, true, 1); r.Outcome != processor.Taken {
		t.Fatalf("a lock on the live shard beside a dead master: %+v", r)
	}
	if sharded, err := p.ShardedFor(ctx, lc.UniqueKey()); err != nil || !sharded {
		t.Fatalf("ShardedFor the key = %v, %v; want sharded pub/sub from the key's live master", sharded, err)
	}
	p2, err := processor.NewRedisLockProcessor(cc, processor.Options{Publish: true, Mark: "pb-"})
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(dead)
	if _, err := p2.Sharded(ctx); err == nil || !strings.Contains(err.Error(), ":"+port) {
		t.Fatalf("Sharded of any master = %v; want the dead master's refusal (%s serves all slots but the key's)", err, dead)
	}
}

// firstShard sends a Cluster client's commands that name no key to its first master.
type firstShard struct{}

func (firstShard) Next(int) int { return 0 }

// On a Cluster client whose user may not run COMMAND INFO, release messages go by plain
// pub/sub (which a Cluster serves too) rather than every request failing on the question.
func TestShardedFallsBackToPlainWithoutCommandInfo(t *testing.T) {
	srv.NeedReal(t)
	ctx := context.Background()
	admin := srv.Client()
	defer admin.Close()
	user := "nocmdinfo" + strconv.FormatInt(runs.Add(1), 10)
	if err := admin.Do(ctx, "acl", "setuser", user, "on", ">pw", "~*", "&*", "+@all", "-command").Err(); err != nil {
		t.Fatal(err)
	}
	defer admin.Do(ctx, "acl", "deluser", user)
	cc := shardedClient(func(o *redis.ClusterOptions) { o.Username, o.Password = user, "pw" })
	defer cc.Close()
	p, err := processor.NewRedisLockProcessor(cc, processor.Options{Publish: true, Mark: "pa-"})
	if err != nil {
		t.Fatal(err)
	}
	if sharded, err := p.Sharded(ctx); err != nil || sharded {
		t.Fatalf("Sharded = %v, %v; want plain pub/sub", sharded, err)
	}
	a := &proc{RedisLockProcessor: p, mark: "pa-"}
	if _, r := a.lock(t, cfg(t, "nocmdinfo"), true, 1); r.Outcome != processor.Taken {
		t.Fatalf("a lock by a user without COMMAND INFO: %+v", r)
	}
}

// A settle of an acquisition older than the owner's settled mark still makes the mark live a
// mark's life more: a late copy came, and others may follow it. (The mark's expiry is read
// as the server's absolute time and held against the client's clock before each request was
// sent, so no time a loaded machine takes between the script and the read counts; the lease
// is long enough that the mark outlives any pause here.)
func TestEverySettleLengthensTheMark(t *testing.T) {
	c := srv.Client() // real time
	defer c.Close()
	ctx := context.Background()
	a := newProc(t, c, "pa-")
	lc, err := cfg(t, "oldsettle").WithLease(10 * time.Second) // a mark's life of 20 s
	if err != nil {
		t.Fatal(err)
	}
	done := processor.DoneKey(lc, "pa-")
	la1, _ := a.lock(t, lc, false, 1)
	a.release(t, lc, la1)
	la2, _ := a.lock(t, lc, false, 1)
	a.release(t, lc, la2)
	// Each late request below comes 300 ms at least after the mark was last lengthened: a
	// settle that leaves the mark alone leaves it ending 300 ms at least before a mark's life
	// from the request.
	time.Sleep(300 * time.Millisecond)
	sent := time.Now()
	if _, err := a.Leave(ctx, lc, processor.LeaveRequest{Last: la1}); err != nil { // a late leave
		t.Fatal(err)
	}
	if ends, want := expiresAt(t, c, done), sent.Add(a.MarkLife(lc)).Truncate(time.Millisecond); ends.Before(want) {
		t.Fatalf("the settled mark ends at %v after a late settle sent at %v, want a mark's life (%v) from then at least (%v)", ends, sent, a.MarkLife(lc), want)
	}
	time.Sleep(300 * time.Millisecond)
	sent = time.Now()
	if r := a.lockWith(t, lc, la1, false, 1); r.Outcome != processor.Settled { // a late attempt
		t.Fatalf("a late copy of a settled attempt = %+v", r)
	}
	if ends, want := expiresAt(t, c, done), sent.Add(a.MarkLife(lc)).Truncate(time.Millisecond); ends.Before(want) {
		t.Fatalf("the settled mark ends at %v after a late attempt sent at %v, want a mark's life (%v) from then at least (%v)", ends, sent, a.MarkLife(lc), want)
	}
}

// expiresAt returns when key expires by the server's clock (PEXPIRETIME), which a
// redis-server started here shares with the test; it fails t if key is gone or never expires.
func expiresAt(t *testing.T, c *redis.Client, key string) time.Time {
	t.Helper()
	ms, err := c.PExpireTime(context.Background(), key).Result()
	if err != nil {
		t.Fatalf("PEXPIRETIME %s: %v", key, err)
	}
	if ms < 0 {
		t.Fatalf("PEXPIRETIME %s = %d: the key is gone (-2) or never expires (-1)", key, ms)
	}
	return time.UnixMilli(ms.Milliseconds())
}

// A waiting process that finds the key free and takes it leaves the line.
func TestWaiterThatTakesAFreeKeyLeavesTheLine(t *testing.T) {
	c := srv.Client() // real time
	defer c.Close()
	a, b := newProc(t, c, "pa-"), newProc(t, c, "pb-")
	lc, _ := domain.NewDLockConfig("PROC", fresh("freetake-"+t.Name()), 150*time.Millisecond)
	slow, _ := lc.WithLease(10 * time.Second)
	a.lock(t, lc, true, 1) // never renewed: it runs out
	lb, _ := b.lock(t, slow, true, 1)
	time.Sleep(lc.Lease() + 50*time.Millisecond)
	if r := b.lockWith(t, slow, lb, true, 1); r.Outcome != processor.Taken {
		t.Fatalf("the waiter's next ask on a free key = %+v, want taken", r)
	}
	if in := inspect(t, a, lc); len(in.Waiting) != 0 {
		t.Fatalf("line %v after pb- took the free key, want empty", in.Waiting)
	}
}

// A waiting attempt's answer (Seen.Fence) tells the grants made before it from those made
// after: every grant before carried a token at or below it, every grant after, one above —
// also when the holder reserved a block far ahead of the clock and used little of it (its
// release gives the rest back before the grant reserves its block).
func TestHeldAnswerTellsGrantsBeforeItFromGrantsAfter(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		a, b, d := newProc(t, c, "pa-"), newProc(t, c, "pb-"), newProc(t, c, "pd-")
		lc := cfg(t, "seen")
		const many = 1_000_000_000 // 1000 s of µs ahead of the clock
		// The counter ahead of the clock, every token of a block used: what comes next starts
		// there, and no clock hides a token one too high.
		ld, rd := d.lock(t, lc, true, many)
		if _, err := d.Unlock(ctx, lc, processor.ReleaseRequest{Locker: ld, Last: rd.Token + many - 1}); err != nil {
			t.Fatal(err)
		}
		la, r := a.lock(t, lc, true, many)
		lb, rb := b.lock(t, lc, true, 1)
		if rb.Outcome != processor.Held || rb.Seen.Fence < r.Token-1 {
			t.Fatalf("the waiter's answer = %+v, want held, at least the holding's first token less one, %d", rb, r.Token-1)
		}
		g, err := a.Unlock(ctx, lc, processor.ReleaseRequest{Locker: la, Last: r.Token}) // one token used
		if err != nil || g.Next != lb {
			t.Fatalf("release = %+v, %v; want granted to %s", g, err, lb)
		}
		if g.Token <= rb.Seen.Fence {
			t.Fatalf("the grant after the waiter's request carries %d, not above its answer's %d: taken for a grant that went unheard", g.Token, rb.Seen.Fence)
		}
		// pb- never hears its grant; the key runs out, pd- takes it with a block far ahead,
		// and pb- asks again: that grant came before this answer.
		c.Del(ctx, lc.UniqueKey())
		if _, rd := d.lock(t, lc, true, many); rd.Outcome != processor.Taken {
			t.Fatalf("pd- on the free key: %+v", rd)
		}
		if again := b.lockWith(t, lc, lb, true, 1); again.Outcome != processor.Held || again.Seen.Fence < g.Token {
			t.Fatalf("the waiter's next answer = %+v; want held, at or above the grant it missed (%d)", again, g.Token)
		}
	})
}

// A waiting attempt's answer (Seen.Fence) is never below Redis's clock as the request ran,
// even when the counter and the holding's first token are behind it: the process counts a
// grant's lease from that request plus the grant's time less Seen.Fence (domain.GrantedFrom),
// so a Fence below the clock would count the lease from after the grant.
func TestHeldAnswerIsNotBelowTheServersClock(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		a, b := newProc(t, c, "pa-"), newProc(t, c, "pb-")
		lc := cfg(t, "seen-clock")
		la, r := a.lock(t, lc, true, 1)
		defer a.release(t, lc, la)
		now, err := c.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		clock := uint64(now.UnixMicro())
		if r.Token > clock {
			t.Fatalf("the take's token %d is ahead of the clock %d", r.Token, clock)
		}
		if _, rb := b.lock(t, lc, true, 1); rb.Outcome != processor.Held || rb.Seen.Fence < clock {
			t.Fatalf("the waiter's answer = %+v, want held, at or above Redis's clock before it ran (%d)", rb, clock)
		}
	})
}

// A held answer's sighting is no higher than the holding's first token less one, when the
// counter runs ahead of the clock (set so here): a grant after a release that lowered the
// counter that far carries the holding's first token, and must read as one that came after.
func TestHeldAnswerIsBelowTheHoldingsFirstToken(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		a, b := newProc(t, c, "pa-"), newProc(t, c, "pb-")
		lc, _ := cfg(t, "seen-first").WithLease(10 * time.Second) // (a stall must not free the key before the waiter asks)
		now, err := c.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Set(ctx, processor.FenceKey(lc), strconv.FormatInt(now.UnixMicro()+1_000_000_000, 10), time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		la, r := a.lock(t, lc, true, 1)
		defer a.release(t, lc, la)
		if _, rb := b.lock(t, lc, true, 1); rb.Outcome != processor.Held || rb.Seen.Fence != r.Token-1 {
			t.Fatalf("the waiter's answer = %+v, want held, its sighting the holding's first token less one (%d)", rb, r.Token-1)
		}
	})
}

// A yield gives back the tokens its holder did not use before it reserves the grantee's, and
// says whether Redis hears the yielding process (here it does not listen).
func TestYieldGivesUnusedTokensBack(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		a, b := newProc(t, c, "pa-"), newProc(t, c, "pb-")
		lc := cfg(t, "yieldback")
		const many = 1_000_000_000
		la, r := a.lock(t, lc, true, many)
		lb, _ := b.lock(t, lc, true, 1)
		y, err := a.ExpandLease(ctx, lc, processor.RenewRequest{Locker: la, Last: r.Token, Yield: true, Check: a.locker(),
			Next: a.locker(), NextLease: lc.Lease(), NextTokens: 1})
		if err != nil || y.Outcome != processor.Yielded || y.Next != lb {
			t.Fatalf("yield = %+v, %v; want yielded to %s", y, err, lb)
		}
		if y.Token >= r.Token+many {
			t.Fatalf("granted block starts at %d, after pa-'s unused block (%d..%d)", y.Token, r.Token, r.Token+many-1)
		}
		if y.Seen.Heard {
			t.Fatalf("the yield answers %+v: heard, though pa- does not listen", y.Seen)
		}
	})
}

// Renewals keep the fencing counter and the holding's first token alive for as long as they
// renew, and a renewal that asks no tokens reserves none.
func TestRenewalsKeepTheCounter(t *testing.T) {
	c := srv.Client() // real time
	defer c.Close()
	ctx := context.Background()
	a := newProc(t, c, "pa-")
	// (a lease long enough that a loaded machine's stall between two renewals, up to 1.1 s, does
	// not end it; the renewals go on past the fencing keys' own life, two leases, by a lease)
	lc, _ := domain.NewDLockConfig("PROC", fresh("renewfence-"+t.Name()), 1500*time.Millisecond)
	la, r := a.lock(t, lc, false, 1)
	for end := time.Now().Add(processor.FenceTTL(lc) + lc.Lease()); time.Now().Before(end); {
		time.Sleep(lc.Lease() / 4)
		rr, err := a.ExpandLease(ctx, lc, processor.RenewRequest{Locker: la})
		if err != nil || rr.Outcome != processor.Renewed || rr.Token != 0 {
			t.Fatalf("renewal = %+v, %v; want renewed, no tokens", rr, err)
		}
	}
	for _, k := range []string{processor.FenceKey(lc), processor.FirstKey(lc)} {
		if c.Exists(ctx, k).Val() == 0 {
			t.Fatalf("%s expired while its holding renewed", k)
		}
	}
	if in := inspect(t, a, lc); in.Fence != r.Token {
		t.Fatalf("fence %d after renewals without tokens, want %d", in.Fence, r.Token)
	}
}

// A Cluster client whose slot map still names a master that died after the cluster moved the
// slot (a completed failover) sends a request there, finds it unreachable, and sends it once
// more to the master its reloaded map names: an attempt takes the key, a renewal renews, a
// release releases, each in one call. While the map names no other master the request fails
// as before, saying it was not sent (Unsent: nothing to give back), and what it did not reach
// is left as it was. (The old master is a proxy to the
// server, closed as a kill -9 closes it; the new one is the server itself.)
func TestClusterRequestFollowsAMovedSlot(t *testing.T) {
	srv.NeedReal(t)
	ctx := context.Background()
	direct := srv.Client()
	defer direct.Close()
	steps := []struct {
		name string
		do   func(p *proc, lc domain.DLockConfig, held string) (processor.Result, error)
		want processor.Outcome
	}{
		{"lock", func(p *proc, lc domain.DLockConfig, _ string) (processor.Result, error) {
			lc2, _ := domain.NewDLockConfig("PROC", fresh("moved-other"), time.Minute)
			return p.Lock(ctx, lc2, processor.LockRequest{Locker: p.locker()})
		}, processor.Taken},
		{"renew", func(p *proc, lc domain.DLockConfig, held string) (processor.Result, error) {
			return p.ExpandLease(ctx, lc, processor.RenewRequest{Locker: held})
		}, processor.Renewed},
		{"release", func(p *proc, lc domain.DLockConfig, held string) (processor.Result, error) {
			return p.Unlock(ctx, lc, processor.ReleaseRequest{Locker: held})
		}, processor.Released},
	}
	for _, move := range []bool{true, false} {
		for _, s := range steps {
			t.Run(fmt.Sprintf("%s/moved=%v", s.name, move), func(t *testing.T) {
				old, err := faultproxy.New(srv.Addr)
				if err != nil {
					t.Fatal(err)
				}
				defer old.Close()
				var master atomic.Value
				master.Store(old.Addr())
				cc := shardedClient(func(o *redis.ClusterOptions) {
					o.ClusterSlots = func(context.Context) ([]redis.ClusterSlot, error) {
						return []redis.ClusterSlot{{Start: 0, End: 16383, Nodes: []redis.ClusterNode{{Addr: master.Load().(string)}}}}, nil
					}
				})
				defer cc.Close()
				p := newProc(t, cc, "pa-")
				lc, err := domain.NewDLockConfig("PROC", fresh("moved-"+t.Name()), time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				held, r := p.lock(t, lc, false, 1) // through the old master
				if r.Outcome != processor.Taken {
					t.Fatalf("lock = %+v", r)
				}
				_ = old.Close() // the old master dies
				if move {
					master.Store(srv.Addr) // and the cluster has promoted the new one
				}
				var sent []string
				cc.AddHook(nameHook{&sent})
				r, err = s.do(p, lc, held)
				if !move {
					if err == nil || !processor.Unsent(err) {
						t.Fatalf("%s with the map on a dead master = %+v, %v; want an error that says it was not sent (no connection)", s.name, r, err)
					}
					if len(sent) != 1 {
						t.Fatalf("%s with the map on a dead master sent %v, want one request (no copy to the same dead master)", s.name, sent)
					}
					if got, _ := direct.Get(ctx, lc.UniqueKey()).Result(); got != held {
						t.Fatalf("key = %q after a request that reached nothing, want %q", got, held)
					}
					return
				}
				if err != nil || r.Outcome != s.want {
					t.Fatalf("%s after the slot moved = %+v, %v; want outcome %v", s.name, r, err, s.want)
				}
			})
		}
	}
}

// A Cluster client that cannot work is asked for few reloads of its topology, however many of
// the processor's requests fail: go-redis ends a reload that fails at once, with no pause
// before the next, so a reload asked for after every failed request, and every 10 ms while a
// request waits for the map to name a new master, sent CLUSTER SLOTS without bound while the
// Cluster was down, or to a server without Cluster. On such a server go-redis itself loads
// the map once per request (it has none); the processor adds at most one load per ReloadEvery.
// With a map that names a dead master (and no node answering), one request that waits for a
// new master asks for at most one load per ReloadEvery of its wait.
func TestClusterClientThatCannotWorkAsksForFewReloads(t *testing.T) {
	srv.NeedReal(t)
	ctx := context.Background()
	t.Run("server without Cluster", func(t *testing.T) {
		var slots atomic.Int64
		cc := redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: []string{srv.Addr},
			NewClient: func(o *redis.Options) *redis.Client {
				c := redis.NewClient(o)
				c.AddHook(slotsHook{&slots})
				return c
			},
		})
		defer cc.Close()
		p := newProc(t, cc, "pa-")
		lc, err := domain.NewDLockConfig("PROC", fresh("noncluster"), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		const n = 100
		began := time.Now()
		for range n {
			if r, err := p.Lock(ctx, lc, processor.LockRequest{Locker: p.locker()}); err == nil {
				t.Fatalf("lock through a Cluster client on a server without Cluster = %+v, want an error", r)
			}
		}
		// go-redis's own: one per request. The processor's: one per ReloadEvery while they ran
		// (counted from how long they took, so that a loaded machine changes the bound, not the
		// outcome: the code before sent one per request whatever the pace).
		most := int64(time.Since(began)/processor.ReloadEvery) + 2
		if got := slots.Load(); got-n > most {
			t.Fatalf("%d failed requests sent %d CLUSTER SLOTS in %v: %d beside go-redis's one per request, want at most %d", n, got, time.Since(began).Round(time.Millisecond), got-n, most)
		}
	})
	t.Run("dead master", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		dead := l.Addr().String()
		_ = l.Close()
		var loads atomic.Int64
		var down atomic.Bool
		cc := shardedClient(func(o *redis.ClusterOptions) {
			o.ClusterSlots = func(context.Context) ([]redis.ClusterSlot, error) {
				loads.Add(1)
				if down.Load() {
					return nil, errors.New("no node answers")
				}
				return []redis.ClusterSlot{{Start: 0, End: 16383, Nodes: []redis.ClusterNode{{Addr: dead}}}}, nil
			}
		})
		defer cc.Close()
		// (Without Publish: the request is sent without asking the server about sharded
		// pub/sub first.)
		p, err := processor.NewRedisLockProcessor(cc, processor.Options{Mark: "pa-"})
		if err != nil {
			t.Fatal(err)
		}
		lc, err := domain.NewDLockConfig("PROC", fresh("deadmaster"), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cc.MasterForKey(ctx, lc.UniqueKey()); err != nil { // the map loaded
			t.Fatal(err)
		}
		down.Store(true)
		loads.Store(0)
		began := time.Now()
		r, err := p.Lock(ctx, lc, processor.LockRequest{Locker: "pa-1"})
		if err == nil {
			t.Fatalf("lock with the map on a dead master = %+v, want an error", r)
		}
		// It waits about a second (processor.ReloadWait) for a new master: the code before asked
		// every 10 ms of it.
		if most := int64(time.Since(began)/processor.ReloadEvery) + 2; loads.Load() > most {
			t.Fatalf("a request that waited for a new master asked for %d loads, want at most %d", loads.Load(), most)
		}
	})
}

// slotsHook counts the CLUSTER SLOTS a node's client sends.
type slotsHook struct{ n *atomic.Int64 }

func (h slotsHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h slotsHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h slotsHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.FullName() == "cluster slots" {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

// A fencing counter that holds what no script writes stops every writing script before it
// writes: the holder's renewal and release, the waiter's leave and lock (each also naming a
// release of its process retried, which the prelude may mark removed), an operator's force
// each answer the refusal, and every key of the lock is left as it was (no value changed, no
// time to live lengthened), with a holder and a process in line. Inspect, which writes
// nothing, refuses it too rather than show it.
func TestCorruptCounterRefusesBeforeAnyWrite(t *testing.T) {
	srv.NeedReal(t)
	// (2^53 - 2^30 is a whole number, but leaves no room for the largest block a request may
	// reserve: a script would hand out tokens past 2^53.)
	for _, v := range []string{"abc", "9007198180999168"} {
		t.Run(v, func(t *testing.T) { corruptCounterRefuses(t, v) })
	}
}

func corruptCounterRefuses(t *testing.T, v string) {
	c := srv.Client()
	defer c.Close()
	ctx := context.Background()
	lc, _ := domain.NewDLockConfig("PROC", fresh("corrupt-"+v+t.Name()), time.Minute)
	a, b, la, lb := heldWithOneInLine(t, c, lc, v)
	type state struct {
		dump string
		pttl time.Duration
	}
	snapshot := func() map[string]state {
		keys, err := c.Keys(ctx, "*"+lc.UniqueKey()+"*").Result()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]state{}
		for _, k := range keys {
			out[k] = state{c.Dump(ctx, k).Val(), c.PTTL(ctx, k).Val()}
		}
		return out
	}
	before := snapshot()
	for _, op := range []struct {
		name string
		do   func() (processor.Result, error)
	}{
		{"renew", func() (processor.Result, error) {
			return a.ExpandLease(ctx, lc, processor.RenewRequest{Locker: la})
		}},
		{"renew with tokens", func() (processor.Result, error) {
			return a.ExpandLease(ctx, lc, processor.RenewRequest{Locker: la, Tokens: 8})
		}},
		{"release", func() (processor.Result, error) {
			return a.Unlock(ctx, lc, processor.ReleaseRequest{Locker: la})
		}},
		{"lock again", func() (processor.Result, error) {
			return b.Lock(ctx, lc, processor.LockRequest{Locker: lb, Wait: true, Tokens: 1})
		}},
		{"leave", func() (processor.Result, error) {
			return b.Leave(ctx, lc, processor.LeaveRequest{Last: lb})
		}},
		{"force", func() (processor.Result, error) { return b.ForceRelease(ctx, lc, la) }},
		// (each naming a release of its process retried, whose holding the key does not hold:
		// the mark of it as removed is a write too)
		{"renew naming a release retried", func() (processor.Result, error) {
			return a.ExpandLease(ctx, lc, processor.RenewRequest{Locker: la, Unreleased: []processor.Unreleased{{Locker: "pa-0"}}})
		}},
		{"release naming a release retried", func() (processor.Result, error) {
			return a.Unlock(ctx, lc, processor.ReleaseRequest{Locker: la, Unreleased: []processor.Unreleased{{Locker: "pa-0"}}})
		}},
		{"lock naming a release retried", func() (processor.Result, error) {
			return b.Lock(ctx, lc, processor.LockRequest{Locker: lb, Wait: true, Tokens: 1, Unreleased: []processor.Unreleased{{Locker: "pb-0"}}})
		}},
		{"leave naming a release retried", func() (processor.Result, error) {
			return b.Leave(ctx, lc, processor.LeaveRequest{Last: lb, Unreleased: []processor.Unreleased{{Locker: "pb-0"}}})
		}},
		{"inspect", func() (processor.Result, error) { _, err := b.Inspect(ctx, lc); return processor.Result{}, err }},
	} {
		r, err := op.do()
		if err == nil || !processor.Refused(err) || !strings.Contains(err.Error(), "fencing counter") {
			t.Fatalf("%s with a corrupt counter = %+v, %v; want the refusal naming the counter", op.name, r, err)
		}
		after := snapshot()
		if len(after) != len(before) {
			t.Fatalf("%s: keys %v, before %v", op.name, after, before)
		}
		for k, s := range before {
			if got, ok := after[k]; !ok || got.dump != s.dump || got.pttl > s.pttl {
				t.Fatalf("%s changed %s: %+v, before %+v", op.name, k, got, s)
			}
		}
	}
}

// heldWithOneInLine has process pa- take lc's key and pb- stand in line for it, then sets
// the fencing counter to counter (keeping its life).
func heldWithOneInLine(t *testing.T, c *redis.Client, lc domain.DLockConfig, counter string) (a, b *proc, la, lb string) {
	t.Helper()
	a, b = newProc(t, c, "pa-"), newProc(t, c, "pb-")
	la, r := a.lock(t, lc, false, 1)
	if r.Outcome != processor.Taken {
		t.Fatalf("first lock: %+v", r)
	}
	lb, r = b.lock(t, lc, true, 1)
	if r.Outcome != processor.Held {
		t.Fatalf("second lock: %+v", r)
	}
	if err := c.Set(context.Background(), processor.FenceKey(lc), counter, redis.KeepTTL).Err(); err != nil {
		t.Fatal(err)
	}
	return a, b, la, lb
}

// A fencing counter one token short of the bound (2^53 - 2^30, set there by hand) leaves no
// room for a block: no script reserves one, since the counter it would write is one every
// script refuses (a holding that could neither renew nor release). A take and a renewal that
// asks for tokens are refused before they write anything; a renewal that asks for none and a
// release, which reserve nothing, go through, and rather than grant the key to the process in
// line the release leaves it free; a take whose block fits exactly gets the last token.
func TestFencingCounterWithNoRoomLeftReservesNothing(t *testing.T) {
	srv.NeedReal(t)
	const full = "9007198180999167" // 2^53 - 2^30 - 1
	c := srv.Client()
	defer c.Close()
	ctx := context.Background()
	lc := cfg(t, "full-fence")
	a, b, la, lb := heldWithOneInLine(t, c, lc, full)
	// room for two tokens, not for four; then for none
	for _, counter := range []string{"9007198180999165", full} {
		if err := c.Set(ctx, processor.FenceKey(lc), counter, redis.KeepTTL).Err(); err != nil {
			t.Fatal(err)
		}
		for _, op := range []struct {
			name string
			do   func() (processor.Result, error)
		}{
			{"renew with tokens", func() (processor.Result, error) {
				return a.ExpandLease(ctx, lc, processor.RenewRequest{Locker: la, Tokens: 4})
			}},
			{"lock again", func() (processor.Result, error) {
				return b.Lock(ctx, lc, processor.LockRequest{Locker: lb, Wait: true, Tokens: 4})
			}},
		} {
			if r, err := op.do(); !processor.Refused(err) || !strings.Contains(err.Error(), "fencing counter "+processor.FenceKey(lc)) {
				t.Fatalf("%s with the counter at %s = %+v, %v; want the refusal naming the counter", op.name, counter, r, err)
			}
			if got := c.Get(ctx, processor.FenceKey(lc)).Val(); got != counter {
				t.Fatalf("%s left the counter at %s", op.name, got)
			}
		}
	}
	if r, err := a.ExpandLease(ctx, lc, processor.RenewRequest{Locker: la}); err != nil || r.Outcome != processor.Renewed {
		t.Fatalf("a renewal asking for no tokens, with no room left = %+v, %v; want renewed", r, err)
	}
	if r := a.release(t, lc, la); r.Outcome != processor.Released || r.Next != "" {
		t.Fatalf("release with no room left = %+v; want released, granted to nobody", r)
	}
	if got := c.Get(ctx, lc.UniqueKey()).Val(); got != "" {
		t.Fatalf("the key holds %q after the release; want it free", got)
	}
	if got := c.Get(ctx, processor.FenceKey(lc)).Val(); got != full {
		t.Fatalf("the release left the counter at %s", got)
	}
	// room for exactly one: a take of one token gets the last
	if err := c.Set(ctx, processor.FenceKey(lc), "9007198180999166", redis.KeepTTL).Err(); err != nil {
		t.Fatal(err)
	}
	if r := b.lockWith(t, lc, lb, true, 1); r.Outcome != processor.Taken || r.Token != 9007198180999167 {
		t.Fatalf("a take of the last token = %+v; want taken with token 9007198180999167", r)
	}
}

// A reply whose code its script never gives (a script replaced by hand, or broken) is an
// error, a *RedisProcessError, never read as one of the outcomes: not held, gone, released
// (the lock family's shared.lua too).
func TestUnknownReplyCodeIsAnError(t *testing.T) {
	c := srv.Client()
	defer c.Close()
	ctx := context.Background()
	lc := cfg(t, "unknown-code")
	sem := processor.Shared{Kind: processor.KindSem, Permits: 3}
	for _, code := range []string{"7", "-9"} {
		p, err := processor.NewRedisLockProcessor(c, processor.Options{Mark: "pu-", Scripts: map[string]string{
			"lock": "return {" + code + ", 0}", "renew": "return {" + code + ", 0}",
			"release": "return {" + code + ", ''}", "leave": "return {" + code + "}",
			"shared": "return {" + code + ", {" + code + "}}",
		}})
		if err != nil {
			t.Fatal(err)
		}
		for name, f := range map[string]func() (processor.Result, error){
			"Lock": func() (processor.Result, error) { return p.Lock(ctx, lc, processor.LockRequest{Locker: "pu-1"}) },
			"ExpandLease": func() (processor.Result, error) {
				return p.ExpandLease(ctx, lc, processor.RenewRequest{Locker: "pu-1"})
			},
			"Unlock": func() (processor.Result, error) { return p.Unlock(ctx, lc, processor.ReleaseRequest{Locker: "pu-1"}) },
			"Leave":  func() (processor.Result, error) { return p.Leave(ctx, lc, processor.LeaveRequest{Last: "pu-1"}) },
			"SharedRenew": func() (processor.Result, error) {
				r, err := p.SharedRenew(ctx, lc, sem, "pu-1")
				return processor.Result{Outcome: r.Outcome}, err
			},
			"SharedRelease": func() (processor.Result, error) {
				r, err := p.SharedRelease(ctx, lc, sem, "pu-1")
				return processor.Result{Outcome: r.Outcome}, err
			},
			"SharedReleaseThenTake": func() (processor.Result, error) {
				r, err := p.SharedReleaseThenTake(ctx, lc, sem, "pu-1", 0, 0, 0, processor.TakeRequest{Locker: "pu-2", N: 1})
				return processor.Result{Outcome: r.Outcome}, err
			},
		} {
			var pe *dlerrors.RedisProcessError
			if r, err := f(); !errors.As(err, &pe) || !strings.Contains(err.Error(), "never gives") {
				t.Errorf("%s answered {%s, ...}: %+v, %v; want a *RedisProcessError", name, code, r, err)
			}
		}
	}
}

// A release names the holding its tenure began with (origin), as a renewal does: after an
// empty restart, a late copy of the holder's take that took the key anew under its locker
// (another process held it in between) is let go, and the release answers Gone — the loss
// Unlock must report, not a silent success.
func TestReleaseOfAHoldingTakenAnewIsALoss(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		a, b := newProc(t, c, "pa-"), newProc(t, c, "pb-")
		lc := cfg(t, "relorigin")
		older := a.locker() // an earlier acquisition of the process's, given up before
		req := processor.LockRequest{Locker: a.locker(), Tokens: 1}
		r, err := a.Lock(ctx, lc, req)
		if err != nil || r.Outcome != processor.Taken {
			t.Fatalf("take = %+v, %v", r, err)
		}
		wipeKeys(t, c, lc) // Redis restarts empty
		lb, rb := b.lock(t, lc, false, 1)
		if rb.Outcome != processor.Taken {
			t.Fatalf("pb- after the restart = %+v", rb)
		}
		if rel := b.release(t, lc, lb); rel.Outcome != processor.Released {
			t.Fatalf("pb- release = %+v", rel)
		}
		if again, err := a.Lock(ctx, lc, req); err != nil || again.Outcome != processor.Taken || again.Origin == r.Origin {
			t.Fatalf("the late copy = %+v, %v; want taken anew", again, err)
		}
		release := processor.ReleaseRequest{Locker: req.Locker, Last: r.Token, Origin: r.Origin}
		rel, err := a.Unlock(ctx, lc, release)
		if err != nil || rel.Outcome != processor.Gone {
			t.Fatalf("the tenure's release after its holding was wiped and taken anew by a late copy (pb- held in between) = %+v, %v; want Gone, as its renewal answers", rel, err)
		}
		// The key is let go (nobody waits: left free), and the acquisition is settled, with
		// every earlier one of its process: a copy of its take, or of an earlier take, takes
		// nothing.
		if v, err := c.Get(ctx, lc.UniqueKey()).Result(); err != redis.Nil {
			t.Fatalf("after the release that answered Gone the key holds %q (%v), want it let go", v, err)
		}
		for _, l := range []string{req.Locker, older} {
			if again, err := a.Lock(ctx, lc, processor.LockRequest{Locker: l, Tokens: 1}); err != nil || again.Outcome == processor.Taken {
				t.Fatalf("a copy of the take of %s after the release that answered Gone = %+v, %v; want it refused", l, again, err)
			}
		}
		// A copy of the release (go-redis sends a command again whose reply a broken
		// connection lost) answers Gone too: settled would read as let go, and hide the loss.
		if rel, err := a.Unlock(ctx, lc, release); err != nil || rel.Outcome != processor.Gone {
			t.Fatalf("a copy of that release = %+v, %v; want Gone, as the first", rel, err)
		}
	})
}

// Late copies after an empty restart never re-grant an acquisition that was granted, held and
// released before it: a copy of a holder's take takes the key anew under its old locker, and
// a copy of its relock (a release that stands in line again with next) — which, naming no
// origin, found the key its own, granted it on and stood the process in line with next (its
// settled mark wiped), for the next release to grant next the key again — finds the key taken
// anew, and stands nobody in line.
func TestRelockCopiesAfterAnEmptyRestartNeverRegrantASettledNext(t *testing.T) {
	c := srv.Client()
	defer c.Close()
	ctx := context.Background()
	a, b, x := newProc(t, c, "pa-"), newProc(t, c, "pb-"), newProc(t, c, "px-")
	lc := cfg(t, "relockrestart")
	take := processor.LockRequest{Locker: a.locker(), Wait: true, Tokens: 1}
	r, err := a.Lock(ctx, lc, take)
	if err != nil || r.Outcome != processor.Taken {
		t.Fatalf("take = %+v, %v", r, err)
	}
	lb, _ := b.lock(t, lc, true, 1)
	next := a.locker()
	rel := processor.ReleaseRequest{Locker: take.Locker, Last: r.Token, Origin: r.Origin, Next: next, NextLease: lc.Lease(), NextTokens: 1}
	if g, err := a.Unlock(ctx, lc, rel); err != nil || g.Next != lb || !g.Queued {
		t.Fatalf("relock = %+v, %v; want granted to %s, pa- in line with %s", g, err, lb, next)
	}
	if g := b.release(t, lc, lb); g.Next != next {
		t.Fatalf("pb- release = %+v, want granted to %s", g, next)
	}
	if g := a.release(t, lc, next); g.Outcome != processor.Released {
		t.Fatalf("pa- release of %s = %+v", next, g)
	}
	wipeKeys(t, c, lc) // Redis restarts empty
	if again, err := a.Lock(ctx, lc, take); err != nil || again.Outcome != processor.Taken {
		t.Fatalf("late copy of the take = %+v, %v", again, err)
	}
	lx, rx := x.lock(t, lc, true, 1)
	if rx.Outcome != processor.Held {
		t.Fatalf("px- = %+v, want in line", rx)
	}
	if _, err := a.Unlock(ctx, lc, rel); err != nil { // the late copy of the relock
		t.Fatal(err)
	}
	if e := entryOf(t, c, lc, "pa-"); e == next {
		g := x.release(t, lc, lx)
		t.Fatalf("pa- stands in line again with %s, which was granted, held and released before the restart; px-'s release then grants it: %+v", next, g)
	}
}

// Every client sends a script once; a request whose connection broke in the middle of the reply
// (a connection gone stale, a reset) is sent again by the processor, the same request, as
// go-redis would have — on a Cluster client at once, to the master the map names: the attempt
// that ran is answered as taken, in one call, and the key holds its locker. (On a Cluster a
// request that could not connect waits for the map to name another master instead:
// TestClusterRequestFollowsAMovedSlot.)
func TestRequestWhoseConnectionBrokeIsSentAgain(t *testing.T) {
	srv.NeedReal(t)
	ctx := context.Background()
	for _, kind := range []string{"plain", "Cluster"} {
		t.Run(kind, func(t *testing.T) {
			p, c, px, lc, direct := behindProxy(t, kind)
			var sent []string
			c.AddHook(nameHook{&sent})
			locker := p.locker()
			px.CutNextReply()
			r, err := p.Lock(ctx, lc, processor.LockRequest{Locker: locker})
			if err != nil || r.Outcome != processor.Taken {
				t.Fatalf("lock whose reply was cut = %+v, %v; want taken", r, err)
			}
			if len(sent) != 2 {
				t.Fatalf("sent %v, want the request twice (the copy after the broken connection)", sent)
			}
			if got, _ := direct.Get(ctx, lc.UniqueKey()).Result(); got != locker {
				t.Fatalf("key = %q, want %q", got, locker)
			}
		})
	}
}

// behindProxy returns a processor (mark "pa-") on a client of kind ("plain" or "Cluster", whose
// map names the proxy as the master of every slot) that reaches the server through a fault
// proxy, with a connection made and the lock script loaded, and a lock config of a minute's
// lease whose key is free; and a direct client of the server. All are closed with t.
func behindProxy(t *testing.T, kind string) (*proc, redis.UniversalClient, *faultproxy.Proxy, domain.DLockConfig, *redis.Client) {
	t.Helper()
	ctx := context.Background()
	direct := srv.Client()
	t.Cleanup(func() { direct.Close() })
	px, err := faultproxy.New(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	var c redis.UniversalClient = redis.NewClient(&redis.Options{Addr: px.Addr()})
	if kind == "Cluster" {
		c = shardedClient(func(o *redis.ClusterOptions) {
			o.ClusterSlots = func(context.Context) ([]redis.ClusterSlot, error) {
				return []redis.ClusterSlot{{Start: 0, End: 16383, Nodes: []redis.ClusterNode{{Addr: px.Addr()}}}}, nil
			}
		})
	}
	t.Cleanup(func() { c.Close() })
	p := newProc(t, c, "pa-")
	lc, err := domain.NewDLockConfig("PROC", fresh("proxied"), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Lock(ctx, lc, processor.LockRequest{Locker: p.locker()}); err != nil { // a connection made, and the script loaded
		t.Fatal(err)
	}
	if err := direct.Del(ctx, lc.UniqueKey()).Err(); err != nil {
		t.Fatal(err)
	}
	return p, c, px, lc, direct
}

// A request no copy of which ran (every try's dial refused, or the server declined to run it,
// as a replica does) fails as Unsent: its caller has nothing to give back. One whose first copy
// was written, and whose next could not connect, does not: that copy may have run (here it
// did); nor does one the script failed after it wrote.
func TestRequestNoCopyOfWhichRanIsUnsent(t *testing.T) {
	srv.NeedReal(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // (a hang fails)
	defer cancel()
	lc, err := domain.NewDLockConfig("PROC", fresh("unsent"), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		client redis.UniversalClient
	}{
		{"plain", redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})},
		{"no retries", redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})},
		{"Sentinel naming no master", redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "none", SentinelAddrs: []string{srv.Addr}})}, // (a server that is no Sentinel)
		{"Cluster", shardedClient(func(o *redis.ClusterOptions) {
			o.ClusterSlots = func(context.Context) ([]redis.ClusterSlot, error) {
				return []redis.ClusterSlot{{Start: 0, End: 16383, Nodes: []redis.ClusterNode{{Addr: "127.0.0.1:1"}}}}, nil
			}
		})},
	} {
		t.Run("no connection, "+tc.name, func(t *testing.T) {
			defer tc.client.Close()
			p, err := processor.NewRedisLockProcessor(tc.client, processor.Options{Publish: true})
			if err != nil {
				t.Fatal(err)
			}
			if r, err := p.Lock(ctx, lc, processor.LockRequest{Locker: "pa-1"}); err == nil || !processor.Unsent(err) {
				t.Fatalf("lock without a connection = %+v, %v; want an error that says it was not sent", r, err)
			}
		})
	}
	for _, tc := range []struct {
		name, script string
		unsent       bool
	}{
		{"declined: a replica", "if true then return redis.error_reply('READONLY You can\\'t write against a read only replica.') end\n", true},
		{"declined: too many clients", "if true then return redis.error_reply('ERR max number of clients reached') end\n", true},
		{"failed after a write", "redis.call('set', KEYS[1] .. ':x', 1)\nif true then return redis.error_reply('ERR failed') end\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := srv.Client()
			defer c.Close()
			p, err := processor.NewRedisLockProcessor(c, processor.Options{Publish: true,
				Scripts: map[string]string{"lock": tc.script + processor.Sources()["lock"]}})
			if err != nil {
				t.Fatal(err)
			}
			r, err := p.Lock(ctx, lc, processor.LockRequest{Locker: "pa-1"})
			if err == nil || processor.Unsent(err) != tc.unsent {
				t.Fatalf("lock = %+v, %v; want an error, Unsent %v", r, err, tc.unsent)
			}
		})
	}
	t.Run("written, then refused", func(t *testing.T) {
		p, c, px, lc, direct := behindProxy(t, "plain")
		c.AddHook(hookAfter(func(redis.Cmder, error) { px.Close() })) // (the next dial is refused)
		locker := p.locker()
		px.CutNextReply()
		r, err := p.Lock(ctx, lc, processor.LockRequest{Locker: locker})
		if err == nil || processor.Unsent(err) {
			t.Fatalf("lock whose first copy was written = %+v, %v; want an error that does not say it was not sent", r, err)
		}
		if got, _ := direct.Get(ctx, lc.UniqueKey()).Result(); got != locker {
			t.Fatalf("key = %q, want %q (the first copy ran)", got, locker)
		}
	})
}

// hookAfter is a hook that calls f after each command the client processes.
type hookAfter func(redis.Cmder, error)

func (h hookAfter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h hookAfter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h hookAfter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h(cmd, err)
		return err
	}
}

// A reply that says the server cannot run the request yet (TRYAGAIN here; CLUSTERDOWN, LOADING,
// READONLY, MASTERDOWN alike) is tried again after go-redis's back-off, on a plain client as on
// a Cluster client, as go-redis itself did: the request is taken in one call, the script run
// (and refused) twice before. (The lock script here refuses its first two runs.)
func TestRequestTheServerCannotRunYetIsSentAgain(t *testing.T) {
	srv.NeedReal(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // (a hang fails)
	defer cancel()
	direct := srv.Client()
	defer direct.Close()
	refuse := "if redis.call('incr', KEYS[1] .. ':runs') <= 2 then return redis.error_reply('TRYAGAIN not yet') end\n"
	for _, tc := range []struct {
		name   string
		client redis.UniversalClient
	}{
		{"plain", srv.Client()},
		{"Cluster", shardedClient()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer tc.client.Close()
			p, err := processor.NewRedisLockProcessor(tc.client, processor.Options{Publish: true,
				Scripts: map[string]string{"lock": refuse + processor.Sources()["lock"]}})
			if err != nil {
				t.Fatal(err)
			}
			lc, err := domain.NewDLockConfig("PROC", fresh("notyet"), time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			r, err := p.Lock(ctx, lc, processor.LockRequest{Locker: "pa-1"})
			if err != nil || r.Outcome != processor.Taken {
				t.Fatalf("lock refused twice = %+v, %v; want taken", r, err)
			}
			if n, _ := direct.Get(ctx, lc.UniqueKey()+":runs").Int(); n != 3 {
				t.Fatalf("the script ran %d times, want 3", n)
			}
		})
	}
}

// A replica runs a script without flags until its first write, which fails (READONLY), and
// lets a publish before that write go out. The scripts publish only after a write: each request
// that tells a process something (a grant, a wake-up, "someone waits"), sent to a replica that
// holds the same state, tells nobody (a grant told without its key written would hand the key
// to a process that does not have it), and fails as Unsent (declined: nothing of it changed
// Redis). The same request sent to the master then tells someone: each case can fail.
func TestRequestsOnAReplicaTellNobody(t *testing.T) {
	srv.NeedReal(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // (a hang fails)
	defer cancel()
	replica, err := redistest.StartReal()
	if err != nil {
		t.Fatal(err)
	}
	defer replica.Close()
	mc, rc := srv.Client(), replica.Client()
	defer mc.Close()
	defer rc.Close()
	if err := mc.ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err(); err != nil { // (no 5 s wait for more replicas)
		t.Fatal(err)
	}
	host, port, _ := strings.Cut(srv.Addr, ":")
	if err := rc.Do(ctx, "replicaof", host, port).Err(); err != nil {
		t.Fatal(err)
	}
	a, b, d := newProc(t, mc, "pa-"), newProc(t, mc, "pb-"), newProc(t, mc, "pc-")
	type request func(p *processor.RedisLockProcessor, lc domain.DLockConfig) error
	cases := []struct {
		name string
		mark string                              // the process that sends the request
		make func(lc domain.DLockConfig) request // builds the state on the master
	}{
		{"mutex release grants the first in line", "pa-", func(lc domain.DLockConfig) request {
			held, _ := a.lock(t, lc, false, 1)
			b.lock(t, lc, true, 1)
			return func(p *processor.RedisLockProcessor, lc domain.DLockConfig) error {
				_, err := p.Unlock(ctx, lc, processor.ReleaseRequest{Locker: held})
				return err
			}
		}},
		{"mutex leave passes a grant on", "pb-", func(lc domain.DLockConfig) request {
			held, _ := a.lock(t, lc, false, 1)
			lb, _ := b.lock(t, lc, true, 1)
			d.lock(t, lc, true, 1)
			if r := a.release(t, lc, held); r.Next != lb {
				t.Fatalf("release = %+v, want granted to %s", r, lb)
			}
			return func(p *processor.RedisLockProcessor, lc domain.DLockConfig) error {
				_, err := p.Leave(ctx, lc, processor.LeaveRequest{Last: lb})
				return err
			}
		}},
		{"semaphore release wakes who fits", "pa-", func(lc domain.DLockConfig) request {
			la := a.locker()
			a.take(t, lc, sem3, la, 3, true)
			b.take(t, lc, sem3, b.locker(), 2, true)
			return func(p *processor.RedisLockProcessor, lc domain.DLockConfig) error {
				_, err := p.SharedRelease(ctx, lc, sem3, la)
				return err
			}
		}},
		{"write release wakes a reader", "pa-", func(lc domain.DLockConfig) request {
			la := a.locker()
			a.take(t, lc, rw, la, processor.RWPermits, true)
			b.take(t, lc, rw, b.locker(), 1, true)
			return func(p *processor.RedisLockProcessor, lc domain.DLockConfig) error {
				_, err := p.SharedRelease(ctx, lc, rw, la)
				return err
			}
		}},
		{"a take in line tells the holders", "pb-", func(lc domain.DLockConfig) request {
			a.take(t, lc, sem3, a.locker(), 2, true)
			lb := b.locker()
			return func(p *processor.RedisLockProcessor, lc domain.DLockConfig) error {
				_, err := p.SharedTake(ctx, lc, sem3, processor.TakeRequest{Locker: lb, N: 2, Wait: true})
				return err
			}
		}},
		{"raised permits tell the holders", "pa-", func(lc domain.DLockConfig) request {
			a.take(t, lc, sem3, a.locker(), 3, true)
			b.take(t, lc, sem3, b.locker(), 1, true)
			return func(p *processor.RedisLockProcessor, lc domain.DLockConfig) error {
				return p.SetPermits(ctx, lc, 4)
			}
		}},
	}
	// told returns the first message on lc's channels that c's subscribers hear after send, or
	// "" when the first is the test's own end mark.
	told := func(c *redis.Client, lc domain.DLockConfig, send func()) string {
		sub := c.PSubscribe(ctx, processor.ReleaseChannel(lc)+"*")
		defer sub.Close()
		if _, err := sub.Receive(ctx); err != nil {
			t.Fatal(err)
		}
		send()
		end := processor.ReleaseChannel(lc) + ":end"
		if err := c.Publish(ctx, end, "-").Err(); err != nil {
			t.Fatal(err)
		}
		m, err := sub.ReceiveMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if m.Channel == end {
			return ""
		}
		return m.Channel + " " + m.Payload
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			lc, err := domain.NewDLockConfig("PROC", fresh("replica"), time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			send := c.make(lc)
			for {
				if n, err := mc.Do(ctx, "wait", 1, 1000).Int(); err != nil {
					t.Fatal(err)
				} else if n == 1 {
					break // (the replica has the state)
				}
			}
			before, err := mc.Dump(ctx, lc.UniqueKey()).Result()
			if err != nil && !errors.Is(err, redis.Nil) {
				t.Fatal(err)
			}
			onReplica, err := processor.NewRedisLockProcessor(rc, processor.Options{Publish: true, Mark: c.mark})
			if err != nil {
				t.Fatal(err)
			}
			if m := told(rc, lc, func() {
				if err := send(onReplica, lc); !strings.Contains(fmt.Sprint(err), "READONLY") || !processor.Unsent(err) {
					t.Errorf("sent to a replica: %v; want READONLY, Unsent", err)
				}
			}); m != "" {
				t.Fatalf("the replica told %q: a script published before its first write", m)
			}
			if after, _ := mc.Dump(ctx, lc.UniqueKey()).Result(); after != before {
				t.Fatal("the master's key changed")
			}
			onMaster, err := processor.NewRedisLockProcessor(mc, processor.Options{Publish: true, Mark: c.mark})
			if err != nil {
				t.Fatal(err)
			}
			if m := told(mc, lc, func() {
				if err := send(onMaster, lc); err != nil {
					t.Errorf("sent to the master: %v", err)
				}
			}); m == "" {
				t.Fatal("the master told nobody: the case tests nothing")
			}
		})
	}
}

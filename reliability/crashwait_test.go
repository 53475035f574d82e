package reliability_test

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/processor"
)

// A waiting process killed (kill -9) while it stands first in line costs the others nothing
// once Redis has seen its connection close: it listened on its channel when it last renewed its
// entry, and a release grants the key only to such a process if it listens still — however
// fresh its entry. Killed just before the release (as soon as Redis dropped its subscription)
// or a while before, it is passed over: the next process in line gets the key at the release.
// (A release that runs before Redis sees the connection close grants it the key, which then
// waits out its lease: what a crashed holder costs.)
func TestCrashedWaiterCostsAtMostALease(t *testing.T) {
	const lease = time.Second // the waiting processes' (the dead entry lives 2 s)
	for _, tc := range []struct {
		name  string
		pause time.Duration // between the kill and the release
	}{{"killed-just-before-the-release", 0}, {"killed-a-while-before", lease/3 + 200*time.Millisecond}} {
		t.Run(tc.name, func(t *testing.T) {
			s := realServer(t)
			ga, _ := generator(t, s.Addr, dlock.WithDefaultLease(lease))
			gb, _ := generator(t, s.Addr, dlock.WithDefaultLease(lease))
			// The holder's lease is long: its holding must outlast the helper's start and the
			// waits below on a loaded machine, where a renewal of a short lease may come after
			// the lease ran out and leave the key free to whichever process asks first.
			la, _ := ga.GenWithLease("HOLD", "crashwait", 30*time.Second)
			lb, _ := gb.Gen("HOLD", "crashwait")
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			owned, err := la.Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			cmd, out := helper(t, "waiter", map[string]string{"ADDR": s.Addr, "LEASE": lease.String(), "TARGET": "crashwait"})
			expectLine(t, out, "waiting")
			var dead string
			waitUntil(t, func() bool {
				st, err := la.State(ctx)
				if err == nil && len(st.Waiting) == 1 {
					dead = st.Waiting[0]
				}
				return dead != ""
			})
			got := make(chan error, 1)
			go func() {
				o, err := lb.Lock(ctx)
				if err == nil {
					err = lb.Unlock(o)
				}
				got <- err
			}()
			waitUntil(t, func() bool { st, _ := la.State(ctx); return len(st.Waiting) == 2 })
			raw := redis.NewClient(&redis.Options{Addr: s.Addr})
			defer raw.Close()
			want := processor.WantKey(la.Config())
			waitUntil(t, func() bool { // its entry says it listens (it asked again once its subscription was confirmed)
				return strings.HasSuffix(raw.HGet(ctx, want, dead).Val(), "|1")
			})
			if err := cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()
			channel := processor.ProcessChannel(la.Config(), dead)
			waitUntil(t, func() bool { return raw.PubSubNumSub(ctx, channel).Val()[channel] == 0 })
			time.Sleep(tc.pause)
			if err := raw.ZScore(ctx, processor.LineKey(la.Config()), dead).Err(); err != nil { // (State leaves it out: a release passes it over)
				t.Fatalf("the killed process's place in line is gone before its time: %v", err)
			}
			if st, _ := la.State(ctx); slices.Contains(st.Waiting, dead) {
				t.Fatalf("State lists the killed process as waiting: %v", st.Waiting)
			}
			released := time.Now()
			if err := la.Unlock(owned); err != nil {
				t.Fatal(err)
			}
			after, _ := lb.State(ctx)
			select {
			case err := <-got:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the process behind the killed one never got the key")
			}
			t.Logf("FIGURE crashed_waiter %s: the next process waited %v after the release (lease %v); just after the release the key held %q",
				tc.name, time.Since(released).Round(time.Millisecond), lease, after.Holder)
			if after.Held() && !after.Mine {
				t.Fatalf("the release granted the key to %q, not to the live process behind a waiter killed %v before", after.Holder, tc.pause)
			}
		})
	}
}

// waitUntil polls cond until it holds, failing after a generous bound.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 20 s")
		}
	}
}

// The first waiting process and the holder both killed (kill -9): nobody releases, nobody is
// told; the key comes free when the holder's lease runs out. The process second in line asks
// once the key it saw held may have expired, and takes it then — not a third of its own
// entry's life later (here 40 s: its lease is 2 minutes), which is what a process further back
// behind a dead first one waited before.
func TestCrashedFirstWaiterAndHolderCostTheHoldersLease(t *testing.T) {
	// The holder's renewals have 750 ms to spare: a loaded machine may run them late, and a
	// holding that ran out before the kill left the key to a waiter, whichever asked first.
	const lease, waiterLease = 3 * time.Second, time.Second // (the dead entry lives 2 s)
	s := realServer(t)
	gb, _ := generator(t, s.Addr)
	lb, _ := gb.GenWithLease("HOLD", "crashboth", 2*time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	raw := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer raw.Close()
	holder, hout := helper(t, "holder", map[string]string{"ADDR": s.Addr, "LEASE": lease.String(), "TARGET": "crashboth", "FENCE": "{crashboth}:fence"})
	expectLine(t, hout, "token")
	go func() { // (its writes go on until it is killed: read them so that it never blocks)
		for hout.Scan() {
		}
	}()
	waiter, wout := helper(t, "waiter", map[string]string{"ADDR": s.Addr, "LEASE": waiterLease.String(), "TARGET": "crashboth"})
	expectLine(t, wout, "waiting")
	var first string
	waitUntil(t, func() bool {
		st, err := lb.State(ctx)
		if err == nil && len(st.Waiting) == 1 {
			first = st.Waiting[0]
		}
		return first != ""
	})
	want := processor.WantKey(lb.Config())
	waitUntil(t, func() bool { return strings.HasSuffix(raw.HGet(ctx, want, first).Val(), "|1") }) // it listens
	got := make(chan error, 1)
	go func() {
		o, err := lb.Lock(ctx)
		if err == nil {
			err = lb.Unlock(o)
		}
		got <- err
	}()
	waitUntil(t, func() bool { st, _ := lb.State(ctx); return len(st.Waiting) == 2 })
	for _, cmd := range []*exec.Cmd{waiter, holder} {
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
	}
	killed := time.Now()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the process second in line did not get the key within 20 s of the holder's death (holder's lease %v)", lease)
	}
	t.Logf("FIGURE crashed_first_and_holder: the second in line got the key %v after both were killed (holder's lease %v)", time.Since(killed).Round(time.Millisecond), lease)
}

// The holder and the first two waiting processes all killed (kill -9), as when every process
// but one goes at once: nobody releases, nobody tells the third in line that it is first now.
// It takes the key once the holder's lease runs out, as the second in line does behind one dead
// waiter — not a third of its own entry's life later (here 40 s: its lease is 2 minutes).
func TestCrashedHolderAndFirstTwoWaitersCostTheHoldersLease(t *testing.T) {
	// (the holder renews with 750 ms to spare on a loaded machine: see above)
	const lease, waiterLease = 3 * time.Second, time.Second
	s := realServer(t)
	gb, _ := generator(t, s.Addr)
	lb, _ := gb.GenWithLease("HOLD", "crashthree", 2*time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	raw := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer raw.Close()
	holder, hout := helper(t, "holder", map[string]string{"ADDR": s.Addr, "LEASE": lease.String(), "TARGET": "crashthree", "FENCE": "{crashthree}:fence"})
	expectLine(t, hout, "token")
	go func() { // (its writes go on until it is killed: read them so that it never blocks)
		for hout.Scan() {
		}
	}()
	want := processor.WantKey(lb.Config())
	killed := []*exec.Cmd{holder}
	for n := 1; n <= 2; n++ {
		waiter, wout := helper(t, "waiter", map[string]string{"ADDR": s.Addr, "LEASE": waiterLease.String(), "TARGET": "crashthree"})
		expectLine(t, wout, "waiting")
		killed = append(killed, waiter)
		var waiting []string
		waitUntil(t, func() bool {
			st, err := lb.State(ctx)
			if err == nil {
				waiting = st.Waiting
			}
			return len(waiting) == n
		})
		waitUntil(t, func() bool { return strings.HasSuffix(raw.HGet(ctx, want, waiting[n-1]).Val(), "|1") }) // it listens
	}
	got := make(chan error, 1)
	go func() {
		o, err := lb.Lock(ctx)
		if err == nil {
			err = lb.Unlock(o)
		}
		got <- err
	}()
	waitUntil(t, func() bool { st, _ := lb.State(ctx); return len(st.Waiting) == 3 })
	for _, cmd := range killed {
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
	}
	at := time.Now()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the process third in line did not get the key within 20 s of the deaths of the holder and the two before it (holder's lease %v)", lease)
	}
	t.Logf("FIGURE crashed_first_two_and_holder: the third in line got the key %v after the others were killed (holder's lease %v)", time.Since(at).Round(time.Millisecond), lease)
}

// A holder killed (kill -9) while a process without notifications waits for the key: nobody
// releases, and the waiter, which Redis never heard listen, asks again at its own pace. It
// takes the key once the holder's lease runs out, as a listening one does — not a sixth of its
// own lease later (here 20 s: its lease is 2 minutes).
func TestCrashedHolderCostsAWaiterWithoutNotificationsTheHoldersLease(t *testing.T) {
	const lease = 3 * time.Second // (the holder renews with 750 ms to spare on a loaded machine: see above)
	s := realServer(t)
	gb, _ := generator(t, s.Addr, dlock.WithNotifications(false))
	lb, _ := gb.GenWithLease("HOLD", "crashquiet", 2*time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	holder, hout := helper(t, "holder", map[string]string{"ADDR": s.Addr, "LEASE": lease.String(), "TARGET": "crashquiet", "FENCE": "{crashquiet}:fence"})
	expectLine(t, hout, "token")
	go func() { // (its writes go on until it is killed: read them so that it never blocks)
		for hout.Scan() {
		}
	}()
	got := make(chan error, 1)
	go func() {
		o, err := lb.Lock(ctx)
		if err == nil {
			err = lb.Unlock(o)
		}
		got <- err
	}()
	waitUntil(t, func() bool { st, _ := lb.State(ctx); return len(st.Waiting) == 1 })
	if err := holder.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = holder.Wait()
	killed := time.Now()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the waiter without notifications did not get the key within 10 s of the holder's death (holder's lease %v)", lease)
	}
	t.Logf("FIGURE crashed_holder_quiet_waiter: the waiter got the key %v after the holder was killed (holder's lease %v)", time.Since(killed).Round(time.Millisecond), lease)
}

// relockerHelper takes the key again as soon as it lets it go (a worker loop: its releases
// relock), holding it HOLD each time; it says "unlocking" before each Unlock.
func relockerHelper(g *dlock.Generator) int {
	l, err := g.Gen("HOLD", env("TARGET"))
	if err != nil {
		fmt.Println("error", err)
		return 2
	}
	hold := envDuration("HOLD")
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		o, err := l.Lock(ctx)
		cancel()
		if err != nil {
			fmt.Println("error", err)
			return 2
		}
		st, _ := l.State(context.Background())
		fmt.Println("held", st.Holder)
		time.Sleep(hold)
		fmt.Println("unlocking")
		_ = l.Unlock(o)
	}
}

// A process whose goroutine takes the key again at once (relock: its release stands it in line
// again with a fresh acquisition) is killed (kill -9) while its release is on its way to Redis
// (here held up 200 ms by the network). Redis drops its subscription as its connection closes;
// then the release runs, grants the key to B, and stands the dead process in line. The release
// says that the process counts itself heard (processor.ReleaseRequest.Listening), and Redis does
// not hear it: its entry counts as renewed long ago, and B's next release passes it over rather
// than grant it the key for a lease.
// The kill may come before the release is sent (a loaded machine): an attempt that saw no
// entry of the dead process renewed long ago is made again, three times at most.
func TestCrashedRelockerWithItsReleaseOnItsWayIsPassedOver(t *testing.T) {
	for attempt := 1; ; attempt++ {
		if crashedRelocker(t) {
			return
		}
		if attempt == 3 {
			t.Fatal("in 3 attempts the relocker's release never ran after its death (no entry of it renewed long ago)")
		}
		t.Logf("attempt %d: the relocker's release did not run after its death; again", attempt)
	}
}

// crashedRelocker runs the scenario once, and reports whether the release ran after the
// kill and stood the dead process in line (its entry renewed long ago).
func crashedRelocker(t *testing.T) (exercised bool) {
	const lease = 3 * time.Second
	s := realServer(t)
	px := netProxy(t, s.Addr)
	px.SetLatencies(200*time.Millisecond, 0)
	gb, _ := generator(t, s.Addr, dlock.WithDefaultLease(lease))
	lb, _ := gb.Gen("HOLD", "huntrelock")
	raw := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer raw.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	cmd, out := helper(t, "relocker", map[string]string{"ADDR": px.Addr(), "LEASE": lease.String(), "TARGET": "huntrelock", "HOLD": "50ms"})
	holder := expectLine(t, out, "held")
	mark := strings.TrimRight(holder, "0123456789")

	// B takes the key in a loop, so that every release of the relocker grants it to B.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var bErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			o, err := lb.Lock(ctx)
			if err != nil {
				mu.Lock()
				bErr = err
				mu.Unlock()
				return
			}
			time.Sleep(20 * time.Millisecond)
			_ = lb.Unlock(o)
		}
	}()
	defer func() { close(stop); wg.Wait() }()

	// Let a few turns pass (the relocker relocks from its second release on), then kill it
	// while one of its releases is on its way.
	for range 4 {
		expectLine(t, out, "held")
	}
	expectLine(t, out, "unlocking")
	time.Sleep(30 * time.Millisecond)
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	killed := time.Now()
	channel := processor.ProcessChannel(lb.Config(), mark)
	key := lb.Config().UniqueKey()
	want := processor.WantKey(lb.Config())
	leftDead := false
	for time.Since(killed) < 2*lease {
		h := raw.Get(ctx, key).Val()
		if !strings.HasPrefix(h, mark) {
			leftDead = true // the dead process's release ran (or its key expired)
		} else if leftDead {
			t.Fatalf("%v after the relocker %s was killed (Redis saw its subscription gone: %d subscribers), the key was granted to it again: %q (PTTL %v); its entry was %q",
				time.Since(killed).Round(time.Millisecond), mark, raw.PubSubNumSub(ctx, channel).Val()[channel], h, raw.PTTL(ctx, key).Val(), raw.HGet(ctx, want, mark).Val())
		}
		if e := raw.HGet(ctx, want, mark).Val(); e != "" {
			t.Logf("%v after the kill: the dead process stands in line: %q", time.Since(killed).Round(time.Millisecond), e)
			exercised = exercised || renewedLongAgo(e)
		}
		time.Sleep(2 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if bErr != nil {
		t.Fatal(bErr)
	}
	return exercised
}

// renewedLongAgo reports whether e, a value of a line's want hash ("<locker>|<lease>|<tokens>|
// <renewed>|<expires>|<listened>"), says its entry was renewed as of long ago (0): written
// by a request of a process that said it listens, which Redis did not hear.
func renewedLongAgo(e string) bool {
	f := strings.Split(e, "|")
	return len(f) >= 6 && f[len(f)-3] == "0"
}

// A waiting process that listens on its channel asks again (its poll); Redis is slow to get the
// request (held up 400 ms on the way), so its client gives up reading after its ReadTimeout
// and sends the script again (go-redis retries a read timeout). The process is killed with
// both copies on their way: Redis drops its subscription first, then runs the two copies. Each
// says that the process counts itself heard (processor.LockRequest.Listening), and Redis does
// not hear it: its entry stays renewed as of long ago, and the holder's release passes the dead
// process over.
// The kill may come after the copies ran (a loaded machine): an attempt whose dead
// process's entry was not renewed long ago is made again, three times at most.
func TestCrashedWaiterWithItsAskAndItsClientsCopyOnTheirWayIsPassedOver(t *testing.T) {
	for attempt := 1; ; attempt++ {
		if crashedWaiterWithCopies(t) {
			return
		}
		if attempt == 3 {
			t.Fatal("in 3 attempts the waiter's ask and its copy never ran after its death (its entry never renewed long ago)")
		}
		t.Logf("attempt %d: the ask and its copy ran before the death; again", attempt)
	}
}

// crashedWaiterWithCopies runs the scenario once, and reports whether the copies ran after
// Redis dropped the subscription (the entry renewed long ago).
func crashedWaiterWithCopies(t *testing.T) (exercised bool) {
	const lease = 3 * time.Second
	s := realServer(t)
	px := netProxy(t, s.Addr)
	var mu sync.Mutex
	evals := 0
	both := make(chan struct{})
	px.SetShaper(func(toTarget bool, chunk []byte) time.Duration {
		if !toTarget || !strings.Contains(strings.ToLower(string(chunk)), "evalsha") {
			return 0
		}
		mu.Lock()
		defer mu.Unlock()
		evals++
		switch {
		case evals < 3: // its first ask, and the one once subscribed (its entry then says it listens)
			return 0
		case evals == 4: // the client's copy of the third
			close(both)
		}
		return 400 * time.Millisecond
	})
	ga, _ := generator(t, s.Addr, dlock.WithDefaultLease(lease))
	la, _ := ga.Gen("HOLD", "huntcopy")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	owned, err := la.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	raw := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer raw.Close()
	cmd, out := helper(t, "waiter", map[string]string{"ADDR": px.Addr(), "LEASE": lease.String(), "TARGET": "huntcopy", "READTIMEOUT": "100ms"})
	expectLine(t, out, "waiting")
	want := processor.WantKey(la.Config())
	var dead string
	waitUntil(t, func() bool {
		st, err := la.State(ctx)
		if err == nil && len(st.Waiting) == 1 {
			dead = st.Waiting[0]
		}
		return dead != "" && strings.HasSuffix(raw.HGet(ctx, want, dead).Val(), "|1")
	})
	select {
	case <-both:
	case <-time.After(30 * time.Second):
		t.Fatal("the waiter's third ask and its copy never came")
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	channel := processor.ProcessChannel(la.Config(), dead)
	waitUntil(t, func() bool { return raw.PubSubNumSub(ctx, channel).Val()[channel] == 0 })
	time.Sleep(time.Second) // both copies have run by now
	entry := raw.HGet(ctx, want, dead).Val()
	if err := la.Unlock(owned); err != nil {
		t.Fatal(err)
	}
	if h := raw.Get(ctx, la.Config().UniqueKey()).Val(); strings.HasPrefix(h, dead) {
		t.Fatalf("the release granted the key to %q, a waiter killed (Redis dropped its subscription) with its ask and its client's copy on their way; its entry then: %q (PTTL %v)",
			h, entry, raw.PTTL(ctx, la.Config().UniqueKey()).Val())
	}
	t.Logf("passed over; its entry was %q", entry)
	return renewedLongAgo(entry)
}

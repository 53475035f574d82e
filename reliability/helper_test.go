package reliability_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/dlock"
)

// The test binary runs itself as helper processes (real OS processes) with
// DLOCK_RELIABILITY_HELPER set to a mode and its parameters in DLOCK_H_* variables.

func env(name string) string { return os.Getenv("DLOCK_H_" + name) }

func envInt(name string) int {
	n, _ := strconv.Atoi(env(name))
	return n
}

func envDuration(name string) time.Duration {
	d, _ := time.ParseDuration(env(name))
	return d
}

func runHelper(mode string) int {
	ropts := &redis.Options{Addr: env("ADDR")}
	if env("READTIMEOUT") != "" {
		ropts.ReadTimeout = envDuration("READTIMEOUT")
	}
	c := redis.NewClient(ropts)
	defer c.Close()
	opts := []dlock.Option{dlock.WithDefaultLease(envDuration("LEASE"))}
	if env("NOTIFY") == "off" {
		opts = append(opts, dlock.WithNotifications(false))
	}
	if env("HOLDOVER") == "true" {
		opts = append(opts, dlock.WithHoldOver(true))
	}
	g, err := dlock.NewGenerator(c, opts...)
	if err != nil {
		fmt.Println("error", err)
		return 2
	}
	defer g.Close(context.Background())
	switch mode {
	case "soak":
		return soakHelper(g, c)
	case "holder":
		return holderHelper(g, c)
	case "history":
		return historyHelper(g, c)
	case "distance":
		return distanceHelper(g, c)
	case "pausedpair":
		return pausedPairHelper(g)
	case "waiter":
		return waiterHelper(g)
	case "family":
		return familyHelper(g)
	case "familywaiter":
		return familyWaiterHelper(g)
	case "churner":
		return churnerHelper(g, c)
	case "relocker":
		return relockerHelper(g)
	}
	fmt.Println("unknown mode", mode)
	return 2
}

// soakResult is what a soak helper reports.
type soakResult struct {
	Acquisitions int64 `json:"acquisitions"`
	Losses       int64 `json:"losses"` // holdings whose loss, or late release, the library told (a starved process)
	Writes       int64 `json:"writes"` // counter writes the fenced counter took
	Overlaps     int64 `json:"overlaps"`
	Stuck        int64 `json:"stuck"`
	Errors       int64 `json:"errors"`
}

// soakStep is the soak's fenced read-modify-write of a counter (KEYS[2]), fenced by KEYS[1]:
// with a token (ARGV[1]) lower than the highest that read or wrote it, it does nothing and
// returns -1 (a holder whose lease ran out does not write over a later holder's count); with
// a value (ARGV[2]) it writes the counter and returns 1, else it returns the counter.
var soakStep = redis.NewScript(`
if tonumber(ARGV[1]) < tonumber(redis.call('get', KEYS[1]) or '0') then return -1 end
redis.call('set', KEYS[1], ARGV[1])
if ARGV[2] then redis.call('set', KEYS[2], ARGV[2]) return 1 end
return tonumber(redis.call('get', KEYS[2]) or '0')`)

// soakHelper runs GOROUTINES goroutines for DURATION over KEYS keys of TARGET. Inside the lock:
// a fenced read, pause and write of a counter (soakStep). A holder whose step was refused (a
// later token came in meanwhile) and that still holds by its clock after that was an owner at
// once with another: an overlap. One whose lease ran out (a starved process) and that was told
// so is no overlap: the library gave the key on after its lease, as it must; its steps run to
// their end all the same (nothing is left half-done for later holders to trip on). A Lock that
// waits WAIT (far longer than any critical section) counts as stuck.
func soakHelper(g *dlock.Generator, c *redis.Client) int {
	var res soakResult
	var wg sync.WaitGroup
	end := time.Now().Add(envDuration("DURATION"))
	keys, wait := envInt("KEYS"), envDuration("WAIT")
	for i := 0; i < envInt("GOROUTINES"); i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				k := env("TARGET") + "-" + strconv.Itoa(rand.IntN(keys))
				l, err := g.Gen("SOAK", k)
				if err != nil {
					atomic.AddInt64(&res.Errors, 1)
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), wait)
				err = l.Do(ctx, func(owned context.Context) error {
					bg := context.WithoutCancel(owned)
					tok, _ := l.FencingToken(owned) // (0 once lost: its steps are refused)
					step := []string{"{" + k + "}:fence", "{" + k + "}:counter"}
					v, err := soakStep.Run(bg, c, step, tok).Int64()
					if err != nil {
						atomic.AddInt64(&res.Errors, 1)
						fmt.Fprintln(os.Stderr, "soak helper:", err)
						return nil
					}
					time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
					wrote := v >= 0 && soakStep.Run(bg, c, step, tok, v+1).Val() == int64(1)
					if wrote {
						atomic.AddInt64(&res.Writes, 1)
					} else if _, live := l.FencingToken(owned); live { // (asked last, by the clock: live now, so live since it was granted)
						atomic.AddInt64(&res.Overlaps, 1)
					}
					return nil
				})
				cancel()
				var late *dlock.RedisProcessError
				switch {
				case err == nil:
					atomic.AddInt64(&res.Acquisitions, 1)
				case errors.Is(err, dlock.ErrLockLost):
					atomic.AddInt64(&res.Losses, 1)
				case errors.As(err, &late) && errors.Is(err, context.DeadlineExceeded):
					atomic.AddInt64(&res.Losses, 1) // (its release's reply came after its lease ran out: a starved process)
				case errors.Is(err, context.DeadlineExceeded):
					atomic.AddInt64(&res.Stuck, 1)
				default:
					atomic.AddInt64(&res.Errors, 1)
					fmt.Fprintln(os.Stderr, "soak helper:", err)
				}
			}
		}()
	}
	wg.Wait()
	b, _ := json.Marshal(res)
	fmt.Println(string(b))
	return 0
}

// holderHelper takes TARGET, prints "token N", then every 5 ms writes its token to the fenced
// store (FENCE key) and prints what the store said, until its owner context ends; then it
// prints "lost <cause>" and "unlock <error>".
func holderHelper(g *dlock.Generator, c *redis.Client) int {
	l, err := g.Gen("HOLD", env("TARGET"))
	if err != nil {
		fmt.Println("error", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	owned, err := l.Lock(ctx)
	if err != nil {
		fmt.Println("error", err)
		return 2
	}
	token, _ := l.FencingToken(owned)
	fmt.Println("token", token)
	for owned.Err() == nil {
		ok := fencedWrite(context.Background(), c, env("FENCE"), token)
		fmt.Println("write", token, ok)
		time.Sleep(5 * time.Millisecond)
	}
	fmt.Println("lost", errors.Is(context.Cause(owned), dlock.ErrLockLost))
	fmt.Println("unlock", errors.Is(l.Unlock(owned), dlock.ErrLockLost))
	return 0
}

// familyHelper takes both permits of the semaphore FAMILY/TARGET-sem (of 2) and the write
// side of the read-write lock FAMILY/TARGET-rw, says "held", and holds them until killed.
func familyHelper(g *dlock.Generator) int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sem, rw, err := familyOf(g, env("TARGET"))
	if err != nil {
		fmt.Println("error", err)
		return 2
	}
	p, err := sem.Acquire(ctx, 2)
	if err != nil {
		fmt.Println("error", err)
		return 2
	}
	w, err := rw.Lock(ctx)
	if err != nil {
		fmt.Println("error", err)
		return 2
	}
	fmt.Println("held")
	<-ctx.Done()
	_, _ = p.Unlock(), w.Unlock()
	return 0
}

// familyOf returns the family helpers' locks of target: the semaphore FAMILY/target-sem of 2
// permits and the read-write lock FAMILY/target-rw.
func familyOf(g *dlock.Generator, target string) (*dlock.Semaphore, *dlock.RWLock, error) {
	sem, err := g.GenSemaphore("FAMILY", target+"-sem", 2)
	if err != nil {
		return nil, nil, err
	}
	rw, err := g.GenRW("FAMILY", target+"-rw")
	return sem, rw, err
}

// familyWaiterHelper waits for both permits of the semaphore FAMILY/TARGET-sem (of 2) and for
// the write side of the read-write lock FAMILY/TARGET-rw (to be killed while it waits).
func familyWaiterHelper(g *dlock.Generator) int {
	sem, rw, err := familyOf(g, env("TARGET"))
	if err != nil {
		fmt.Println("error", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fmt.Println("waiting")
	got := make(chan error, 2)
	go func() { _, err := sem.Acquire(ctx, 2); got <- err }()
	go func() { _, err := rw.Lock(ctx); got <- err }()
	for range 2 {
		if err := <-got; err != nil {
			fmt.Println("error", err)
			return 2
		}
	}
	fmt.Println("locked")
	return 0
}

// waiterHelper waits for the lock HOLD/TARGET (to be killed or stopped while it waits); once
// it has it, it says "locked <token> <monotonic ns>" and unlocks.
func waiterHelper(g *dlock.Generator) int {
	l, err := g.Gen("HOLD", env("TARGET"))
	if err != nil {
		fmt.Println("error", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fmt.Println("waiting")
	owned, err := l.Lock(ctx)
	if err != nil {
		fmt.Println("error", err)
		return 2
	}
	token, _ := l.FencingToken(owned)
	fmt.Println("locked", token, monoNow())
	_ = l.Unlock(owned)
	return 0
}

// fencedStore is a token-checking store kept in Redis: a write succeeds only if its token is
// not lower than the highest accepted so far.
var fencedStore = redis.NewScript(`
local last = tonumber(redis.call('get', KEYS[1]) or '0')
if tonumber(ARGV[1]) < last then return 0 end
redis.call('set', KEYS[1], ARGV[1])
return 1`)

func fencedWrite(ctx context.Context, c *redis.Client, key string, token uint64) bool {
	n, err := fencedStore.Run(ctx, c, []string{key}, strconv.FormatUint(token, 10)).Int()
	return err == nil && n == 1
}

// helper starts the test binary as a helper process in mode with the given parameters.
func helper(t *testing.T, mode string, params map[string]string) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "DLOCK_RELIABILITY_HELPER="+mode)
	for k, v := range params {
		cmd.Env = append(cmd.Env, "DLOCK_H_"+k+"="+v)
	}
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, bufio.NewScanner(out)
}

// expectLine reads lines until one starts with prefix and returns the rest.
func expectLine(t *testing.T, sc *bufio.Scanner, prefix string) string {
	t.Helper()
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), prefix); ok {
			return strings.TrimSpace(rest)
		}
	}
	t.Fatalf("helper ended without a %q line", prefix)
	return ""
}

// pausedPairPart returns the part of PAIR/TARGET that KIND names: the mutex ("mutex"), the
// read side of the read-write lock ("read"), a permit of the semaphore of one ("permit").
func pausedPairPart(g *dlock.Generator, kind, target string) (dlock.Part, error) {
	switch kind {
	case "read":
		rw, err := g.GenRW("PAIR", target)
		if err != nil {
			return nil, err
		}
		return rw.ReadSide(), nil
	case "permit":
		sem, err := g.GenSemaphore("PAIR", target, 1)
		if err != nil {
			return nil, err
		}
		return sem.Permits(1), nil
	}
	return g.Gen("PAIR", target)
}

// pausedPairHelper: a goroutine takes the KIND part of PAIR/TARGET and says "held"; a second
// goroutine waits for the same part (the mutex and the permit: at once, behind the first; the
// read side: once the process wakes, when the first's read-hold could lend to it). The first
// sleeps in 1 ms steps; when a step took longer than the lease (the process was stopped), it
// says "woke" and unlocks at once, before anything else. The second says "locked <token>
// <monotonic ns>" when it has the part, and unlocks.
func pausedPairHelper(g *dlock.Generator) int {
	kind, lease := env("KIND"), envDuration("LEASE")
	l, err := pausedPairPart(g, kind, env("TARGET"))
	if err != nil {
		fmt.Println("error", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	owned, err := l.Lock(ctx)
	if err != nil {
		fmt.Println("error", err)
		return 2
	}
	fmt.Println("held")
	second := make(chan struct{})
	done := make(chan int)
	go func() {
		<-second
		o, err := l.Lock(ctx)
		if err != nil {
			fmt.Println("error", err)
			done <- 2
			return
		}
		token, _ := l.FencingToken(o)
		fmt.Println("locked", token, monoNow())
		_ = l.Unlock(o)
		done <- 0
	}()
	if kind != "read" {
		close(second)
	}
	for last := monoNow(); ; last = monoNow() {
		time.Sleep(time.Millisecond)
		if monoNow()-last > int64(lease) {
			break
		}
	}
	_ = l.Unlock(owned)
	if kind == "read" {
		close(second)
	}
	fmt.Println("woke")
	return <-done
}

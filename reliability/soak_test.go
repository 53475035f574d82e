package reliability_test

import (
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
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/dlock"
)

// Exclusion soak: P real OS processes × G goroutines on one key and on many keys, random
// critical sections with a read-modify-write on Redis and an overlap detector (soakHelper): a
// loss the library told (a 1 s lease that ran out on a starved machine) is no overlap; two
// owners at once are.
// Short by default; DLOCK_SOAK=10m runs each case ten minutes with 4 processes × 32 goroutines.
func TestExclusionSoak(t *testing.T) {
	s := realServer(t)
	d := soak(t, 3*time.Second)
	procs, goroutines := 3, 8
	if os.Getenv("DLOCK_SOAK") != "" {
		procs, goroutines = 4, 32
	}
	for _, keys := range []int{1, 16} {
		t.Run(fmt.Sprintf("keys=%d", keys), func(t *testing.T) {
			target := fmt.Sprintf("soak-%d-%d", keys, time.Now().UnixNano())
			var results []soakResult
			var helpers []func() soakResult
			var cmds []*exec.Cmd
			for p := 0; p < procs; p++ {
				cmd, out := helper(t, "soak", map[string]string{
					"ADDR": s.Addr, "LEASE": "1s", "TARGET": target, "KEYS": strconv.Itoa(keys),
					"GOROUTINES": strconv.Itoa(goroutines), "DURATION": d.String(), "WAIT": "30s",
				})
				cmds = append(cmds, cmd)
				helpers = append(helpers, func() soakResult {
					var r soakResult
					if err := json.Unmarshal([]byte("{"+expectLine(t, out, "{")), &r); err != nil {
						t.Fatal(err)
					}
					if err := cmd.Wait(); err != nil {
						t.Fatal(err)
					}
					return r
				})
			}
			// One process stopped past its lease mid-run, as a starved machine stops one: its
			// holder's lease runs out, another takes the key, and the holder is told on waking:
			// a loss, not an overlap.
			stop := cmds[0].Process
			time.Sleep(d / 3)
			_ = stop.Signal(syscall.SIGSTOP)
			time.Sleep(3 * time.Second / 2)
			_ = stop.Signal(syscall.SIGCONT)
			var total soakResult
			for _, h := range helpers {
				r := h()
				results = append(results, r)
				total.Acquisitions += r.Acquisitions
				total.Losses += r.Losses
				total.Writes += r.Writes
				total.Overlaps += r.Overlaps
				total.Stuck += r.Stuck
				total.Errors += r.Errors
			}
			c := s.Client()
			defer c.Close()
			var counted int64
			for k := 0; k < keys; k++ {
				n, _ := c.Get(context.Background(), "{"+target+"-"+strconv.Itoa(k)+"}:counter").Int64()
				counted += n
			}
			t.Logf("%d processes × %d goroutines, %d keys, %v: %d acquisitions, %d losses told, %d overlaps, %d stuck, %d errors; counter %d of %d writes",
				procs, goroutines, keys, d, total.Acquisitions, total.Losses, total.Overlaps, total.Stuck, total.Errors, counted, total.Writes)
			if total.Overlaps != 0 || total.Stuck != 0 || total.Errors != 0 {
				t.Fatalf("per process: %+v", results)
			}
			if total.Acquisitions == 0 {
				t.Fatal("no acquisition kept to its Unlock")
			}
			if counted != total.Writes {
				t.Fatalf("counter %d != %d writes: a read-modify-write was lost", counted, total.Writes)
			}
			if n := c.Keys(context.Background(), "DLOCK_SOAK_*").Val(); len(n) != 0 {
				t.Fatalf("lock keys left behind: %v", n)
			}
		})
	}
}

// churnPart returns what a churning process of KIND takes of CHURN/target: the mutex, the write
// side of the read-write lock (excl) or its read side, all three permits of the semaphore of
// three (excl) or one.
func churnPart(g *dlock.Generator, kind, target string, excl bool) (dlock.Part, error) {
	switch kind {
	case "rw":
		rw, err := g.GenRW("CHURN", target)
		if err != nil {
			return nil, err
		}
		if excl {
			return rw.WriteSide(), nil
		}
		return rw.ReadSide(), nil
	case "sem":
		sem, err := g.GenSemaphore("CHURN", target, 3)
		if err != nil {
			return nil, err
		}
		if excl {
			return sem.Permits(3), nil
		}
		return sem.Permits(1), nil
	}
	return g.Gen("CHURN", target)
}

// churnerHelper is a short-lived process of the process churn: it takes its part of
// CHURN/TARGET once (KIND; EXCL=1: the exclusive part, else at random), counts its turn in
// {TARGET}:turns, holds it up to HOLD and lets go, then Closes (ACT=take). With ACT=closewait
// it Closes its Generator at a random moment up to 50 ms into its wait (or its hold). A
// process of ACT=kill does as ACT=take, holding up to a lease: the test kills it.
func churnerHelper(g *dlock.Generator, c *redis.Client) int {
	kind, target, act := env("KIND"), env("TARGET"), env("ACT")
	l, err := churnPart(g, kind, target, env("EXCL") == "1" || rand.IntN(2) == 0)
	if err != nil {
		fmt.Println("error", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	closed := make(chan struct{})
	if act == "closewait" {
		go func() {
			defer close(closed)
			time.Sleep(time.Duration(rand.IntN(50_000)) * time.Microsecond)
			if err := g.Close(context.Background()); err != nil {
				fmt.Fprintln(os.Stderr, "churner: Close:", err)
			}
		}()
		defer func() { <-closed }()
	}
	owned, err := l.Lock(ctx)
	if err != nil {
		if errors.Is(err, dlock.ErrClosed) {
			return 0
		}
		fmt.Println("error", err)
		return 2
	}
	c.Incr(ctx, "{"+target+"}:turns")
	hold := envDuration("HOLD")
	if act == "kill" {
		hold = envDuration("LEASE")
	}
	time.Sleep(time.Duration(rand.Int64N(int64(hold) + 1)))
	if err := l.Unlock(owned); err != nil && !errors.Is(err, dlock.ErrClosed) && !errors.Is(err, dlock.ErrLockLost) {
		fmt.Println("error", err)
		return 2
	}
	return 0
}

// Process churn: short-lived OS processes (each a Generator that takes a lock once and
// Closes, or is Closed while it waits, or is killed with SIGKILL waiting or holding) come and
// go around a process that takes the lock again and again. That process is served within a
// bounded number of turns of others (the line is by arrival: only those in line before it may
// go first), not starved by newcomers; once every process has gone, Redis keeps no line and no
// holding after an entry's life, and a fresh process gets the key within a lease (at once when
// every process Closed cleanly). For the mutex, the read-write lock's writers and the
// semaphore's take of all its permits. Short by default (DLOCK_SOAK: longer).
func TestProcessChurnServesEveryoneAndLeavesTheKeyFree(t *testing.T) {
	s := realServer(t)
	const lease = time.Second
	d := soak(t, 3*time.Second)
	const live = 5 // churning processes at once
	for _, kind := range []string{"mutex", "rw", "sem"} {
		for _, kills := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/kills=%v", kind, kills), func(t *testing.T) {
				target := fmt.Sprintf("churn-%s-%v-%d", kind, kills, time.Now().UnixNano())
				g, c := generator(t, s.Addr, dlock.WithDefaultLease(lease))
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a hang, not a slow machine
				defer cancel()
				turns := "{" + target + "}:turns"

				stop := make(chan struct{})
				var wg sync.WaitGroup
				var started, killed, lastKill atomic.Int64
				for range live {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for {
							select {
							case <-stop:
								return
							default:
							}
							act := []string{"take", "take", "closewait", "kill"}[rand.IntN(4)]
							if !kills && act == "kill" {
								act = "take"
							}
							cmd, _ := helper(t, "churner", map[string]string{
								"ADDR": s.Addr, "LEASE": lease.String(), "TARGET": target, "KIND": kind,
								"ACT": act, "HOLD": "5ms",
							})
							started.Add(1)
							exited := make(chan error, 1)
							go func() { exited <- cmd.Wait() }()
							var killAt <-chan time.Time
							if act == "kill" {
								killAt = time.After(time.Duration(rand.IntN(300)) * time.Millisecond)
							}
							var killStop <-chan struct{}
							if kills { // the last ones are killed as they are, waiting or holding
								killStop = stop
							}
							select {
							case err := <-exited:
								if err != nil {
									t.Errorf("a churning process (%s): %v", act, err)
								}
								continue
							case <-killAt:
							case <-killStop:
							}
							_ = cmd.Process.Kill()
							killed.Add(1)
							<-exited
							lastKill.Store(time.Now().UnixNano())
						}
					}()
				}

				l, err := churnPart(g, kind, target, true)
				if err != nil {
					t.Fatal(err)
				}
				end := time.Now().Add(d)
				rounds, most := 0, int64(0)
				for time.Now().Before(end) {
					before, _ := c.Get(ctx, turns).Int64()
					o, err := l.Lock(ctx)
					if err != nil {
						t.Fatalf("the steady process, round %d: %v", rounds, err)
					}
					at, err := c.Incr(ctx, turns).Result()
					if err != nil {
						t.Fatal(err)
					}
					if ahead := at - 1 - before; ahead > most {
						most = ahead
					}
					time.Sleep(time.Millisecond)
					if err := o.Unlock(); err != nil {
						t.Fatalf("the steady process's Unlock: %v", err)
					}
					rounds++
					time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
				}
				close(stop)
				wg.Wait()
				all, _ := c.Get(ctx, turns).Int64()
				t.Logf("%v: %d processes (%d killed), %d turns; the steady process took %d, at most %d others served between its arrival and its turn",
					d, started.Load(), killed.Load(), all, rounds, most)
				// Only processes in line before it (at most live) and a barging newcomer or two may
				// go first; a hundred is starvation.
				if most > 4*live+4 {
					t.Errorf("the steady process waited while %d others were served: starved by newcomers", most)
				}
				if rounds == 0 {
					t.Errorf("the steady process was never served")
				}
				if err := g.Close(ctx); err != nil {
					t.Fatal(err)
				}

				// A fresh process: at once after clean Closes, within a lease after kills.
				fresh, _ := generator(t, s.Addr, dlock.WithDefaultLease(lease))
				fl, err := churnPart(fresh, kind, target, true)
				if err != nil {
					t.Fatal(err)
				}
				if !kills {
					o, ok, err := fl.TryLock(ctx)
					if err != nil || !ok {
						t.Fatalf("a fresh process after every process Closed cleanly: TryLock %v %v", ok, err)
					}
					_ = o.Unlock()
				} else {
					start := time.Now()
					lctx, lcancel := context.WithTimeout(ctx, lease+5*time.Second) // (a lease; the rest a loaded machine's slack)
					o, err := fl.Lock(lctx)
					lcancel()
					if err != nil {
						t.Fatalf("a fresh process after every process had gone (some killed): %v after %v", err, time.Since(start))
					}
					sinceKill := time.Since(time.Unix(0, lastKill.Load()))
					t.Logf("a fresh process got the key after %v, %v after the last kill (lease %v)", time.Since(start), sinceKill, lease)
					_ = o.Unlock()
				}
				if err := fresh.Close(ctx); err != nil {
					t.Fatal(err)
				}

				// Nothing in line or held after an entry's life (a lease, at least 2 s).
				deadline := time.Now().Add(2*time.Second + 2*lease + 3*time.Second)
				for {
					var held []string
					for _, k := range c.Keys(ctx, "*"+target+"*").Val() {
						for _, suf := range []string{":line", ":want", ":shared:held", ":shared:exp", ":shared:line", ":shared:want", ":shared:heard"} {
							if strings.HasSuffix(k, suf) || k == "DLOCK_CHURN_"+target {
								held = append(held, k)
								break
							}
						}
					}
					if len(held) == 0 {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("still kept an entry's life after every process had gone: %v", held)
					}
					time.Sleep(20 * time.Millisecond)
				}
			})
		}
	}
}

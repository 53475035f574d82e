package reliability_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"
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

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// waitSplit measures, with DLOCK_BENCH_SPLIT=DIR, what a worker process spends while its goroutine
// waits inside Lock, against the whole of the measured window: CPU (user and system, the whole
// process, all its threads) and voluntary and involuntary context switches (rusage), written as
// one line per goroutine to DIR/split-<impl>-<pid>-<goroutine>.txt. It means something only with
// one goroutine per process (the cross scenario): the process's usage while that goroutine is
// inside Lock is the usage of its wait, every background goroutine included.
type waitSplit struct {
	dir, impl                string
	goroutine                int
	on                       bool
	in                       syscall.Rusage // at the last enter
	n                        int64          // acquisitions in the window
	waitNs, waitVol, waitInv int64
	waitWall                 time.Duration
	entered                  time.Time
	first, last              syscall.Rusage // at the first and the last acquisition counted
	firstT, lastT            time.Time
}

func newSplit(a workerArgs, goroutine int) *waitSplit {
	d := os.Getenv("DLOCK_BENCH_SPLIT")
	return &waitSplit{dir: d, impl: a.Impl, goroutine: goroutine, on: d != ""}
}

// enter is called as the goroutine calls Lock.
func (s *waitSplit) enter() {
	if s.on {
		s.entered = time.Now()
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &s.in)
	}
}

// leave is called as Lock returned at t; a wait is counted when it began and ended in the
// measured window [measure, end).
func (s *waitSplit) leave(t, measure, end time.Time) {
	if !s.on {
		return
	}
	var out syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &out)
	if s.entered.Before(measure) || !t.Before(end) {
		return
	}
	if s.n == 0 {
		s.first, s.firstT = s.in, s.entered
	}
	s.last, s.lastT = out, t
	s.n++
	s.waitNs += cpuOf(out) - cpuOf(s.in)
	s.waitVol += out.Nvcsw - s.in.Nvcsw
	s.waitInv += out.Nivcsw - s.in.Nivcsw
	s.waitWall += t.Sub(s.entered)
}

func cpuOf(r syscall.Rusage) int64 { return r.Utime.Nano() + r.Stime.Nano() }

// write writes the goroutine's line, if it counted a wait.
func (s *waitSplit) write() {
	if !s.on || s.n == 0 {
		return
	}
	line := fmt.Sprintf("impl=%s pid=%d acq=%d wall_us=%d wait_wall_us=%d cpu_us=%d wait_cpu_us=%d vol=%d wait_vol=%d inv=%d wait_inv=%d\n",
		s.impl, os.Getpid(), s.n, s.lastT.Sub(s.firstT).Microseconds(), s.waitWall.Microseconds(),
		(cpuOf(s.last)-cpuOf(s.first))/1000, s.waitNs/1000, s.last.Nvcsw-s.first.Nvcsw, s.waitVol,
		s.last.Nivcsw-s.first.Nivcsw, s.waitInv)
	_ = os.WriteFile(filepath.Join(s.dir, fmt.Sprintf("split-%s-%d-%d.txt", s.impl, os.Getpid(), s.goroutine)), []byte(line), 0o644)
}

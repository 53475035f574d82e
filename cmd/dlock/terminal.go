package main

import (
	"os/signal"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// foregroundTerminal reports whether standard input is a terminal whose foreground process
// group is dlock's: then exec hands the terminal to its command's group, as a shell does for a
// foreground job, so that the command can read it and Ctrl-C reaches it.
func foregroundTerminal() bool {
	pgrp, err := unix.IoctlGetInt(0, unix.TIOCGPGRP)
	return err == nil && pgrp == syscall.Getpgrp()
}

// takeTerminal makes dlock's process group the terminal's foreground group again, after its
// command (which had it) exited or stopped.
func takeTerminal() { giveTerminal(syscall.Getpgrp()) }

// isStopped reports whether process pid (a child of dlock) is stopped now, leaving it to be
// reaped by its Wait (WNOWAIT).
func isStopped(pid int) bool {
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PID, pid, &info, unix.WSTOPPED|unix.WNOHANG|unix.WNOWAIT, nil); err != nil {
		return false
	}
	const cldStopped = 5 // CLD_STOPPED
	return info.Signo == int32(syscall.SIGCHLD) && info.Code == cldStopped
}

// suspend follows the command's group pgid, run in the foreground of dlock's terminal, as it
// stops (Ctrl-Z): dlock takes the terminal back and stops too, so that the shell that runs it
// gets the terminal and sees the job stopped; once the shell continues dlock (fg, bg), dlock
// continues the command, handing it the terminal again if dlock has it (fg). While both are
// stopped, nothing renews the lock: it may be lost, which dlock finds as it goes on. When no
// shell can continue dlock (its process group is orphaned: it leads its session, or its
// parent is in another session), dlock does not stop: it continues the command at once, as a
// job of an orphaned group is.
func suspend(pgid int) {
	if !orphaned() {
		takeTerminal()
		stopSelf()
		if foregroundTerminal() {
			giveTerminal(pgid)
		}
	}
	_ = syscall.Kill(-pgid, syscall.SIGCONT)
}

// stopSelf stops dlock and returns once it is continued. It sends SIGSTOP, which nothing
// catches (dlock is notified of SIGTSTP, and Go swallows a signal it was once notified of),
// to the calling thread, which stops as the call returns: sent to the process, it could reach
// another thread while this one ran on, handing the terminal back before dlock stopped.
func stopSelf() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	_ = unix.Tgkill(unix.Getpid(), unix.Gettid(), unix.SIGSTOP)
}

// giveTerminal makes pgid the terminal's foreground group. A background group that does so
// gets SIGTTOU unless it ignores it.
func giveTerminal(pgid int) {
	signal.Ignore(syscall.SIGTTOU)
	defer signal.Reset(syscall.SIGTTOU)
	_ = unix.IoctlSetPointerInt(0, unix.TIOCSPGRP, pgid)
}

// orphaned reports whether dlock's process group has no parent in the session that could
// continue it once stopped (a shell with job control runs its jobs in groups of their own, in
// its session): the kernel then discards SIGTSTP sent to it, as it would a Ctrl-Z.
func orphaned() bool {
	parent := syscall.Getppid()
	pgrp, err := unix.Getpgid(parent)
	if err != nil {
		return true
	}
	psid, err := unix.Getsid(parent)
	if err != nil {
		return true
	}
	sid, err := unix.Getsid(0)
	return err != nil || psid != sid || pgrp == syscall.Getpgrp()
}

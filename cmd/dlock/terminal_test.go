package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// (The commands here do not fork: a Ctrl-Z that catches a shell's child between its fork and
// its exec stops that child while the shell, in vfork, never stops, and neither dlock nor a
// shell above it sees a stopped child to act on.)

// TestExecStoppedInAShell: in a shell's terminal, Ctrl-Z stops exec's command (the terminal's
// foreground group); dlock stops too, giving the shell its terminal back and the job stopped,
// and fg continues both, the terminal the command's again: Ctrl-C then reaches the command,
// and dlock releases the lock and exits 130.
func TestExecStoppedInAShell(t *testing.T) {
	needReal(t)
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	dir, tg := t.TempDir(), target(t)
	tty := newTerminal(t, "bash", "--norc", "--noprofile", "-i")
	killLater(t, filepath.Join(dir, "pids"))
	tty.write(t, fmt.Sprintf("%s exec --redis %s CLI %s -- sh -c 'echo $$ > %s/pids; echo $PPID > %s/dlock; touch %s/ready; exec sleep 600'\n",
		bin, srv.Addr, tg, dir, dir, dir))
	waitFile(t, filepath.Join(dir, "ready"))
	cmdPID := readPIDs(t, filepath.Join(dir, "pids"))[0]
	dlockPID := readPIDs(t, filepath.Join(dir, "dlock"))[0]

	tty.write(t, "\x1a") // Ctrl-Z
	waitFor(t, "the command and dlock to stop", func() bool { return state(cmdPID) == "T" && state(dlockPID) == "T" })
	waitFor(t, "the shell to have its terminal back", func() bool { return tty.foreground() == tty.cmd.Process.Pid })
	if !lockStatusOf(t, tg).Held {
		t.Fatal("the lock was let go while its command was stopped")
	}

	tty.write(t, "fg\n")
	waitFor(t, "the command to go on, in the terminal's foreground", func() bool {
		return state(cmdPID) != "T" && state(dlockPID) != "T" && tty.foreground() == cmdPID
	})
	tty.write(t, "\x03") // Ctrl-C
	waitFor(t, "the command to end", func() bool { return gone(cmdPID) && gone(dlockPID) })
	checkFreed(t, tg)
}

// TestExecStoppedWithoutAShell: when no shell could continue dlock (it leads its terminal's
// session), Ctrl-Z does not stop the command for good: dlock continues it at once, and the
// terminal stays the command's (Ctrl-C reaches it).
func TestExecStoppedWithoutAShell(t *testing.T) {
	needReal(t)
	dir, tg := t.TempDir(), target(t)
	killLater(t, filepath.Join(dir, "pids"))
	tty := newTerminal(t, bin, "exec", "--redis", srv.Addr, "CLI", tg, "--", "sh", "-c",
		fmt.Sprintf("echo $$ > %s/pids; touch %s/ready; exec sleep 600", dir, dir))
	waitFile(t, filepath.Join(dir, "ready"))
	cmdPID := readPIDs(t, filepath.Join(dir, "pids"))[0]
	waitFor(t, "the command to have the terminal", func() bool { return tty.foreground() == cmdPID })

	tty.write(t, "\x1a") // Ctrl-Z
	for range 20 {       // (each round sees the command stopped, or not: it must go on)
		if state(cmdPID) != "T" {
			break
		}
		waitFor(t, "the command to go on", func() bool { return state(cmdPID) != "T" })
	}
	tty.write(t, "\x03") // Ctrl-C
	waitFor(t, "dlock to end", func() bool { return gone(tty.cmd.Process.Pid) })
	checkFreed(t, tg)
}

// terminal is a pseudo-terminal whose slave side is the controlling terminal of a process run
// in a session of its own.
type terminal struct {
	master *os.File
	cmd    *exec.Cmd
}

// newTerminal runs argv in a new session on a new pseudo-terminal; what it writes there is
// read and dropped.
func newTerminal(t *testing.T, argv ...string) *terminal {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { master.Close() })
	if err := unix.IoctlSetPointerInt(int(master.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(master.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	slave, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer slave.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.Env = append(os.Environ(), "PS1=$ ", "TERM=dumb")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	go func() { _, _ = io.Copy(io.Discard, master) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // (the session's own group)
		_ = cmd.Process.Kill()
		<-done
	})
	return &terminal{master: master, cmd: cmd}
}

// write types s.
func (tt *terminal) write(t *testing.T, s string) {
	t.Helper()
	if _, err := tt.master.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

// foreground returns the terminal's foreground process group.
func (tt *terminal) foreground() int {
	pgrp, err := unix.IoctlGetInt(int(tt.master.Fd()), unix.TIOCGPGRP)
	if err != nil {
		return -1
	}
	return pgrp
}

// state returns the state letter of process pid (R, S, T, Z, ...), "" when it is gone.
func state(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return ""
	}
	return s[i+2 : i+3]
}

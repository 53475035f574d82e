package main

import (
	"os/signal"
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
// command (which had it) exited. A background group that does so gets SIGTTOU unless it
// ignores it.
func takeTerminal() {
	signal.Ignore(syscall.SIGTTOU)
	defer signal.Reset(syscall.SIGTTOU)
	_ = unix.IoctlSetPointerInt(0, unix.TIOCSPGRP, syscall.Getpgrp())
}

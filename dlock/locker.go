package dlock

import (
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"strconv"
)

// lockerPrefix identifies this host, process and generator: "<ip>-<pid>-<nonce>-". Java
// DLock's locker is IP and thread id, which collides between two processes on one host; the
// pid and a random nonce per generator cannot. A sequence number per acquisition completes it.
func lockerPrefix() string {
	var nonce [6]byte
	_, _ = rand.Read(nonce[:]) // crypto/rand.Read never fails on supported platforms
	return hostIP() + "-" + strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(nonce[:]) + "-"
}

// hostIP returns the first non-loopback IPv4 address, else the host name, else "localhost".
func hostIP() string {
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
				return n.IP.String()
			}
		}
	}
	if h, err := os.Hostname(); err == nil && h != "" {
		return h
	}
	return "localhost"
}

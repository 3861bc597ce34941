package bench

import "github.com/homa-go/homa/sock"

// rawHomaSockets counts the raw sockets of IP protocol 146 open on the
// host (in this network namespace), IPv4 and IPv6. The kernel clones
// every Homa packet that arrives over raw IP for each of them, whatever
// its port, so each one slows the raw-IP figures a little (the client
// sockets of one process beyond a few share one). ok is
// false when the kernel's tables (/proc/net/raw, raw6) cannot be read.
func rawHomaSockets() (n int, ok bool) { return sock.HostRawSockets() }

package netio

import (
	"bufio"
	"io"
	"os"
	"strconv"
	"strings"
)

// HostRawSockets counts the raw sockets of IP protocol 146 open on the
// host (in this network namespace), IPv4 and IPv6, from the kernel's
// tables (/proc/net/raw and raw6): the sockets that the kernel clones
// every Homa packet arriving over raw IP for. Conns that share a socket
// (see OpenRaw) count once. ok is false when the tables cannot be read
// (not Linux, no /proc).
func HostRawSockets() (n int, ok bool) {
	for _, name := range []string{"/proc/net/raw", "/proc/net/raw6"} {
		f, err := os.Open(name)
		if err != nil {
			continue
		}
		k, err := countRawProto(f, ipProtoHoma)
		f.Close()
		if err == nil {
			n, ok = n+k, true
		}
	}
	return n, ok
}

// countRawProto counts the sockets of protocol proto in a table of raw
// sockets as /proc/net/raw and raw6 print it: a header line, then a line
// a socket whose second field is the local address and, where a port
// would be, the socket's protocol in hexadecimal.
func countRawProto(r io.Reader, proto int) (int, error) {
	sc := bufio.NewScanner(r)
	n := 0
	for first := true; sc.Scan(); first = false {
		fields := strings.Fields(sc.Text())
		if first || len(fields) < 2 {
			continue
		}
		_, port, found := strings.Cut(fields[1], ":")
		if !found {
			continue
		}
		if p, err := strconv.ParseUint(port, 16, 16); err == nil && int(p) == proto {
			n++
		}
	}
	return n, sc.Err()
}

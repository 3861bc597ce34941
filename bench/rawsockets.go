package bench

import (
	"bufio"
	"io"
	"os"
	"strconv"
	"strings"
)

// ipProtoHoma is Homa's IP protocol number.
const ipProtoHoma = 146

// rawHomaSockets counts the raw sockets of IP protocol 146 open on the
// host (in this network namespace), IPv4 and IPv6. The kernel clones
// every Homa packet that arrives over raw IP for each of them, whatever
// its port, so each one slows the raw-IP figures a little. ok is false
// when the kernel's tables (/proc/net/raw, raw6) cannot be read.
func rawHomaSockets() (n int, ok bool) {
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

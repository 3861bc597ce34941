package interop

// Diagnostics of the live suite: what the kernel underneath the client
// dropped. A client that cannot keep up with a peer loses packets in its
// raw socket's receive queue, before the engine sees them, and the
// engine's Stats cannot count those.

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// protoHomaHex is IP protocol 146 as /proc/net/raw writes it in the
// port part of a raw socket's local address.
const protoHomaHex = "0092"

// rawDrops sums the drops column of the raw IP sockets of protocol 146
// in this network namespace (/proc/net/raw and raw6): the packets the
// kernel discarded because a socket's receive queue was full (or its
// filter failed). It returns the sockets seen, or an error where the
// files do not exist (not Linux).
func rawDrops() (drops uint64, sockets int, err error) {
	for _, name := range []string{"/proc/net/raw", "/proc/net/raw6"} {
		b, err := os.ReadFile(name)
		if err != nil {
			return 0, 0, err
		}
		d, n, err := parseRawDrops(b)
		if err != nil {
			return 0, 0, fmt.Errorf("%s: %w", name, err)
		}
		drops += d
		sockets += n
	}
	return drops, sockets, nil
}

// parseRawDrops reads one /proc/net/raw{,6} table: a header line, then
// one line per socket whose second field is the local address
// (HEXADDR:PROTO) and whose last field is the drop count.
func parseRawDrops(b []byte) (drops uint64, sockets int, err error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	first := true
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if first || len(f) == 0 {
			first = false
			continue
		}
		if len(f) < 3 {
			return 0, 0, fmt.Errorf("short line %q", sc.Text())
		}
		_, proto, ok := strings.Cut(f[1], ":")
		if !ok {
			return 0, 0, fmt.Errorf("local address %q", f[1])
		}
		if !strings.EqualFold(proto, protoHomaHex) {
			continue
		}
		d, err := strconv.ParseUint(f[len(f)-1], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("drops of %q: %w", sc.Text(), err)
		}
		drops += d
		sockets++
	}
	return drops, sockets, sc.Err()
}

// logRawDrops logs what rawDrops finds, with what for.
func logRawDrops(t *testing.T, what string) {
	t.Helper()
	d, n, err := rawDrops()
	if err != nil {
		t.Logf("%s: no raw socket drop counts: %v", what, err)
		return
	}
	t.Logf("%s: the kernel dropped %d packets at this namespace's %d raw IP-146 sockets", what, d, n)
}

func TestParseRawDrops(t *testing.T) {
	table := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops
  146: 00000000:0092 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 4242 2 0000000000000000 17
  146: 00000000:0092 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 4243 2 0000000000000000 3
    1: 00000000:0001 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 4244 2 0000000000000000 99
`
	d, n, err := parseRawDrops([]byte(table))
	if err != nil || d != 20 || n != 2 {
		t.Errorf("parseRawDrops = %d drops, %d sockets, %v; want 20, 2, nil", d, n, err)
	}
	for _, bad := range []string{
		"header\n  146: 00000000:0092 x\n",
		"header\n  146: 000000000092 x y\n",
		"header\n  146: 00000000:0092 x y z notanumber\n",
	} {
		if _, _, err := parseRawDrops([]byte(bad)); err == nil {
			t.Errorf("parseRawDrops(%q) accepted", bad)
		}
	}
	if d, n, err := parseRawDrops([]byte("header only\n")); err != nil || d != 0 || n != 0 {
		t.Errorf("empty table: %d, %d, %v", d, n, err)
	}
}

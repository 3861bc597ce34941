//go:build linux

package netio

import (
	"errors"
	"fmt"
	"net/netip"
	"sync/atomic"
	"testing"

	"github.com/homa-go/homa/internal/tools/netns"
)

// nsPair is two network namespaces made by a test, A and B, joined by a
// veth pair (veth0 in each), with IPv4 and IPv6 addresses on it. The IPv6
// addresses skip duplicate address detection, so they work at once.
type nsPair struct {
	a, b   string     // namespace names
	a4, b4 netip.Addr // 10.147.x.1 and .2
	a6, b6 netip.Addr // fd00:147:x::1 and ::2
	// silent4 and silent6 are on veth0's subnets but belong to no one:
	// packets to them wait for ARP / neighbour discovery, which fails
	// after about 300 ms.
	silent4, silent6 netip.Addr
}

// nsPrefix starts every namespace name made here: "hnio-<pid>-<n>-a"
// and "-b".
const nsPrefix = "hnio-"

var nsSeq atomic.Int32

// newNSPair makes a pair and deletes it when t ends. It skips t, saying
// why, where namespaces cannot be made.
func newNSPair(t *testing.T) *nsPair {
	t.Helper()
	if err := netns.Available(nsPrefix); errors.Is(err, netns.ErrUnavailable) {
		t.Skipf("skipping: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	sub := 100 + int(nsSeq.Add(1))%100
	addr := func(format string) netip.Addr { return netip.MustParseAddr(fmt.Sprintf(format, sub)) }
	np, err := netns.NewPair(netns.PairConfig{
		Prefix: nsPrefix,
		A4:     addr("10.147.%d.1"), B4: addr("10.147.%d.2"),
		A6: addr("fd00:147:%d::1"), B6: addr("fd00:147:%d::2"),
		Neighbours: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := np.Close(); err != nil {
			t.Error(err)
		}
	})
	return &nsPair{
		a: np.A.NS, b: np.B.NS,
		a4: np.A.V4, b4: np.B.V4, a6: np.A.V6, b6: np.B.V6,
		silent4: addr("10.147.%d.99"), silent6: addr("fd00:147:%d::99"),
	}
}

// inNS runs f on an OS thread that has joined network namespace ns, and
// waits for it (netns.Do). Conn.MaxPacket, which opens a socket of its
// own, would look in the caller's namespace: give Conns opened in ns
// Options.MTU.
func inNS(t *testing.T, ns string, f func()) {
	t.Helper()
	if err := netns.Do(ns, f); err != nil {
		t.Fatal(err)
	}
}

// openRawIn opens a raw Conn in namespace ns, closed when t ends.
func openRawIn(t *testing.T, ns string, laddr netip.Addr, port uint16, opt *Options) Conn {
	t.Helper()
	var c Conn
	var err error
	inNS(t, ns, func() { c, err = OpenRaw(laddr, port, opt) })
	if err != nil {
		t.Fatalf("OpenRaw(%v, %d) in %s: %v", laddr, port, ns, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

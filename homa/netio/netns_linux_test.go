//go:build linux

package netio

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/homa-go/homa/internal/syscmd"
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
// and "-b", so that parallel runs never collide and the leftovers of a
// killed run can be recognized and deleted.
const nsPrefix = "hnio-"

var nsSeq atomic.Int32

// newNSPair makes a pair and deletes it when t ends. It skips t, saying
// why, where namespaces cannot be made.
func newNSPair(t *testing.T) *nsPair {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skipf("the ip command (iproute2) is not installed: %v", err)
	}
	sweepStaleNS()
	k := nsSeq.Add(1)
	base := fmt.Sprintf("%s%d-%d-", nsPrefix, os.Getpid(), k)
	sub := 100 + int(k)%100
	p := &nsPair{
		a: base + "a", b: base + "b",
		a4:      netip.MustParseAddr(fmt.Sprintf("10.147.%d.1", sub)),
		b4:      netip.MustParseAddr(fmt.Sprintf("10.147.%d.2", sub)),
		silent4: netip.MustParseAddr(fmt.Sprintf("10.147.%d.99", sub)),
		a6:      netip.MustParseAddr(fmt.Sprintf("fd00:147:%d::1", sub)),
		b6:      netip.MustParseAddr(fmt.Sprintf("fd00:147:%d::2", sub)),
		silent6: netip.MustParseAddr(fmt.Sprintf("fd00:147:%d::99", sub)),
	}
	t.Cleanup(func() {
		for _, ns := range []string{p.a, p.b} {
			if _, err := syscmd.Run("", "ip", "netns", "del", ns); err != nil && !strings.Contains(err.Error(), "No such file") {
				t.Error(err)
			}
		}
	})
	steps := [][]string{
		{"ip", "netns", "add", p.a},
		{"ip", "netns", "add", p.b},
		// Both ends are made inside the namespaces, never in the test's.
		{"ip", "-n", p.a, "link", "add", "veth0", "type", "veth", "peer", "name", "veth0", "netns", p.b},
	}
	for _, h := range []struct {
		ns     string
		v4, v6 netip.Addr
	}{{p.a, p.a4, p.a6}, {p.b, p.b4, p.b6}} {
		steps = append(steps,
			[]string{"ip", "-n", h.ns, "addr", "add", netip.PrefixFrom(h.v4, 24).String(), "dev", "veth0"},
			[]string{"ip", "-n", h.ns, "addr", "add", netip.PrefixFrom(h.v6, 64).String(), "dev", "veth0", "nodad"},
			[]string{"ip", "-n", h.ns, "link", "set", "lo", "up"},
			[]string{"ip", "-n", h.ns, "link", "set", "veth0", "up"},
			// No rate limit on the ICMP errors the tests count on.
			[]string{"ip", "netns", "exec", h.ns, "sysctl", "-q", "-w", "net.ipv4.icmp_ratelimit=0", "net.ipv6.icmp.ratelimit=0"},
			// Address resolution gives up after its three probes, 100 ms
			// apart (the first may go out before the link is up).
			[]string{"ip", "netns", "exec", h.ns, "sysctl", "-q", "-w",
				"net.ipv4.neigh.veth0.retrans_time_ms=100", "net.ipv6.neigh.veth0.retrans_time_ms=100"})
	}
	for _, s := range steps {
		if _, err := syscmd.Run("", s...); err != nil {
			t.Fatal(err)
		}
	}
	// A and B know each other's link address from the start: neighbour
	// discovery on a link just brought up may lose its first probe.
	for _, h := range []struct {
		ns, peer     string
		peer4, peer6 netip.Addr
	}{{p.a, p.b, p.b4, p.b6}, {p.b, p.a, p.a4, p.a6}} {
		out, err := syscmd.Run("", "ip", "-n", h.peer, "-br", "link", "show", "veth0")
		f := strings.Fields(out)
		if err != nil || len(f) < 3 {
			t.Fatalf("link address of veth0 in %s: %q, %v", h.peer, out, err)
		}
		for _, a := range []netip.Addr{h.peer4, h.peer6} {
			if _, err := syscmd.Run("", "ip", "-n", h.ns, "neigh", "replace", a.String(), "lladdr", f[2], "dev", "veth0", "nud", "permanent"); err != nil {
				t.Fatal(err)
			}
		}
	}
	return p
}

// sweepStaleNS deletes namespaces named by newNSPair whose process is
// gone (a run killed before its cleanup).
func sweepStaleNS() {
	out, err := syscmd.Run("", "ip", "netns", "list")
	if err != nil {
		return
	}
	for line := range strings.Lines(out) {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		rest, ok := strings.CutPrefix(name, nsPrefix)
		if !ok {
			continue
		}
		pid, err := strconv.Atoi(strings.SplitN(rest, "-", 2)[0])
		if err != nil || syscall.Kill(pid, 0) != syscall.ESRCH {
			continue
		}
		syscmd.Run("", "ip", "netns", "del", name)
	}
}

// inNS runs f on an OS thread that has joined network namespace ns, and
// waits for it. Sockets f opens stay in ns for their whole life, whatever
// goroutine uses them later (Conn.MaxPacket, which opens a socket of its
// own, would look in the caller's namespace: give such Conns
// Options.MTU). The thread is never handed back to the Go scheduler: it
// ends with its goroutine, locked and in another namespace.
func inNS(t *testing.T, ns string, f func()) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		fd, err := unix.Open("/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- err
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns %s: %w", ns, err)
			return
		}
		f()
		errc <- nil
	}()
	if err := <-errc; err != nil {
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

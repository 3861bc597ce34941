// Package socktest holds what the tests of the layers above package sock
// share when they run on real sockets: every transport and backend of
// the host, servers opened at a free port, and a check that no goroutine
// outlives a test.
package socktest

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/sock"
)

// Loopback is one way to run a socket on loopback.
type Loopback struct {
	Name string
	Host string
	Cfg  sock.Config
}

// Loopbacks are every transport and backend, over IPv4 and IPv6; those
// the host cannot offer are skipped by OpenServer.
var Loopbacks = []Loopback{
	{"udp4", "127.0.0.1", sock.Config{Transport: sock.UDP}},
	{"udp6", "::1", sock.Config{Transport: sock.UDP}},
	{"raw4", "127.0.0.1", sock.Config{Transport: sock.Raw}},
	{"raw6", "::1", sock.Config{Transport: sock.Raw}},
	{"kernel", "127.0.0.1", sock.Config{Backend: sock.Kernel}},
}

// OpenServer opens a server socket on host at the first free port of
// the hundred from base, or skips the test when the configuration needs
// what the process or the kernel lacks.
func OpenServer(tb testing.TB, host string, base uint16, cfg *sock.Config) *sock.Socket {
	tb.Helper()
	s, err := OpenFree(host, base, cfg)
	switch {
	case errors.Is(err, sock.ErrPermission):
		tb.Skipf("skipping: raw Homa sockets need CAP_NET_RAW (run as root): %v", err)
	case errors.Is(err, sock.ErrNoKernelHoma):
		tb.Skipf("skipping: the kernel has no Homa module: %v", err)
	case err != nil:
		tb.Fatal(err)
	}
	return s
}

// OpenFree opens a server socket on host at the first free port of the
// hundred from base.
func OpenFree(host string, base uint16, cfg *sock.Config) (*sock.Socket, error) {
	addr := netip.MustParseAddr(host)
	for port := base; port < base+100; port++ {
		s, err := sock.Open(netip.AddrPortFrom(addr, port), cfg)
		if !errors.Is(err, sock.ErrPortInUse) {
			return s, err
		}
	}
	return nil, fmt.Errorf("no free Homa port in %d..%d: %w", base, base+99, sock.ErrPortInUse)
}

// WaitGoroutines fails the test unless the number of goroutines falls
// to at most n within a few seconds.
func WaitGoroutines(t testing.TB, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > n {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines left, want at most %d:\n%s", runtime.NumGoroutine(), n, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// RunChecked runs the tests of m and returns the exit code for a
// TestMain: 1 also when they passed but left goroutines running code of
// this module (every socket, server and client they made should have
// been closed and have waited for its goroutines), whose stacks it
// prints.
func RunChecked(m *testing.M) int {
	code := m.Run()
	if code != 0 {
		return code
	}
	// A runtime timer's function that fired as its owner closed (too
	// late for Stop) may not have run yet; it ends at once. What still
	// runs a second later leaked.
	leaked := leakedGoroutines()
	for deadline := time.Now().Add(time.Second); leaked != "" && time.Now().Before(deadline); leaked = leakedGoroutines() {
		time.Sleep(10 * time.Millisecond)
	}
	if leaked != "" {
		fmt.Fprintf(os.Stderr, "leaked goroutines:\n%s\n", leaked)
		return 1
	}
	return 0
}

// leakedGoroutines returns the stacks of the goroutines running code of
// this module, other than the caller's.
func leakedGoroutines() string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var leaked []string
	for i, g := range strings.Split(string(buf), "\n\n") {
		if i > 0 && strings.Contains(g, "github.com/homa-go/homa") {
			leaked = append(leaked, g)
		}
	}
	return strings.Join(leaked, "\n\n")
}

// BenchConfigs are the socket configurations benchmarks run over on
// 127.0.0.1: both transports with the engine's default receive path,
// which spins on the socket for 50 µs before parking, and with spinning
// off (PollDuration -1), which costs a wake-up per message but no CPU
// while waiting; on a machine whose CPUs are all busy, spinning takes
// the CPU the other end needs.
var BenchConfigs = []Loopback{
	{"homa-udp", "127.0.0.1", sock.Config{Transport: sock.UDP}},
	{"homa-raw", "127.0.0.1", sock.Config{Transport: sock.Raw}},
	{"homa-udp-nopoll", "127.0.0.1", sock.Config{Transport: sock.UDP, PollDuration: -1}},
	{"homa-raw-nopoll", "127.0.0.1", sock.Config{Transport: sock.Raw, PollDuration: -1}},
}

// OpenMem opens a socket at addr on the in-memory network nw, with cfg
// (nil: the defaults).
func OpenMem(nw *memnet.Network, addr netip.AddrPort, cfg *sock.Config) (*sock.Socket, error) {
	var c sock.Config
	if cfg != nil {
		c = *cfg
	}
	c.Network = nw
	return sock.Open(addr, &c)
}

// RawPermitted reports whether this process may open raw IP sockets
// (root with CAP_NET_RAW, or the capability granted). It fails tb on any
// error other than being refused the permission.
func RawPermitted(tb testing.TB) bool {
	tb.Helper()
	s, err := sock.Open(netip.MustParseAddrPort("127.0.0.1:0"), &sock.Config{Transport: sock.Raw})
	if errors.Is(err, sock.ErrPermission) {
		return false
	}
	if err != nil {
		tb.Fatalf("opening a raw socket: %v", err)
	}
	if err := s.Close(); err != nil {
		tb.Fatal(err)
	}
	return true
}

// RequireRaw skips tb, saying why, unless this process may open raw IP
// sockets; see RawPermitted.
func RequireRaw(tb testing.TB) {
	tb.Helper()
	if !RawPermitted(tb) {
		tb.Skip("skipping: needs raw IP sockets (root with CAP_NET_RAW), which this process is refused")
	}
}

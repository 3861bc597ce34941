package interop

// Live tests of how this implementation's client meets a peer's failures
// and delays, against the Linux module in the rig (scripts/rig): a port
// where the module has no socket, and a server that takes long to
// answer. Like TestLive they run only when HOMA_INTEROP_PEER is set.

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/homa-go/homa/homa/wire"
	"github.com/homa-go/homa/sock"
)

const (
	// unboundPortEnv names a Homa port on the peer's host where nothing
	// listens (default defaultUnboundPort).
	unboundPortEnv     = "HOMA_INTEROP_UNBOUND_PORT"
	defaultUnboundPort = 999
	// slowPeerEnv names a slow echo server on the Linux module, HOST:PORT:
	// one that holds each reply back for much longer than the client's
	// peer timeout (the rig's scripts/rig/slowecho, -delay 1s).
	slowPeerEnv = "HOMA_INTEROP_SLOW_PEER"
)

// noListenerBound only bounds a call that would hang: the error tells
// the causes apart (the module's ICMP port unreachable gives
// ErrNoListener, silence ErrPeerTimeout after patient.PeerTimeout), so
// the test does not depend on how fast the guest answers.
const noListenerBound = time.Minute

// icmpBurst is how many ICMP errors the peer's kernel sends to one host
// at once after a quiet spell; then one per icmpInterval. These are
// Linux's defaults (net.ipv4.icmp_ratelimit 1000 ms, a bucket of six).
const (
	icmpBurst    = 6
	icmpInterval = time.Second
)

// lastNoListener is when TestLiveNoListener last ran in this process;
// a repetition waits for the peer's ICMP budget to refill.
var lastNoListener time.Time

// TestLiveNoListener sends requests to a port of the peer's host where
// nothing listens (HOMA_INTEROP_UNBOUND_PORT, default 999). The Linux
// module answers every packet to such a port with ICMP port
// unreachable, which must end the RPC with ErrNoListener at once, long
// before the peer timeout. The peer's kernel rate limits those ICMP
// errors per destination host (a burst of icmpBurst, then one a
// second); the test sends at most icmpBurst-1 packets that draw one, and
// a repetition in the same process first waits for the budget to
// refill.
func TestLiveNoListener(t *testing.T) {
	peer := livePeer(t)
	port := defaultUnboundPort
	if s := os.Getenv(unboundPortEnv); s != "" {
		p, err := strconv.ParseUint(s, 10, 16)
		if err != nil || p == 0 || p > 32767 {
			t.Fatalf("%s=%q: want a Homa server port, 1..32767", unboundPortEnv, s)
		}
		port = int(p)
	}
	if port == int(peer.Port()) {
		t.Fatalf("the unbound port %d is the echo server's", port)
	}
	dst := netip.AddrPortFrom(peer.Addr(), uint16(port))
	if !lastNoListener.IsZero() {
		if wait := time.Until(lastNoListener.Add(icmpBurst * icmpInterval)); wait > 0 {
			t.Logf("waiting %v for the peer's ICMP budget to refill", wait.Round(time.Millisecond))
			time.Sleep(wait)
		}
	}
	defer func() { lastNoListener = time.Now() }()

	client := openLiveClient(t, peer)
	// One packet, then a message of four: at most five ICMP errors.
	for _, n := range []int{100, 5000} {
		ctx, cancel := context.WithTimeout(context.Background(), noListenerBound)
		start := time.Now()
		_, err := client.Call(ctx, dst, randomBytes(n, uint64(n)))
		took := time.Since(start)
		cancel()
		switch {
		case errors.Is(err, sock.ErrNoListener):
			t.Logf("%d bytes to %v: %v after %v", n, dst, err, took.Round(time.Microsecond))
		case errors.Is(err, context.DeadlineExceeded):
			t.Errorf("%d bytes to %v: still running after %v", n, dst, noListenerBound)
		default:
			t.Errorf("%d bytes to %v: err = %v after %v, want ErrNoListener", n, dst, err, took)
		}
	}
	st := client.Stats()
	t.Logf("client: sent %v, received %v, %d RPCs unreachable, %d timed out", st.TxPackets, st.RxPackets, st.RPCsUnreachable, st.RPCTimeouts)
	if st.RPCsUnreachable != 2 || st.RPCTimeouts != 0 {
		t.Errorf("stats: %d RPCs unreachable, %d timed out; want 2 and 0", st.RPCsUnreachable, st.RPCTimeouts)
	}
}

// TestLiveSlowServer calls the slow echo server named by
// HOMA_INTEROP_SLOW_PEER, which holds each reply back for longer than the
// client's peer timeout. The module answers the client's RESENDs for a
// request in service with BUSY, and BUSY says the server is alive: every
// RPC must complete, one at a time and three at once, and each must
// have outlived the RESENDs that end an RPC whose peer says nothing.
func TestLiveSlowServer(t *testing.T) {
	livePeer(t)
	addr := os.Getenv(slowPeerEnv)
	if addr == "" {
		t.Skipf("%s is not set: the Linux module's echo server (homa_tool) has no slow mode; set it to HOST:PORT of a slow echo server on the module, such as the rig's scripts/rig/slowecho -delay 1s", slowPeerEnv)
	}
	slow, err := netip.ParseAddrPort(addr)
	if err != nil || slow.Port() == 0 {
		t.Fatalf("%s=%q: want HOST:PORT with a numeric address: %v", slowPeerEnv, addr, err)
	}
	runSlow(t, openLiveClient(t, slow), netip.AddrPortFrom(slow.Addr().Unmap(), slow.Port()))
}

// TestLiveSlowOwnServer runs TestLiveSlowServer's checks against this
// implementation's own slow echo server on 127.0.0.1: the checks
// themselves are known to work.
func TestLiveSlowOwnServer(t *testing.T) {
	server, addr := startOwnServer(t, 300*time.Millisecond)
	defer server.close(t)
	runSlow(t, openLiveClient(t, addr), addr)
}

// runSlow is TestLiveSlowServer's body against the slow echo server at
// peer. Sizes: one packet, several, and more than the unscheduled bytes.
// The server holds each reply longer than the time in which a silent
// peer fails an RPC (the 20 RESENDs of a timeout at the plain timing,
// 105 ms; the own server waits 300 ms, the rig's slowecho 1 s): each RPC
// must complete, none time out. The durations are logged, not asserted.
// How many
// RESENDs the client sends, and so how many BUSYs come back, says
// little: a client that hears BUSY, or whose RESENDs turn out unneeded,
// backs its RESENDs to that server off (package resend's Backoff), and
// after the first RPC may send none while the server works.
func runSlow(t *testing.T, client *sock.Socket, peer netip.AddrPort) {
	sizes := []int{100, 5000, 200_000}
	for _, n := range sizes {
		before := client.Stats()
		start := time.Now()
		if err := echo(client, peer, randomBytes(n, uint64(7000+n))); err != nil {
			t.Errorf("%d bytes: %v", n, err)
			continue
		}
		took := time.Since(start)
		after := client.Stats()
		busy := after.RxPackets[wire.TypeBusy] - before.RxPackets[wire.TypeBusy]
		resends := after.ResendsSent - before.ResendsSent
		t.Logf("%d bytes: %v; the client sent %d RESENDs and received %d BUSYs while waiting", n, took, resends, busy)
	}
	before := client.Stats()
	start := time.Now()
	var wg sync.WaitGroup
	for i, n := range sizes {
		wg.Go(func() {
			if err := echo(client, peer, randomBytes(n, uint64(8000+i))); err != nil {
				t.Errorf("concurrent %d bytes: %v", n, err)
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	after := client.Stats()
	busy := after.RxPackets[wire.TypeBusy] - before.RxPackets[wire.TypeBusy]
	t.Logf("three at once: %v, %d BUSYs", took, busy)
	if after.RPCTimeouts != 0 {
		t.Errorf("%d RPCs timed out", after.RPCTimeouts)
	}
	logRawDrops(t, "client")
}

// livePeer returns the echo server named by HOMA_INTEROP_PEER, or skips
// the test when it is not set.
func livePeer(t *testing.T) netip.AddrPort {
	t.Helper()
	addr := os.Getenv(peerEnv)
	if addr == "" {
		t.Skipf("%s is not set: set it to HOST:PORT of an echo server on the Linux Homa module (see interop/README.md) to run the live tests", peerEnv)
	}
	peer, err := netip.ParseAddrPort(addr)
	if err != nil || peer.Port() == 0 {
		t.Fatalf("%s=%q: want HOST:PORT with a numeric address: %v", peerEnv, addr, err)
	}
	return netip.AddrPortFrom(peer.Addr().Unmap(), peer.Port())
}

// unspecifiedFor is the unspecified address of a's family.
func unspecifiedFor(a netip.Addr) netip.Addr {
	if a.Is6() {
		return netip.IPv6Unspecified()
	}
	return netip.IPv4Unspecified()
}

// openLiveClient opens a raw-IP client socket of the address family of
// peer, closed when the test ends, or skips without raw sockets.
func openLiveClient(t *testing.T, peer netip.AddrPort) *sock.Socket {
	t.Helper()
	client, err := sock.Open(netip.AddrPortFrom(unspecifiedFor(peer.Addr()), 0), &patient)
	if errors.Is(err, sock.ErrPermission) {
		t.Skipf("needs raw IP sockets (root or CAP_NET_RAW): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := client.Close(); err != nil {
			t.Error(err)
		}
	})
	return client
}

package interop

// The live suite: this implementation's client, over raw IP protocol 146,
// against a real Homa echo server, normally the Linux module's (see
// README.md). It runs when HOMA_INTEROP_PEER names the server.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/homa-go/homa/homa"
	"github.com/homa-go/homa/homa/core"
	"github.com/homa-go/homa/homa/netio"
	"github.com/homa-go/homa/homa/wire"
	"github.com/homa-go/homa/resend"
	"github.com/homa-go/homa/sock"
)

// peerEnv names the echo server of the live suite: HOST:PORT.
const peerEnv = "HOMA_INTEROP_PEER"

// liveSizes are the message sizes of the live suite: the smallest, small
// ones, one packet at MTU 1500, the unscheduled limit and one byte past
// it, a scheduled message and the largest.
var liveSizes = []int{1, 100, 1400, 40_000, 40_001, 200_000, 1_000_000}

// liveTimeout bounds each part of the live suite.
const liveTimeout = 60 * time.Second

// patient is the configuration of the live suite's sockets: the
// default peer timeout (20 unanswered RESENDs, as the Linux module),
// said explicitly because the suite depends on it: a loaded test machine,
// where both ends may share the CPUs, must not fail RPCs to a live peer.
var patient = sock.Config{Transport: sock.Raw, PeerTimeout: 105 * time.Millisecond}

// TestLive runs the live suite against the echo server named by
// HOMA_INTEROP_PEER.
func TestLive(t *testing.T) {
	runLive(t, livePeer(t))
}

// TestLiveOwnServer runs the live suite against this implementation's own
// echo server on 127.0.0.1 (raw IP, as "homa serve" runs it), pointing
// HOMA_INTEROP_PEER at it: the suite itself is known to work.
func TestLiveOwnServer(t *testing.T) {
	server, addr := startOwnServer(t, 0)
	defer server.close(t)
	t.Setenv(peerEnv, addr.String())
	TestLive(t)
}

// ownServer is an echo server on this implementation.
type ownServer struct {
	s    *sock.Socket
	wg   sync.WaitGroup
	done chan struct{} // closed by close: delayed replies are dropped
}

// startOwnServer opens a raw-IP echo server on a free port of 127.0.0.1
// with four workers, each holding its reply back for delay, or skips the
// test without raw sockets.
func startOwnServer(t *testing.T, delay time.Duration) (*ownServer, netip.AddrPort) {
	var s *sock.Socket
	for range 50 {
		addr := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(20000+rand.IntN(10000)))
		var err error
		s, err = sock.Open(addr, &patient)
		if errors.Is(err, sock.ErrPermission) {
			t.Skipf("needs raw IP sockets (root or CAP_NET_RAW): %v", err)
		}
		if errors.Is(err, sock.ErrPortInUse) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		break
	}
	if s == nil {
		t.Fatal("no free Homa port")
	}
	o := &ownServer{s: s, done: make(chan struct{})}
	for range 4 {
		o.wg.Go(func() {
			for {
				m, err := s.Recv(context.Background(), sock.Any)
				if err != nil {
					return
				}
				if delay > 0 {
					select {
					case <-time.After(delay):
					case <-o.done:
					}
				}
				_ = s.Reply(m, m.Data) // fails only for a client that gave up, or after close
				m.Release()
			}
		})
	}
	return o, s.LocalAddr()
}

func (o *ownServer) close(t *testing.T) {
	close(o.done)
	if err := o.s.Close(); err != nil {
		t.Error(err)
	}
	o.wg.Wait()
}

// runLive is the live suite against the echo server at peer.
func runLive(t *testing.T, peer netip.AddrPort) {
	client := openLiveClient(t, peer)

	t.Run("sizes", func(t *testing.T) {
		for _, n := range liveSizes {
			if err := echo(client, peer, randomBytes(n, uint64(n))); err != nil {
				t.Errorf("%d bytes: %v", n, err)
			}
		}
	})
	t.Run("100 concurrent", func(t *testing.T) {
		concurrent(t, client, peer, 100)
	})
	logStats(t, "client", client.Stats())
	logRawDrops(t, "client")
	t.Run("lossy", func(t *testing.T) {
		lossy(t, unspecifiedFor(peer.Addr()), peer)
	})
}

// logStats logs what explains a live run: packets by type, drops, and
// the client's loss recovery.
func logStats(t *testing.T, what string, st sock.Stats) {
	t.Helper()
	t.Logf("%s: %d RPCs completed, %d timed out; sent %v, received %v, drops %v; %d RESENDs sent, %d duplicate DATA received, %d retransmissions",
		what, st.RPCsCompleted, st.RPCTimeouts, st.TxPackets, st.RxPackets, st.Drops, st.ResendsSent, st.DuplicatePackets, st.Retransmits)
}

// echo sends req to the echo server and checks the response.
func echo(s *sock.Socket, peer netip.AddrPort, req []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), liveTimeout)
	defer cancel()
	m, err := s.Call(ctx, peer, req)
	if err != nil {
		return err
	}
	defer m.Release()
	if !bytes.Equal(m.Data, req) {
		return fmt.Errorf("echo of %d bytes came back as %d different bytes", len(req), len(m.Data))
	}
	return nil
}

// echoEngine is echo on an engine endpoint.
func echoEngine(e *homa.Endpoint, peer netip.AddrPort, req []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), liveTimeout)
	defer cancel()
	id, err := e.Send(peer, req, 0)
	if err != nil {
		return err
	}
	m, err := e.Recv(ctx, id)
	if err == nil {
		err = m.Err
	}
	if err != nil {
		return err
	}
	defer m.Release()
	if !bytes.Equal(m.Data, req) {
		return fmt.Errorf("echo of %d bytes came back as %d different bytes", len(req), len(m.Data))
	}
	return nil
}

// randomBytes returns n bytes from a generator seeded with seed.
func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 0x686f6d61))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// concurrent runs n echo RPCs at once, sizes cycling through the suite's
// (the largest left out, to bound memory), each with its own bytes.
func concurrent(t *testing.T, s *sock.Socket, peer netip.AddrPort, n int) {
	var wg sync.WaitGroup
	var failed atomic.Int32
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			size := liveSizes[i%(len(liveSizes)-1)]
			if err := echo(s, peer, randomBytes(size, uint64(1000+i))); err != nil {
				failed.Add(1)
				t.Errorf("RPC %d (%d bytes): %v", i, size, err)
			}
		}()
	}
	wg.Wait()
	if f := failed.Load(); f > 0 {
		t.Errorf("%d of %d concurrent RPCs failed", f, n)
	}
}

// lossy runs RPCs through a client that drops part of what it receives:
// every GRANT, and one DATA packet in dataEvery. Without GRANTs the
// client's requests longer than the unscheduled 40,000 bytes stall until
// the server asks for the granted bytes with a RESEND (which grants them
// too); lost response DATA makes the client RESEND. Every payload must
// still come back intact, and both sides must have sent RESENDs.
func lossy(t *testing.T, local netip.Addr, peer netip.AddrPort) {
	conn, err := netio.OpenRaw(local, 0, &netio.Options{MTU: 1500})
	if err != nil {
		t.Fatal(err)
	}
	lc := &lossyConn{Conn: conn}
	// The engine itself, on the lossy Conn. Recovery through RESENDs
	// needs more patience than the default 20 RESENDs.
	e := homa.NewEndpoint(lc, homa.Config{Config: core.Config{Resend: resend.Config{TimeoutResends: 40}}})
	defer e.Close()
	sizes := []int{100, 5000, 200_000, 1_000_000}
	for i := range 16 {
		n := sizes[i%len(sizes)]
		if err := echoEngine(e, peer, randomBytes(n, uint64(5000+i))); err != nil {
			t.Fatalf("RPC %d (%d bytes) with loss: %v", i, n, err)
		}
	}
	st := e.Stats()
	logStats(t, "lossy client", st)
	logRawDrops(t, "lossy client")
	grants, data := lc.dropped[0].Load(), lc.dropped[1].Load()
	t.Logf("dropped %d GRANTs and %d DATA packets; the client sent %d RESENDs, the server %d",
		grants, data, st.ResendsSent, st.RxPackets[wire.TypeResend])
	if grants == 0 || data == 0 || st.ResendsSent == 0 || st.RxPackets[wire.TypeResend] == 0 {
		t.Errorf("want RESENDs from both sides")
	}
}

// dataEvery is the share of DATA packets lossyConn drops: one in this many.
const dataEvery = 10

// lossyConn drops received packets: every GRANT, and one DATA packet in
// dataEvery. It hides the optional Poller capability of the Conn it
// wraps, so the engine reads through ReadBatch.
type lossyConn struct {
	netio.Conn
	data    atomic.Uint64    // DATA packets received
	dropped [2]atomic.Uint64 // GRANTs, DATA packets dropped
}

// ReadBatch implements netio.Conn: it reads from the wrapped Conn and
// keeps only the packets that survive, reading again if none does.
func (c *lossyConn) ReadBatch(pkts []netio.Packet) (int, error) {
	for {
		n, err := c.Conn.ReadBatch(pkts)
		kept := 0
		for i := range pkts[:n] {
			if c.drop(pkts[i].Bytes()) {
				continue
			}
			pkts[kept], pkts[i] = pkts[i], pkts[kept] // Bufs are exchanged, never lost
			kept++
		}
		if kept > 0 || err != nil {
			return kept, err
		}
	}
}

// drop decides about one received packet.
func (c *lossyConn) drop(pkt []byte) bool {
	switch t, _ := wire.PeekType(pkt); t {
	case wire.TypeGrant:
		c.dropped[0].Add(1)
		return true
	case wire.TypeData:
		if c.data.Add(1)%dataEvery == 0 {
			c.dropped[1].Add(1)
			return true
		}
	}
	return false
}

package homa_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/homa-go/homa/contract"
	"github.com/homa-go/homa/homa"
	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/homa/netio"
)

var (
	serverAddr = netip.MustParseAddr("10.0.0.1")
	clientAddr = netip.MustParseAddr("10.0.0.2")
)

// serverAndConn opens, on nw, an endpoint at serverAddr:500 that parks
// at once (for testing/synctest bubbles) and a bare Conn at clientAddr
// and port (0: any), with which a test plays the client packet by
// packet; both close when the test ends.
func serverAndConn(t testing.TB, nw *memnet.Network, port uint16) (*homa.Endpoint, netio.Conn) {
	sc, err := nw.Open(serverAddr, 500)
	if err != nil {
		t.Fatal(err)
	}
	server := homa.NewEndpoint(sc, homa.Config{PollDuration: -1})
	t.Cleanup(func() { server.Close() })
	cc, err := nw.Open(clientAddr, port)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return server, cc
}

// Sizes every transport must carry: around the unscheduled limit, across
// packet boundaries, and the largest message.
var echoSizes = []int{1, 1400, 40_000, 40_001, 200_000, 1_000_000}

// pair is a server endpoint running an echo loop and a client endpoint.
type pair struct {
	server, client *homa.Endpoint
	dst            netip.AddrPort
	wg             sync.WaitGroup
}

// newMemPair starts an echo pair on a new in-memory network. The
// endpoints do not busy-poll (unless ecfg says otherwise), so that they
// can run in a synctest bubble, where the clock stands still while a
// goroutine spins.
func newMemPair(t testing.TB, cfg memnet.Config, ecfg homa.Config) (*pair, *memnet.Network) {
	t.Helper()
	if ecfg.PollDuration == 0 {
		ecfg.PollDuration = -1
	}
	nw := memnet.New(cfg)
	sc, err := nw.Open(serverAddr, 500)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := nw.Open(clientAddr, 0)
	if err != nil {
		t.Fatal(err)
	}
	p := startPair(t, homa.NewEndpoint(sc, ecfg), homa.NewEndpoint(cc, ecfg))
	return p, nw
}

// startPair runs an echo server on server until the test ends.
func startPair(t testing.TB, server, client *homa.Endpoint) *pair {
	p := &pair{server: server, client: client, dst: server.LocalAddr()}
	if !p.dst.Addr().IsValid() || p.dst.Addr().IsUnspecified() {
		t.Fatalf("server address %v", p.dst)
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			m, err := server.Recv(context.Background(), 0)
			if err != nil {
				return
			}
			if err := server.Reply(m.Peer.Addr(), m.ID, m.Data); err != nil {
				t.Errorf("reply: %v", err)
			}
			m.Release()
		}
	}()
	t.Cleanup(func() {
		client.Close()
		server.Close()
		p.wg.Wait()
	})
	return p
}

func payload(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, uint64(n)))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// call does one RPC and checks the echoed bytes.
func (p *pair) call(ctx context.Context, t testing.TB, req []byte) error {
	id, err := p.client.Send(p.dst, req, 7)
	if err != nil {
		return fmt.Errorf("send: %w", err)
	}
	m, err := p.client.Recv(ctx, id)
	if err != nil {
		return fmt.Errorf("recv %d bytes: %w", len(req), err)
	}
	defer m.Release()
	if m.Err != nil {
		return m.Err
	}
	if m.ID != id || m.Cookie != 7 || m.IsRequest() {
		return fmt.Errorf("response id %d cookie %d, want id %d cookie 7", m.ID, m.Cookie, id)
	}
	if !bytes.Equal(m.Data, req) {
		return fmt.Errorf("echo of %d bytes came back different (%d bytes)", len(req), len(m.Data))
	}
	return nil
}

func withTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestEchoMem(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, _ := newMemPair(t, memnet.Config{Seed: 1}, homa.Config{})
		for _, n := range echoSizes {
			if err := p.call(withTimeout(t, 20*time.Second), t, payload(1, n)); err != nil {
				t.Fatalf("%d bytes: %v", n, err)
			}
		}
		st := p.server.Stats()
		if st.GrantsSent == 0 {
			t.Errorf("no grants sent for messages above the unscheduled limit: %+v", st)
		}
		if st.TotalDrops() != 0 {
			t.Errorf("server dropped packets on a clean network: %v", st.Drops)
		}
	})
}

// TestEchoMemSmallMTU forces many packets per message (1500-byte MTU).
func TestEchoMemSmallMTU(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, _ := newMemPair(t, memnet.Config{Seed: 2, MTU: 1500}, homa.Config{})
		for _, n := range echoSizes {
			if err := p.call(withTimeout(t, 20*time.Second), t, payload(2, n)); err != nil {
				t.Fatalf("%d bytes: %v", n, err)
			}
		}
	})
}

// TestConcurrentRPCs runs 1,000 RPCs from 8 goroutines at once.
func TestConcurrentRPCs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, _ := newMemPair(t, memnet.Config{Seed: 3, MTU: 1500}, homa.Config{})
		runConcurrent(t, p, 8, 1000, 30*time.Second)
	})
}

func runConcurrent(t *testing.T, p *pair, workers, total int, limit time.Duration) {
	t.Helper()
	ctx := withTimeout(t, limit)
	spread(t, workers, total, func(i int) error {
		size := []int{1, 100, 1400, 5000, 40_001, 120_000}[i%6]
		return p.call(ctx, t, payload(uint64(i), size))
	})
	if st := p.client.Stats(); st.RPCsCompleted != uint64(total) {
		t.Errorf("client completed %d RPCs, want %d", st.RPCsCompleted, total)
	}
}

// TestReorderDuplicate: 5% reordering and 5% duplication, no loss: every
// RPC completes with the right bytes, and duplicates are recognised.
func TestReorderDuplicate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, nw := newMemPair(t, memnet.Config{Seed: 4, MTU: 1500, Reorder: 0.05, Duplicate: 0.05}, homa.Config{})
		runConcurrent(t, p, 8, 600, 60*time.Second)
		st := nw.Stats()
		if st.Duplicated == 0 || st.Reordered == 0 {
			t.Fatalf("network did not duplicate/reorder: %+v", st)
		}
		if p.server.Stats().DuplicatePackets+p.client.Stats().DuplicatePackets == 0 {
			t.Errorf("no duplicate DATA noticed although the network duplicated %d packets", st.Duplicated)
		}
		if n := p.server.Stats().RequestsReceived; n != 600 {
			t.Errorf("server executed %d requests for 600 RPCs", n)
		}
	})
}

func TestAbortAndCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New(memnet.Config{Seed: 5})
		sc, _ := nw.Open(serverAddr, 500) // a server that never answers
		cc, _ := nw.Open(clientAddr, 0)
		server, client := homa.NewEndpoint(sc, homa.Config{PollDuration: -1}), homa.NewEndpoint(cc, homa.Config{PollDuration: -1})
		defer server.Close()
		defer client.Close()
		dst := server.LocalAddr()

		id, err := client.Send(dst, []byte("x"), 1)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan *contract.Message)
		go func() {
			m, _ := client.Recv(context.Background(), id)
			done <- m
		}()
		// Wait for the goroutine to block; then abort.
		for client.Stats().ClientRPCs != 1 {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(10 * time.Millisecond)
		if err := client.Abort(id); err != nil {
			t.Fatal(err)
		}
		if m := <-done; m == nil || !errors.Is(m.Err, contract.ErrAborted) {
			t.Fatalf("waiter got %+v, want ErrAborted", m)
		}
		if err := client.Abort(id); !errors.Is(err, contract.ErrUnknownRPC) {
			t.Fatalf("second abort: %v", err)
		}
		// Aborted with nobody waiting for it: forgotten, never received.
		quiet, _ := client.Send(dst, []byte("q"), 3)
		if err := client.Abort(quiet); err != nil {
			t.Fatal(err)
		}
		short, cancelShort := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancelShort()
		if m, err := client.Recv(short, 0); err == nil {
			t.Fatalf("Recv(any) returned the quietly aborted RPC: %+v", m)
		}
		if n := client.Stats().ClientRPCs; n != 0 {
			t.Fatalf("%d client RPCs left after aborts", n)
		}

		id2, _ := client.Send(dst, []byte("y"), 2)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		if _, err := client.Recv(ctx, id2); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("recv with expired context: %v", err)
		}
		// The RPC survives a cancelled Recv and can still be waited for.
		if _, err := client.Recv(context.Background(), 424242); !errors.Is(err, contract.ErrUnknownRPC) {
			t.Fatalf("recv unknown id: %v", err)
		}
		if _, err := client.Send(dst, nil, 0); !errors.Is(err, contract.ErrMessageTooLong) {
			t.Fatalf("empty message: %v", err)
		}
		if _, err := client.Send(dst, make([]byte, contract.MaxMessage+1), 0); !errors.Is(err, contract.ErrMessageTooLong) {
			t.Fatalf("oversize message: %v", err)
		}
		if _, err := client.Send(netip.MustParseAddrPort("[::1]:500"), []byte("z"), 0); !errors.Is(err, contract.ErrBadAddress) {
			t.Fatalf("IPv6 destination on an IPv4 endpoint: %v", err)
		}
		if err := server.Reply(clientAddr, 12345, []byte("r")); !errors.Is(err, contract.ErrUnknownRPC) {
			t.Fatalf("reply to unknown RPC: %v", err)
		}
	})
}

func TestCloseUnblocks(t *testing.T) {
	nw := memnet.New(memnet.Config{Seed: 6})
	cc, _ := nw.Open(clientAddr, 0)
	client := homa.NewEndpoint(cc, homa.Config{})
	id, _ := client.Send(netip.AddrPortFrom(serverAddr, 500), []byte("x"), 0)
	errc := make(chan error, 2)
	go func() { _, err := client.Recv(context.Background(), 0); errc <- err }()
	go func() { _, err := client.Recv(context.Background(), id); errc <- err }()
	time.Sleep(10 * time.Millisecond)
	if err := client.Close(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-errc; !errors.Is(err, contract.ErrClosed) || !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Recv after Close: %v", err)
		}
	}
	if err := client.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := client.Send(netip.AddrPortFrom(serverAddr, 500), []byte("x"), 0); !errors.Is(err, contract.ErrClosed) {
		t.Fatalf("Send after Close: %v", err)
	}
}

// TestRecvAnyGetsResponses: responses with no specific waiter go to
// Recv(0), and Reply twice is refused.
func TestRecvAnyGetsResponses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, _ := newMemPair(t, memnet.Config{Seed: 7}, homa.Config{})
		want := map[uint64]bool{}
		for i := range 5 {
			id, err := p.client.Send(p.dst, []byte{byte(i)}, uint64(100+i))
			if err != nil {
				t.Fatal(err)
			}
			want[id] = true
		}
		ctx := withTimeout(t, 10*time.Second)
		for range 5 {
			m, err := p.client.Recv(ctx, 0)
			if err != nil {
				t.Fatal(err)
			}
			if !want[m.ID] || m.Cookie != 100+uint64(m.Data[0]) {
				t.Fatalf("unexpected response id %d cookie %d", m.ID, m.Cookie)
			}
			delete(want, m.ID)
		}
	})
}

// spread runs rpc(0..n-1) from workers goroutines, worker w taking
// w, w+workers, ...; a worker stops at its first error, which the test
// reports.
func spread(t testing.TB, workers, n int, rpc func(i int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				if err := rpc(i); err != nil {
					errs <- fmt.Errorf("rpc %d: %w", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestBusyReaderSleeps: while goroutines come back to Recv sooner than
// the background reader's grace (RPCs one after another, 100 µs apart),
// the grace timer never fires: each one that starts reading stops it.
func TestBusyReaderSleeps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, _ := newMemPair(t, memnet.Config{Seed: 9}, homa.Config{})
		if err := p.call(context.Background(), t, payload(1, 100)); err != nil {
			t.Fatal(err)
		}
		before := homa.ReaderWakeups(p.client)
		const calls = 200
		for i := range calls {
			if err := p.call(context.Background(), t, payload(uint64(i), 100)); err != nil {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Microsecond)
		}
		if w := homa.ReaderWakeups(p.client) - before; w != 0 {
			t.Fatalf("the client's grace timer fired %d times in %d RPCs 100 µs apart, want none", w, calls)
		}
	})
}

// TestSpinnerRunsTimers: a reader spinning on the socket runs the
// core's timers when they are due (runDue), instead of the timer
// goroutine: the client's pending acknowledgment goes out, and the
// server frees the RPC, with no timer wake-up.
func TestSpinnerRunsTimers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, _ := newMemPair(t, memnet.Config{Seed: 10}, homa.Config{})
		if err := p.call(context.Background(), t, payload(1, 100)); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if n := p.server.Stats().ServerRPCs; n != 1 {
			t.Fatalf("server holds %d RPCs, want the unacknowledged one", n)
		}
		homa.RunDue(p.client, 0) // not due yet: nothing happens
		synctest.Wait()
		if n := p.server.Stats().ServerRPCs; n != 1 {
			t.Fatalf("server holds %d RPCs before the acknowledgment was due, want 1", n)
		}
		homa.RunDue(p.client, 5*time.Millisecond)
		synctest.Wait()
		if n := p.server.Stats().ServerRPCs; n != 0 {
			t.Fatalf("server holds %d RPCs after the client's timers ran, want 0", n)
		}
		if w := p.client.Stats().TimerWakeups; w != 0 {
			t.Fatalf("the client's timer woke %d times, want 0", w)
		}
		// The timer, stopped by runDue, serves again when no reader
		// spins.
		if err := p.call(context.Background(), t, payload(2, 100)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		if n, w := p.server.Stats().ServerRPCs, p.client.Stats().TimerWakeups; n != 0 || w == 0 {
			t.Fatalf("server holds %d RPCs after 10 ms, the client's timer woke %d times; want 0 and some", n, w)
		}
	})
}

// TestIdleEndpointSleeps: an endpoint with nothing to do never wakes up:
// not when it never had an RPC, and not once its RPCs are over and
// acknowledged and the buffer pool has given back what they left in it
// (there is no periodic tick), and its background reader
// does not poll while a server goroutine waits in Recv.
func TestIdleEndpointSleeps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, _ := newMemPair(t, memnet.Config{Seed: 8}, homa.Config{})
		time.Sleep(10 * time.Second)
		if w := p.client.Stats().TimerWakeups + p.server.Stats().TimerWakeups; w != 0 {
			t.Fatalf("endpoints that never had an RPC woke %d times in 10 s", w)
		}
		for i := range 20 {
			if err := p.call(context.Background(), t, payload(uint64(i), 1000*i+1)); err != nil {
				t.Fatal(err)
			}
		}
		// Acknowledgments settle, and the buffer pool gives back what
		// the RPCs left in it (two trims a second apart, see trimPool).
		time.Sleep(4 * time.Second)
		before := p.client.Stats().TimerWakeups + p.server.Stats().TimerWakeups
		if before == 0 {
			t.Fatal("no timer ever ran, though acknowledgments were due")
		}
		readers := homa.ReaderWakeups(p.client) + homa.ReaderWakeups(p.server)
		time.Sleep(10 * time.Second)
		if w := p.client.Stats().TimerWakeups + p.server.Stats().TimerWakeups; w != before {
			t.Fatalf("idle endpoints woke %d times in 10 s", w-before)
		}
		// The server's goroutine waits in Recv, holding the socket: the
		// background reader waits for it to leave, not on a timer.
		if w := homa.ReaderWakeups(p.client) + homa.ReaderWakeups(p.server) - readers; w != 0 {
			t.Fatalf("idle endpoints' background readers woke %d times in 10 s", w)
		}
		if st := p.server.Stats(); st.ServerRPCs != 0 || st.RecvMemory != 0 {
			t.Fatalf("idle server holds %d RPCs, %d bytes", st.ServerRPCs, st.RecvMemory)
		}
	})
}

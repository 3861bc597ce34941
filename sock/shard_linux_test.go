package sock

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/homa-go/homa/grant"
	"github.com/homa-go/homa/homa/netio"
)

var loopback = netip.MustParseAddr("127.0.0.1")

// openSharded opens a UDP socket of n shards on port (0: a client
// port; otherwise a free server port is looked for from port on).
func openSharded(t *testing.T, port uint16, n int) (*Socket, *shards) {
	return openShardedOver(t, UDP, port, n)
}

// openShardedOver is openSharded over transport tr; over raw IP it
// skips the test when the process may not open raw sockets.
func openShardedOver(t *testing.T, tr Transport, port uint16, n int) (*Socket, *shards) {
	return openShardedWith(t, Config{Transport: tr, Shards: n}, port)
}

// openShardedWith is openSharded with cfg, on the engine backend.
func openShardedWith(t *testing.T, cfg Config, port uint16) (*Socket, *shards) {
	t.Helper()
	cfg.Backend = Engine
	for try := range 200 {
		p := port
		if p != 0 {
			p += uint16(try)
		}
		s, err := Open(netip.AddrPortFrom(loopback, p), &cfg)
		if errors.Is(err, netio.ErrPortInUse) && port != 0 {
			continue
		}
		if errors.Is(err, ErrPermission) {
			t.Skipf("skipping: raw sockets need CAP_NET_RAW: %v", err)
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s, s.b.(*shards)
	}
	t.Fatal("no free server port")
	return nil, nil
}

// openPlainOver opens a one-engine socket over transport tr, a server's
// when server is set.
func openPlainOver(t *testing.T, tr Transport, server bool) *Socket {
	t.Helper()
	for range 200 {
		var p uint16
		if server {
			p = uint16(20000 + rand.IntN(10000))
		}
		s, err := Open(netip.AddrPortFrom(loopback, p), &Config{Transport: tr, Backend: Engine})
		if errors.Is(err, netio.ErrPortInUse) {
			continue
		}
		if errors.Is(err, ErrPermission) {
			t.Skipf("skipping: raw sockets need CAP_NET_RAW: %v", err)
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	t.Fatal("no free port")
	return nil
}

// echo serves requests on s from workers goroutines until s closes.
func echo(t *testing.T, s *Socket, workers int) {
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				m, err := s.Recv(context.Background(), Any)
				if err != nil {
					return
				}
				if m.IsRequest() {
					_ = s.Reply(m, m.Data)
				}
				m.Release()
			}
		})
	}
	t.Cleanup(func() {
		s.Close()
		wg.Wait()
	})
}

func callEcho(t *testing.T, c *Socket, dst netip.AddrPort, seq int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req := []byte{byte(seq), byte(seq >> 8), 1, 2, 3}
	m, err := c.Call(ctx, dst, req)
	if err != nil {
		t.Fatalf("call %d to %v: %v", seq, dst, err)
	}
	if !bytes.Equal(m.Data, req) {
		t.Fatalf("call %d: echo differs", seq)
	}
	m.Release()
}

// clientsCovering opens one-engine UDP clients until every shard of n
// owns at least one of them.
func clientsCovering(t *testing.T, n int) []*Socket { return clientsCoveringOver(t, UDP, n) }

// clientsCoveringOver is clientsCovering over transport tr.
func clientsCoveringOver(t *testing.T, tr Transport, n int) []*Socket {
	var cs []*Socket
	covered := map[int]bool{}
	for len(covered) < n {
		c := openPlainOver(t, tr, false)
		cs = append(cs, c)
		covered[netio.ShardOf(c.LocalAddr(), n)] = true
	}
	return cs
}

// TestShardsPeerOneShard checks that all of a client's requests, and
// every packet about them, reach the shard of the client: each shard
// starts and answers exactly the server RPCs of its own clients, and
// drops nothing.
func TestShardsPeerOneShard(t *testing.T) {
	for _, tr := range []Transport{UDP, Raw} {
		t.Run(tr.String(), func(t *testing.T) { testShardsPeerOneShard(t, tr) })
	}
}

func testShardsPeerOneShard(t *testing.T, tr Transport) {
	const n = 3
	srv, g := openShardedOver(t, tr, 21000, n)
	echo(t, srv, 4)
	clients := clientsCoveringOver(t, tr, n)
	want := make([]uint64, n)
	for i, c := range clients {
		for j := range i + 2 {
			callEcho(t, c, srv.LocalAddr(), j)
		}
		want[netio.ShardOf(c.LocalAddr(), n)] += uint64(i + 2)
	}
	// A client whose response is late by a resend interval on a busy
	// machine asks again; its RESEND may come after the shard finished
	// the RPC, which drops it as stale (see checkDrops).
	var late uint64
	for _, c := range clients {
		ct := c.Stats()
		late += ct.ResendsSent + ct.ResentPackets
		c.Close() // acknowledges its last RPC
	}
	var total uint64
	for k, e := range g.eps {
		st := e.Stats()
		if st.ServerRPCsStarted != want[k] || st.RequestsReceived != want[k] || st.ServerRPCsCompleted != want[k] {
			t.Errorf("shard %d: %d server RPCs started, %d requests received, %d answered; want %d",
				k, st.ServerRPCsStarted, st.RequestsReceived, st.ServerRPCsCompleted, want[k])
		}
		if d, stale := st.TotalDrops(), st.Drops[DropStale]; d != stale || stale > late {
			t.Errorf("shard %d dropped %d packets: %v (its clients sent %d RESENDs and retransmissions)", k, d, st.Drops, late)
		}
		total += st.RequestsReceived
	}
	if s := srv.Stats(); s.RequestsReceived != total {
		t.Errorf("socket Stats: %d requests received, shards %d", s.RequestsReceived, total)
	}
}

// TestShardsClientResponse checks that a sharded client sends each RPC
// from the shard of its server and gets its response there, that ids
// are unique per socket and name their shard, and that Recv(id),
// Recv(Any) and Abort take the socket's ids.
func TestShardsClientResponse(t *testing.T) {
	for _, tr := range []Transport{UDP, Raw} {
		t.Run(tr.String(), func(t *testing.T) { testShardsClientResponse(t, tr) })
	}
}

func testShardsClientResponse(t *testing.T, tr Transport) {
	const n = 3
	cli, g := openShardedOver(t, tr, 0, n)
	var servers []*Socket
	covered := map[int]bool{}
	for len(covered) < n {
		s := openPlainOver(t, tr, true)
		echo(t, s, 1)
		servers = append(servers, s)
		covered[netio.ShardOf(s.LocalAddr(), n)] = true
	}
	ids := map[uint64]bool{}
	want := make([]uint64, n)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for round := range 3 {
		for i, s := range servers {
			k := netio.ShardOf(s.LocalAddr(), n)
			id, err := cli.Send(s.LocalAddr(), []byte{byte(i)}, uint64(i))
			if err != nil {
				t.Fatal(err)
			}
			if ids[id] || id&1 != 0 {
				t.Fatalf("id %#x given twice, or odd", id)
			}
			ids[id] = true
			if ks, _, ok := g.wire(id); !ok || ks != k {
				t.Fatalf("id %#x names shard %d (ok %v); the server's is %d", id, ks, ok, k)
			}
			want[k]++
			var m *Message
			if round == 0 {
				m, err = cli.Recv(ctx, id)
			} else {
				m, err = cli.Recv(ctx, Any)
			}
			if err != nil || m.ID != id || m.Cookie != uint64(i) || m.Err != nil {
				t.Fatalf("round %d: Recv = %+v, %v; want the response of %#x", round, m, err, id)
			}
			m.Release()
		}
	}
	for k, e := range g.eps {
		if st := e.Stats(); st.RPCsStarted != want[k] || st.RPCsCompleted != want[k] {
			t.Errorf("shard %d: %d RPCs started, %d completed; want %d", k, st.RPCsStarted, st.RPCsCompleted, want[k])
		}
	}
	// Abort and Recv of an aborted id, through the socket's ids.
	silent := netip.AddrPortFrom(loopback, 9) // nothing serves it
	id, err := cli.Send(silent, []byte("x"), 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := cli.Abort(id); err != nil {
		t.Fatalf("Abort(%#x): %v", id, err)
	}
	if _, err := cli.Recv(ctx, id); !errors.Is(err, ErrUnknownRPC) {
		t.Fatalf("Recv of an aborted id: %v, want ErrUnknownRPC", err)
	}
	var op *OpError
	if err := cli.Abort(id ^ 0x00ff<<48); !errors.As(err, &op) || !errors.Is(err, ErrUnknownRPC) || op.ID != id^0x00ff<<48 {
		t.Fatalf("Abort of an id of no shard: %v", err)
	}
}

// TestShardsRecvAny checks that goroutines in Recv(Any) receive from
// every shard: one goroutine for four shards (it waits in one and
// covers the others), and eight.
func TestShardsRecvAny(t *testing.T) {
	const n = 4
	for _, workers := range []int{1, 2, 8} {
		srv, g := openSharded(t, 22000, n)
		echo(t, srv, workers)
		clients := clientsCovering(t, n)
		var wg sync.WaitGroup
		for i, c := range clients {
			wg.Go(func() {
				for j := range 20 {
					callEcho(t, c, srv.LocalAddr(), i*100+j)
				}
			})
		}
		wg.Wait()
		for k, e := range g.eps {
			if e.Stats().RequestsReceived == 0 {
				t.Errorf("%d workers: shard %d received nothing", workers, k)
			}
		}
	}
}

// TestShardsClose checks that Close closes every shard: waiting
// goroutines end with ErrClosed, sends fail, and the port is free.
func TestShardsClose(t *testing.T) {
	base := runtime.NumGoroutine()
	s, g := openSharded(t, 23000, 3)
	// One goroutine in Recv(Any): it waits in one shard, helpers in
	// the two others.
	errs := make(chan error, 1)
	go func() {
		_, err := s.Recv(context.Background(), Any)
		errs <- err
	}()
	for ready := false; !ready; runtime.Gosched() { // Close works either way; this makes it meet them
		calls, helpers := 0, 0
		for k := range g.slots {
			g.slots[k].mu.Lock()
			calls += len(g.slots[k].calls)
			if g.slots[k].helper != nil {
				helpers++
			}
			g.slots[k].mu.Unlock()
		}
		ready = calls == 1 && helpers == 2
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errs; !errors.Is(err, ErrClosed) {
		t.Fatalf("Recv after Close: %v", err)
	}
	if _, err := s.Send(netip.AddrPortFrom(loopback, 9), []byte("x"), 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("Send after Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	again, err := Open(s.LocalAddr(), &Config{Transport: UDP})
	if err != nil {
		t.Fatalf("the port of a closed sharded socket: %v", err)
	}
	again.Close()
	// The engines' goroutines and the helpers of the waits are gone
	// (timer goroutines may take a moment to end).
	for end := time.Now().Add(5 * time.Second); runtime.NumGoroutine() > base; runtime.Gosched() {
		if time.Now().After(end) {
			t.Fatalf("%d goroutines after Close, %d before Open", runtime.NumGoroutine(), base)
		}
	}
}

// TestShardsConfig checks what Shards refuses.
func TestShardsConfig(t *testing.T) {
	for _, cfg := range []*Config{
		{Transport: Raw, Backend: Kernel, Shards: 2},
		{Transport: UDP, Shards: -1},
		{Transport: UDP, Shards: netio.MaxShards + 1},
	} {
		if s, err := Open(netip.AddrPortFrom(loopback, 0), cfg); err == nil {
			s.Close()
			t.Errorf("Open with %+v succeeded", cfg)
		}
	}
}

// TestShardsNoListener checks that a sharded client calling a closed
// port fails with ErrNoListener, as one engine does: the ICMP report
// reaches the shard that sent the request.
func TestShardsNoListener(t *testing.T) {
	cli, _ := openSharded(t, 0, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for p := uint16(30201); p < 30209; p++ {
		if _, err := cli.Call(ctx, netip.AddrPortFrom(loopback, p), []byte("x")); !errors.Is(err, ErrNoListener) {
			t.Fatalf("call to closed port %d: %v, want ErrNoListener", p, err)
		}
	}
}

// TestShardsIncomingBudget checks that the shards of a socket grant
// from one budget: while clients of every shard send messages that need
// grants, the bounds of the shards' schedulers never add up past one
// engine's, and every byte borrowed comes back.
func TestShardsIncomingBudget(t *testing.T) {
	const n = 2
	srv, g := openSharded(t, 26000, n)
	echo(t, srv, 4)
	total := grant.DefaultMaxIncoming
	if got := srv.Stats().Grants.Limit; got != n*(total/(2*n)) {
		t.Fatalf("an idle socket's shards are bound to %d in all, want their floors, %d", got, n*(total/(2*n)))
	}
	var sampler sync.WaitGroup
	var stop atomic.Bool
	peak, peakLent, borrowing := 0, 0, 0 // borrowing: samples of bounds past the floors
	sampler.Go(func() {
		for !stop.Load() {
			st := srv.Stats()
			peak, peakLent = max(peak, st.Grants.Limit), max(peakLent, st.IncomingLent)
			if st.Grants.Limit > n*(total/(2*n)) {
				borrowing++
			}
			time.Sleep(100 * time.Microsecond)
		}
	})
	callsFrom(t, clientsCovering(t, n), srv.LocalAddr(), make([]byte, 1_000_000), 5)
	stop.Store(true)
	sampler.Wait()
	t.Logf("the shards' bounds added up to %d at most (one engine's: %d); %d bytes lent at most", peak, total, peakLent)
	if peak > total {
		t.Errorf("the shards' bounds added up to %d, past one engine's %d", peak, total)
	}
	// Stats reads the shards' bounds and then the budget's loans: a
	// loan the bounds showed may be repaid in between, but not in every
	// sample that saw one.
	if borrowing > 0 && peakLent == 0 {
		t.Errorf("%d samples showed bounds past the floors, none any bytes lent (IncomingLent)", borrowing)
	}
	if lent := g.incoming.Lent(); lent != 0 || srv.Stats().IncomingLent != 0 {
		t.Errorf("%d bytes still lent once every message arrived (Stats: %d)", lent, srv.Stats().IncomingLent)
	}
}

// TestShardsPacedLink checks a sharded socket whose engines pace one
// link (LinkMbps): they share its account, and large echoes to a
// client of every shard all complete.
func TestShardsPacedLink(t *testing.T) {
	const n = 2
	srv, g := openShardedWith(t, Config{Transport: UDP, Shards: n, LinkMbps: 5000}, 27000)
	echo(t, srv, 4)
	callsFrom(t, clientsCovering(t, n), srv.LocalAddr(), make([]byte, 300_000), 3)
	for k, e := range g.eps {
		if st := e.Stats(); st.Pacer.SentBytes == 0 || st.ServerRPCsCompleted == 0 {
			t.Errorf("shard %d: paced %d bytes, answered %d RPCs", k, st.Pacer.SentBytes, st.ServerRPCsCompleted)
		}
	}
}

// callsFrom has every client call dst with req times times, the clients
// at once, and waits for them.
func callsFrom(t *testing.T, clients []*Socket, dst netip.AddrPort, req []byte, times int) {
	var calls sync.WaitGroup
	for _, c := range clients {
		calls.Go(func() {
			for range times {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				m, err := c.Call(ctx, dst, req)
				cancel()
				if err != nil {
					t.Errorf("call: %v", err)
					return
				}
				m.Release()
			}
		})
	}
	calls.Wait()
}

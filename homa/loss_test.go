package homa_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/homa-go/homa/ack"
	"github.com/homa-go/homa/contract"
	"github.com/homa-go/homa/homa"
	"github.com/homa-go/homa/homa/core"
	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/homa/wire"
	"github.com/homa-go/homa/resend"
)

// lossConfig tolerates long runs of lost packets: at 30% loss a RESEND
// and its answer both get through only half the time, so the Linux
// default of 5 unanswered RESENDs would time healthy peers out.
var lossConfig = homa.Config{Config: core.Config{Resend: resend.Config{TimeoutResends: 40}}, PollDuration: -1}

// countingServer echoes requests and counts how often each request (named
// by its first 8 bytes) was executed.
type countingServer struct {
	mu    sync.Mutex
	execs map[uint64]int
	ids   map[uint64][]uint64 // server RPC ids that executed each request
}

func (c *countingServer) serve(e *homa.Endpoint) {
	for {
		m, err := e.Recv(context.Background(), 0)
		if err != nil {
			return
		}
		c.mu.Lock()
		k := binary.BigEndian.Uint64(m.Data)
		c.execs[k]++
		if c.ids != nil {
			c.ids[k] = append(c.ids[k], m.ID)
		}
		c.mu.Unlock()
		_ = e.Reply(m.Peer.Addr(), m.ID, m.Data)
		m.Release()
	}
}

// lossRun sends n RPCs (sizes cycling through sizes) from workers
// goroutines over a network with the given faults and returns their
// completion times. Every RPC must succeed with its own payload and
// execute exactly once.
func lossRun(t testing.TB, cfg memnet.Config, n, workers int, sizes []int) []time.Duration {
	nw := memnet.New(cfg)
	sc, _ := nw.Open(serverAddr, 500)
	cc, _ := nw.Open(clientAddr, 0)
	server, client := homa.NewEndpoint(sc, lossConfig), homa.NewEndpoint(cc, lossConfig)
	cs := &countingServer{execs: make(map[uint64]int), ids: make(map[uint64][]uint64)}
	done := make(chan struct{})
	go func() { cs.serve(server); close(done) }()
	defer func() { client.Close(); server.Close(); <-done }()

	ctx := withTimeout(t, 2*time.Minute)
	times := make([]time.Duration, n)
	spread(t, workers, n, func(i int) error {
		req := payload(uint64(i), sizes[i%len(sizes)])
		binary.BigEndian.PutUint64(req, uint64(i))
		start := time.Now()
		id, err := client.Send(server.LocalAddr(), req, 0)
		if err != nil {
			return err
		}
		m, err := client.Recv(ctx, id)
		if err != nil {
			return err
		}
		defer m.Release()
		if m.Err != nil {
			return m.Err
		}
		if !bytes.Equal(m.Data, req) {
			return fmt.Errorf("wrong payload for %d bytes", len(req))
		}
		times[i] = time.Since(start)
		return nil
	})
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for i := range n {
		if c := cs.execs[uint64(i)]; c != 1 {
			t.Errorf("request %d executed %d times, by server RPCs %x", i, c, cs.ids[uint64(i)])
		}
	}
	st := nw.Stats()
	if cfg.Loss > 0 && st.Lost == 0 {
		t.Fatalf("network lost nothing: %+v", st)
	}
	t.Logf("loss %.0f%%: %d RPCs; network %+v; client resends %d, server resends %d, retransmits %d+%d",
		cfg.Loss*100, n, st, client.Stats().ResendsSent, server.Stats().ResendsSent,
		client.Stats().Retransmits, server.Stats().Retransmits)
	return times
}

// TestLoss: every packet type is lost at 1%, 10% and 30%, with 5%
// duplication and 5% reordering on top: every RPC completes with its own
// payload, and each request is executed exactly once.
func TestLoss(t *testing.T) {
	for _, loss := range []float64{0.01, 0.10, 0.30} {
		t.Run(fmt.Sprintf("%.0f%%", loss*100), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := memnet.Config{Seed: uint64(loss * 1000), MTU: 1500, Loss: loss, Duplicate: 0.05, Reorder: 0.05}
				lossRun(t, cfg, 2000, 32, []int{100, 100, 100, 5000, 100_000})
			})
		})
	}
}

// TestPeerTimeout: a server that vanishes makes the client's RPC fail
// with ErrPeerTimeout; a new server on the same address is usable again.
func TestPeerTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New(memnet.Config{Seed: 20})
		sc, _ := nw.Open(serverAddr, 500)
		cc, _ := nw.Open(clientAddr, 0)
		server, client := homa.NewEndpoint(sc, homa.Config{PollDuration: -1}), homa.NewEndpoint(cc, homa.Config{PollDuration: -1})
		defer client.Close()
		server.Close() // gone before the request arrives
		ctx := withTimeout(t, 10*time.Second)
		id, err := client.Send(netip.AddrPortFrom(serverAddr, 500), []byte("anyone?"), 0)
		if err != nil {
			t.Fatal(err)
		}
		m, err := client.Recv(ctx, id)
		if err != nil || !errors.Is(m.Err, contract.ErrPeerTimeout) {
			t.Fatalf("RPC to a vanished server: %v / %+v, want ErrPeerTimeout", err, m)
		}
		if st := client.Stats(); st.PeerTimeouts != 1 || st.ResendsSent != resend.DefaultTimeoutResends || st.ClientRPCs != 0 {
			t.Fatalf("after the timeout: %d timeouts, %d resends, %d RPCs; want 1, %d, 0",
				st.PeerTimeouts, st.ResendsSent, st.ClientRPCs, resend.DefaultTimeoutResends)
		}
		sc2, err := nw.Open(serverAddr, 500)
		if err != nil {
			t.Fatal(err)
		}
		p := startPair(t, homa.NewEndpoint(sc2, homa.Config{PollDuration: -1}), client)
		if err := p.call(ctx, t, []byte("again")); err != nil {
			t.Fatalf("RPC to the restarted server: %v", err)
		}
	})
}

// TestBusyKeepsAlive: a server that takes far longer than the timeout to
// answer is not declared dead: it answers RESENDs with BUSY.
func TestBusyKeepsAlive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New(memnet.Config{Seed: 21})
		sc, _ := nw.Open(serverAddr, 500)
		cc, _ := nw.Open(clientAddr, 0)
		server, client := homa.NewEndpoint(sc, homa.Config{PollDuration: -1}), homa.NewEndpoint(cc, homa.Config{PollDuration: -1})
		defer server.Close()
		defer client.Close()
		go func() {
			m, err := server.Recv(context.Background(), 0)
			if err == nil {
				time.Sleep(150 * time.Millisecond) // ~5 timeouts' worth of ticks
				server.Reply(m.Peer.Addr(), m.ID, []byte("late"))
			}
		}()
		id, _ := client.Send(server.LocalAddr(), []byte("slow"), 0)
		m, err := client.Recv(withTimeout(t, 10*time.Second), id)
		if err != nil || m.Err != nil || string(m.Data) != "late" {
			t.Fatalf("slow RPC: %v %+v", err, m)
		}
		if server.Stats().TxPackets[wire.TypeBusy] == 0 {
			t.Fatal("server sent no BUSY")
		}
	})
}

// TestClientGone: the client vanishes after its request (its host goes
// silent: not even the acknowledgments a closing endpoint sends get
// out); the server answers, asks for the acknowledgment with NEED_ACK,
// and forgets the RPC after ReclaimTicks.
func TestClientGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var gone atomic.Bool
		nw := memnet.New(memnet.Config{Seed: 22, Drop: func(src, _ netip.Addr, _ []byte) bool {
			return gone.Load() && src == clientAddr
		}})
		sc, _ := nw.Open(serverAddr, 500)
		cc, _ := nw.Open(clientAddr, 0)
		cfg := homa.Config{Config: core.Config{Ack: ack.Config{ReclaimTicks: 50}}, PollDuration: -1}
		server, client := homa.NewEndpoint(sc, cfg), homa.NewEndpoint(cc, cfg)
		defer server.Close()
		if _, err := client.Send(server.LocalAddr(), []byte("bye"), 0); err != nil {
			t.Fatal(err)
		}
		m, err := server.Recv(withTimeout(t, 5*time.Second), 0)
		if err != nil {
			t.Fatal(err)
		}
		gone.Store(true)
		client.Close()
		if err := server.Reply(m.Peer.Addr(), m.ID, []byte("too late")); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for server.Stats().ServerRPCs != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("server still holds the RPC: %+v", server.Stats())
			}
			time.Sleep(5 * time.Millisecond)
		}
		if st := server.Stats(); st.Reclaimed != 1 || st.NeedAcksSent == 0 {
			t.Fatalf("reclaimed %d, NEED_ACKs %d; want 1 and some", st.Reclaimed, st.NeedAcksSent)
		}
	})
}

// TestLateDuplicateRequest: a request packet delayed until after its RPC
// was answered and acknowledged does not run the handler again.
func TestLateDuplicateRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var captured []byte
		nw := memnet.New(memnet.Config{Seed: 23, Drop: func(src, dst netip.Addr, pkt []byte) bool {
			mu.Lock()
			defer mu.Unlock()
			if dst == serverAddr && captured == nil && len(pkt) > 11 && wire.Type(pkt[11]) == wire.TypeData {
				captured = slices.Clone(pkt)
			}
			return false
		}})
		p := func() *pair {
			sc, _ := nw.Open(serverAddr, 500)
			cc, _ := nw.Open(clientAddr, 0)
			return startPair(t, homa.NewEndpoint(sc, homa.Config{PollDuration: -1}), homa.NewEndpoint(cc, homa.Config{PollDuration: -1}))
		}()
		ctx := withTimeout(t, 10*time.Second)
		for i := range 6 { // the 6th request piggybacks or the 5th flushes the acks
			if err := p.call(ctx, t, []byte{byte(i)}); err != nil {
				t.Fatal(err)
			}
		}
		deadline := time.Now().Add(10 * time.Second)
		for p.server.Stats().ServerRPCsFreed < 5 {
			if time.Now().After(deadline) {
				t.Fatalf("server did not free the acknowledged RPCs: %+v", p.server.Stats())
			}
			time.Sleep(5 * time.Millisecond)
		}
		before := p.server.Stats()
		mu.Lock()
		p.server.HandlePacket(captured, clientAddr)
		mu.Unlock()
		after := p.server.Stats()
		if after.RequestsReceived != before.RequestsReceived || after.Drops[contract.DropStale] != before.Drops[contract.DropStale]+1 {
			t.Fatalf("late duplicate: requests %d -> %d, stale drops %d -> %d",
				before.RequestsReceived, after.RequestsReceived, before.Drops[contract.DropStale], after.Drops[contract.DropStale])
		}
	})
}

// TestStalledRPCCompletes: while every packet of one RPC's request is
// lost, 300 later RPCs from the same client port finish. Once packets get
// through again, the stalled RPC must still complete, exactly once. (The
// case where the later RPCs push the server's duplicate-protection floor
// past the stalled id is homa/core's TestFloorDoesNotStarveSim: it takes
// more than 32,768 RPCs.)
func TestStalledRPCCompletes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var block atomic.Bool
		var stalled atomic.Uint64 // the RPC whose packets are lost while block
		block.Store(true)
		nw := memnet.New(memnet.Config{Seed: 24, Drop: func(_, dst netip.Addr, pkt []byte) bool {
			var p wire.Packet
			if dst != serverAddr || !block.Load() || p.Parse(pkt) != nil {
				return false
			}
			return string(p.Data.Payload) == "stalled" || (p.Type != wire.TypeData && p.Common.SenderID == stalled.Load())
		}})
		sc, _ := nw.Open(serverAddr, 500)
		cc, _ := nw.Open(clientAddr, 0)
		cfg := homa.Config{Config: core.Config{Resend: resend.Config{TimeoutResends: 10_000}}, PollDuration: -1}
		p := startPair(t, homa.NewEndpoint(sc, cfg), homa.NewEndpoint(cc, cfg))
		ctx := withTimeout(t, 20*time.Second)

		id, err := p.client.Send(p.dst, []byte("stalled"), 0)
		if err != nil {
			t.Fatal(err)
		}
		stalled.Store(id)
		for i := range 300 {
			if err := p.call(ctx, t, []byte(fmt.Sprint(i))); err != nil {
				t.Fatal(err)
			}
		}
		for p.server.Stats().ServerRPCsFreed < 300 {
			if ctx.Err() != nil {
				t.Fatalf("later RPCs not acknowledged: %+v", p.server.Stats())
			}
			time.Sleep(time.Millisecond)
		}
		block.Store(false)
		m, err := p.client.Recv(withTimeout(t, 3*time.Second), id)
		if err != nil || m.Err != nil || string(m.Data) != "stalled" {
			t.Fatalf("stalled RPC: %v %+v (server drops %v)", err, m, p.server.Stats().Drops)
		}
		if n := p.server.Stats().RequestsReceived; n != 301 {
			t.Fatalf("server executed %d requests, want 301", n)
		}
	})
}

// TestLivePeerNotTimedOut: every packet of one RPC is lost for 80 ms (16
// RESEND intervals, within its timeout) while other RPCs with the same
// server go on: the RPC completes once its packets get through, and no
// RPC fails. (An RPC starved for longer than its timeout fails even while
// its server answers for others: homa/core's TestLivenessPerRPC.)
func TestLivePeerNotTimedOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var block atomic.Bool
		var victim atomic.Uint64
		block.Store(true)
		nw := memnet.New(memnet.Config{Seed: 25, Drop: func(src, dst netip.Addr, pkt []byte) bool {
			var p wire.Packet
			if !block.Load() || p.Parse(pkt) != nil {
				return false
			}
			id := p.Common.SenderID
			switch p.Type {
			case wire.TypeData:
				id = p.Data.SenderID
			case wire.TypeResend:
				id = p.Resend.SenderID
			}
			return string(p.Data.Payload) == "victim" || (id|1 == victim.Load()|1 && id != 0)
		}})
		sc, _ := nw.Open(serverAddr, 500)
		cc, _ := nw.Open(clientAddr, 0)
		p := startPair(t, homa.NewEndpoint(sc, homa.Config{PollDuration: -1}), homa.NewEndpoint(cc, homa.Config{PollDuration: -1}))
		ctx := withTimeout(t, 20*time.Second)
		id, err := p.client.Send(p.dst, []byte("victim"), 0)
		if err != nil {
			t.Fatal(err)
		}
		victim.Store(id)
		start := time.Now()
		for i := 0; time.Since(start) < 80*time.Millisecond; i++ {
			if err := p.call(ctx, t, []byte(fmt.Sprint(i))); err != nil {
				t.Fatalf("RPC %d next to the starved one: %v", i, err)
			}
			time.Sleep(time.Millisecond) // on the bubble's clock
		}
		block.Store(false)
		m, err := p.client.Recv(ctx, id)
		if err != nil || m.Err != nil || string(m.Data) != "victim" {
			t.Fatalf("starved RPC: %v %+v", err, m)
		}
		if st := p.client.Stats(); st.PeerTimeouts != 0 || st.ResendsSent == 0 {
			t.Fatalf("peer timeouts %d (want 0), resends %d (want some)", st.PeerTimeouts, st.ResendsSent)
		}
	})
}

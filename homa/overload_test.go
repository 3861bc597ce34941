package homa_test

import (
	"context"
	"net/netip"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/homa-go/homa/homa"
	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/homa/wire"
)

// stalledRPCs is how many RPCs wait on a stalled host in TestControlBudget.
const stalledRPCs = 200

// TestControlBudget: when a host stalls with many RPCs in progress,
// control traffic to it stays bounded per tick instead of growing with
// the number of RPCs. The server's application takes no request for a
// while: the client RESENDs at most once per tick (for the RPC that has
// waited longest), the server answers BUSY, and nothing times out. Then
// the client's acknowledgments are lost: the server sends at most
// maxNeedAcksPerTick (8) NEED_ACKs per tick. Without the budgets the
// client would send a RESEND per RPC every 5 ticks (about 2,400 here)
// and the server a NEED_ACK per RPC every tick (about 6,000).
func TestControlBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var dropAcks atomic.Bool
		nw := memnet.New(memnet.Config{Seed: 7, Drop: func(_, _ netip.Addr, pkt []byte) bool {
			typ, err := wire.PeekType(pkt)
			return err == nil && typ == wire.TypeAck && dropAcks.Load()
		}})
		cfg := homa.Config{PollDuration: -1}
		sc, _ := nw.Open(serverAddr, 500)
		cc, _ := nw.Open(clientAddr, 0)
		server, client := homa.NewEndpoint(sc, cfg), homa.NewEndpoint(cc, cfg)
		defer server.Close()
		defer client.Close()

		ids := make([]uint64, stalledRPCs)
		for i := range ids {
			id, err := client.Send(server.LocalAddr(), payload(uint64(i), 100), 0)
			if err != nil {
				t.Fatal(err)
			}
			ids[i] = id
		}
		const stall = 60 * time.Millisecond
		time.Sleep(stall)
		ticks := uint64(stall / time.Millisecond)
		if st := client.Stats(); st.ResendsSent == 0 || st.ResendsSent > ticks+1 {
			t.Errorf("client sent %d RESENDs to one stalled host in %d ticks; want some, at most one per tick", st.ResendsSent, ticks)
		}
		if st := server.Stats(); st.TxPackets[wire.TypeBusy] == 0 {
			t.Errorf("server answered no RESEND with BUSY: %v", st.TxPackets)
		}

		// Serve everything; the client's acknowledgments are lost.
		dropAcks.Store(true)
		ctx := context.Background()
		for range stalledRPCs {
			if err := echoNext(ctx, server); err != nil {
				t.Fatal(err)
			}
		}
		for i, id := range ids {
			m, err := client.Recv(ctx, id)
			if err != nil || m.Err != nil {
				t.Fatalf("RPC %d: %v %v", i, err, m.Err)
			}
			m.Release()
		}
		before := server.Stats().NeedAcksSent
		const silent = 30 * time.Millisecond
		time.Sleep(silent)
		got := server.Stats().NeedAcksSent - before
		if limit := 8 * uint64(silent/time.Millisecond+1); got == 0 || got > limit {
			t.Errorf("server sent %d NEED_ACKs to one host in %v; want some, at most %d", got, silent, limit)
		}
		if st := client.Stats(); st.PeerTimeouts != 0 {
			t.Errorf("%d peer timeouts", st.PeerTimeouts)
		}
	})
}

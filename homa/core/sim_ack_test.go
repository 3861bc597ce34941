package core_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/homa-go/homa/contract"
	"github.com/homa-go/homa/homa/core"
	"github.com/homa-go/homa/homa/sim"
	"github.com/homa-go/homa/homa/wire"
)

// TestAcksRideRequests: a client with many RPCs outstanding that
// completes them in batches and sends as many new requests after each
// batch leaves its acknowledgments to the requests, one in each DATA
// header, instead of sending ACK packets; the acknowledgments of its
// last batch, which no request follows, go out in ACK packets a tick
// later, and the server frees every RPC without asking (NEED_ACK).
func TestAcksRideRequests(t *testing.T) {
	const (
		batch   = 16
		batches = 50
	)
	counts := map[wire.Type]int{}
	n := sim.New(sim.Config{Seed: 7, Drop: func(src, _ netip.AddrPort, pkt []byte) bool {
		if src == clientAP {
			if typ, err := wire.PeekType(pkt); err == nil {
				counts[typ]++
			}
		}
		return false
	}})
	srv := n.Listen(serverAP, core.Config{})
	echo(srv, n, 0, nil)
	cli := n.Listen(clientAP, core.Config{})
	var done []*contract.Message
	cli.OnMessage = func(_ *sim.Endpoint, m *contract.Message) { done = append(done, m) }
	for i := range batch {
		send(t, cli, serverAP, request(uint64(i), 100))
	}
	sent := batch
	for range batches - 1 {
		if !n.RunUntil(func() bool { return len(done) == batch }, time.Second) {
			t.Fatalf("%d of a batch of %d RPCs ended", len(done), batch)
		}
		for _, m := range done {
			if m.Err != nil {
				t.Fatal(m.Err)
			}
			m.Release()
			send(t, cli, serverAP, request(uint64(sent), 100))
			sent++
		}
		done = done[:0]
	}
	if !n.RunUntil(func() bool { return len(done) == batch }, time.Second) {
		t.Fatalf("%d of the last batch of %d RPCs ended", len(done), batch)
	}
	n.Run(n.Now() + 20*time.Millisecond)

	// The last batch's acknowledgments need ACK packets: at most
	// ceil(batch / MaxAcks) of them, and none before.
	if got, most := counts[wire.TypeAck], (batch+wire.MaxAcks-1)/wire.MaxAcks; got > most {
		t.Errorf("client sent %d ACK packets for %d RPCs, want at most %d (the last batch's)", got, sent, most)
	}
	st := srv.Core.Stats()
	if st.ServerRPCs != 0 || st.NeedAcksSent != 0 {
		t.Errorf("server holds %d RPCs and sent %d NEED_ACKs, want 0 and 0", st.ServerRPCs, st.NeedAcksSent)
	}
}

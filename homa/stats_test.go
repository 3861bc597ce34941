package homa_test

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/homa-go/homa/contract"
	"github.com/homa-go/homa/homa"
	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/homa/wire"
)

// statsSizes are RPC sizes across every size class and their edges, with
// the class and the size bucket (powers of two from 64 B) of each.
var statsSizes = []struct {
	n      int
	class  contract.SizeClass
	bucket int
}{
	{2, contract.Size1K, 0},          // <= 64
	{64, contract.Size1K, 0},         // <= 64
	{65, contract.Size1K, 1},         // <= 128
	{1000, contract.Size1K, 4},       // <= 1024
	{1001, contract.Size10K, 4},      // <= 1024
	{5000, contract.Size10K, 7},      // <= 8192
	{10_000, contract.Size10K, 8},    // <= 16384
	{10_001, contract.Size100K, 8},   // <= 16384
	{50_000, contract.Size100K, 10},  // <= 65536
	{100_000, contract.Size100K, 11}, // <= 131072
	{100_001, contract.Size1M, 11},   // <= 131072
	{200_000, contract.Size1M, 12},   // <= 262144
	{1_000_000, contract.Size1M, 14}, // <= 1 MiB
}

// TestStatsAfterRPCs: after echo RPCs of every size class on a clean
// network, the RPC counters, message histograms and latency histograms
// hold exactly what the RPCs did, and the packet counters by type and
// priority agree with each other.
func TestStatsAfterRPCs(t *testing.T) {
	p, _ := newMemPair(t, memnet.Config{Seed: 11, MTU: 1500}, homa.Config{})
	const rounds = 2
	var total uint64
	perClass := map[contract.SizeClass]uint64{}
	perBucket := map[int]uint64{}
	for range rounds {
		for _, s := range statsSizes {
			if err := p.call(withTimeout(t, 20*time.Second), t, payload(3, s.n)); err != nil {
				t.Fatalf("%d bytes: %v", s.n, err)
			}
			total += uint64(s.n)
			perClass[s.class]++
			perBucket[s.bucket]++
		}
	}
	rpcs := uint64(rounds * len(statsSizes))
	// The client acknowledges the last responses after its calls have
	// returned (an ACK of its own, sent off the response's way, or one
	// its timer sends): the counters settle once the server has them all.
	deadline := time.Now().Add(10 * time.Second)
	for p.server.Stats().ServerRPCs > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the server still holds %d RPCs: their acknowledgments never came", p.server.Stats().ServerRPCs)
		}
		time.Sleep(time.Millisecond)
	}
	cs, ss := p.client.Stats(), p.server.Stats()

	for name, got := range map[string]uint64{
		"client RPCs started":   cs.RPCsStarted,
		"client RPCs completed": cs.RPCsCompleted,
		"server RPCs started":   ss.ServerRPCsStarted,
		"requests received":     ss.RequestsReceived,
		"server RPCs completed": ss.ServerRPCsCompleted,
		"client latency count":  sumCounts(cs.Latency[:]),
		"client requests sent":  cs.MessageSizes[contract.Sent][contract.Request].Count,
		"client responses":      cs.MessageSizes[contract.Received][contract.Response].Count,
		"server requests":       ss.MessageSizes[contract.Received][contract.Request].Count,
		"server responses":      ss.MessageSizes[contract.Sent][contract.Response].Count,
	} {
		if got != rpcs {
			t.Errorf("%s: %d, want %d", name, got, rpcs)
		}
	}
	for name, got := range map[string]uint64{
		"server RPCs started by the client":   cs.ServerRPCsStarted,
		"server RPCs completed by the client": cs.ServerRPCsCompleted,
		"client RPCs started by the server":   ss.RPCsStarted,
		"server latency count":                sumCounts(ss.Latency[:]),
		"aborts":                              cs.RPCsAborted + ss.RPCsAborted,
		"timeouts":                            cs.RPCTimeouts + ss.RPCTimeouts,
		"client request bytes received":       cs.RequestBytesReceived,
		"server request bytes sent":           ss.RequestBytesSent,
	} {
		if got != 0 {
			t.Errorf("%s: %d, want 0", name, got)
		}
	}
	for name, got := range map[string]uint64{
		"client request bytes":  cs.RequestBytesSent,
		"client response bytes": cs.ResponseBytesReceived,
		"server request bytes":  ss.RequestBytesReceived,
		"server response bytes": ss.ResponseBytesSent,
	} {
		if got != total {
			t.Errorf("%s: %d, want %d", name, got, total)
		}
	}
	for c := range contract.NumSizeClasses {
		h := cs.Latency[c]
		if h.Count != perClass[c] {
			t.Errorf("latency of class %v: %d RPCs, want %d", c, h.Count, perClass[c])
		}
		if h.Count > 0 && (h.Sum == 0 || h.Mean() <= 0) {
			t.Errorf("latency of class %v: sum %d ns", c, h.Sum)
		}
	}
	for _, h := range []contract.Histogram{
		cs.MessageSizes[contract.Sent][contract.Request], cs.MessageSizes[contract.Received][contract.Response],
		ss.MessageSizes[contract.Received][contract.Request], ss.MessageSizes[contract.Sent][contract.Response],
	} {
		for i, n := range h.Counts {
			if n != perBucket[i] {
				t.Errorf("size bucket %d (<= %d B): %d messages, want %d", i, bound(h, i), n, perBucket[i])
			}
		}
	}
	checkPacketCounts(t, "client", cs)
	checkPacketCounts(t, "server", ss)
	if cs.Retransmits+ss.Retransmits == 0 {
		// Without retransmissions, every DATA byte one side sent arrived
		// once at the other: the counts by type match across the wire.
		for _, c := range []struct {
			name   string
			tx, rx contract.Stats
		}{{"requests", cs, ss}, {"responses", ss, cs}} {
			if c.tx.TxPackets[wire.TypeData] != c.rx.RxPackets[wire.TypeData] || c.tx.TxBytes[wire.TypeData] != c.rx.RxBytes[wire.TypeData] {
				t.Errorf("%s: sent %d DATA packets (%d B), received %d (%d B)", c.name,
					c.tx.TxPackets[wire.TypeData], c.tx.TxBytes[wire.TypeData], c.rx.RxPackets[wire.TypeData], c.rx.RxBytes[wire.TypeData])
			}
		}
		// A DATA packet is its header and its share of a message.
		want := cs.RequestBytesSent + uint64(wire.DataLen)*cs.TxPackets[wire.TypeData]
		if got := cs.TxBytes[wire.TypeData]; got != want {
			t.Errorf("client sent %d DATA bytes, want %d (requests plus headers)", got, want)
		}
	} else {
		t.Logf("retransmissions on a clean network (a slow machine): %d, %d", cs.Retransmits, ss.Retransmits)
	}
	if ss.TxPackets[wire.TypeGrant] == 0 || ss.TxBytes[wire.TypeGrant] != ss.TxPackets[wire.TypeGrant]*uint64(wire.GrantLen) {
		t.Errorf("server sent %d GRANTs of %d bytes in all, want some of %d bytes each",
			ss.TxPackets[wire.TypeGrant], ss.TxBytes[wire.TypeGrant], wire.GrantLen)
	}
	if ss.TxPriority[wire.NumPriorities-1] < ss.TxPackets[wire.TypeGrant] {
		t.Errorf("%d packets at the top priority, fewer than the %d GRANTs", ss.TxPriority[wire.NumPriorities-1], ss.TxPackets[wire.TypeGrant])
	}
}

func bound(h contract.Histogram, i int) uint64 {
	if i < len(h.Bounds) {
		return h.Bounds[i]
	}
	return 0
}

func sumCounts(hs []contract.Histogram) uint64 {
	var n uint64
	for _, h := range hs {
		for _, c := range h.Counts {
			n += c
		}
	}
	return n
}

// checkPacketCounts: packets by priority add up to packets by type, and
// every type's bytes are at least its header per packet.
func checkPacketCounts(t *testing.T, who string, s contract.Stats) {
	t.Helper()
	var byType, byPrio uint64
	for typ, n := range s.TxPackets {
		byType += n
		if s.TxBytes[typ] < n*uint64(wire.CommonLen) {
			t.Errorf("%s: %d %v packets sent in %d bytes", who, n, typ, s.TxBytes[typ])
		}
	}
	for _, n := range s.TxPriority {
		byPrio += n
	}
	if byType == 0 || byType != byPrio {
		t.Errorf("%s: %d packets sent by type, %d by priority", who, byType, byPrio)
	}
	for typ, n := range s.RxPackets {
		if s.RxBytes[typ] < n*uint64(wire.CommonLen) {
			t.Errorf("%s: %d %v packets received in %d bytes", who, n, typ, s.RxBytes[typ])
		}
	}
}

// TestStatsResent: under loss, retransmitted DATA is counted in packets.
func TestStatsResent(t *testing.T) {
	p, _ := newMemPair(t, memnet.Config{Seed: 12, MTU: 1500, Loss: 0.2}, homa.Config{})
	ctx := withTimeout(t, 30*time.Second)
	for i := 0; i < 200 && p.client.Stats().Retransmits+p.server.Stats().Retransmits == 0; i++ {
		if err := p.call(ctx, t, payload(uint64(i), 20_000)); err != nil {
			t.Fatal(err)
		}
	}
	cs, ss := p.client.Stats(), p.server.Stats()
	rt, resent := cs.Retransmits+ss.Retransmits, cs.ResentPackets+ss.ResentPackets
	if rt == 0 || resent < rt {
		t.Errorf("%d retransmissions sent %d packets; want some, each at least one packet", rt, resent)
	}
	if cs.ResendsSent+ss.ResendsSent == 0 || cs.RxPackets[wire.TypeResend]+ss.RxPackets[wire.TypeResend] == 0 {
		t.Errorf("no RESENDs sent (%d, %d) or received", cs.ResendsSent, ss.ResendsSent)
	}
}

// TestStatsAbortTimeout: an aborted RPC and one that times out are
// counted, and neither counts as completed or in the latency histograms.
func TestStatsAbortTimeout(t *testing.T) {
	nw := memnet.New(memnet.Config{Seed: 13})
	cc, _ := nw.Open(clientAddr, 0)
	client := homa.NewEndpoint(cc, homa.Config{})
	defer client.Close()
	dst := netip.AddrPortFrom(serverAddr, 500) // nobody there
	id, err := client.Send(dst, []byte("abort me"), 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Abort(id); err != nil {
		t.Fatal(err)
	}
	id, err = client.Send(dst, []byte("time out"), 0)
	if err != nil {
		t.Fatal(err)
	}
	m, err := client.Recv(withTimeout(t, 10*time.Second), id)
	if err != nil || !errors.Is(m.Err, contract.ErrPeerTimeout) {
		t.Fatalf("RPC to nobody: %v / %+v, want ErrPeerTimeout", err, m)
	}
	s := client.Stats()
	if s.RPCsStarted != 2 || s.RPCsAborted != 1 || s.RPCTimeouts != 1 || s.RPCsCompleted != 0 {
		t.Errorf("started %d, aborted %d, timed out %d, completed %d; want 2, 1, 1, 0",
			s.RPCsStarted, s.RPCsAborted, s.RPCTimeouts, s.RPCsCompleted)
	}
	if n := sumCounts(s.Latency[:]); n != 0 {
		t.Errorf("%d failed RPCs in the latency histograms", n)
	}
	if h := s.MessageSizes[contract.Sent][contract.Request]; h.Count != 2 || h.Sum != uint64(len("abort me")+len("time out")) {
		t.Errorf("requests sent: %+v", h)
	}
}

// TestLatencyClass: an RPC's size class is that of its larger message,
// whichever way it goes.
func TestLatencyClass(t *testing.T) {
	nw := memnet.New(memnet.Config{Seed: 14, MTU: 1500})
	sc, _ := nw.Open(serverAddr, 500)
	cc, _ := nw.Open(clientAddr, 0)
	server, client := homa.NewEndpoint(sc, homa.Config{}), homa.NewEndpoint(cc, homa.Config{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			m, err := server.Recv(context.Background(), 0)
			if err != nil {
				return
			}
			// The response is 50,000 bytes whatever the request.
			server.Reply(m.Peer.Addr(), m.ID, make([]byte, 50_000))
			m.Release()
		}
	}()
	defer func() {
		client.Close()
		server.Close()
		<-done
	}()
	ctx := withTimeout(t, 20*time.Second)
	for _, n := range []int{100, 200_000} {
		id, err := client.Send(server.LocalAddr(), make([]byte, n), 0)
		if err != nil {
			t.Fatal(err)
		}
		m, err := client.Recv(ctx, id)
		if err != nil || m.Err != nil {
			t.Fatalf("RPC of %d bytes: %v %+v", n, err, m)
		}
		m.Release()
	}
	s := client.Stats()
	for c, want := range []uint64{contract.Size1K: 0, contract.Size10K: 0, contract.Size100K: 1, contract.Size1M: 1} {
		if got := s.Latency[c].Count; got != want {
			t.Errorf("class %v: %d RPCs, want %d", contract.SizeClass(c), got, want)
		}
	}
}

package homa_test

import (
	"context"
	stdnetip "net/netip"
	"sync"
	"testing"
	"time"

	"github.com/homa-go/homa/homa"
	"github.com/homa-go/homa/homa/core"
	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/homa/wire"
	"github.com/homa-go/homa/priority"
)

// TestCutoffs: a receiver answers DATA carrying a stale cutoff version
// with CUTOFFS (once per tick per peer); a sender that receives CUTOFFS
// puts their version in its DATA and gives unscheduled packets the
// priority they assign to the message length.
func TestCutoffs(t *testing.T) {
	var mu sync.Mutex
	var cutoffs []wire.Cutoffs
	var versions []uint16
	nw := memnet.New(memnet.Config{Seed: 30, Drop: func(_, _ stdnetip.Addr, pkt []byte) bool {
		var p wire.Packet
		if p.Parse(pkt) == nil {
			mu.Lock()
			switch p.Type {
			case wire.TypeCutoffs:
				cutoffs = append(cutoffs, p.Cutoffs)
			case wire.TypeData:
				versions = append(versions, p.Data.CutoffVersion)
			}
			mu.Unlock()
		}
		return false
	}})
	// A tick that never comes: the once-per-tick rule is then exact.
	cfg := homa.Config{Config: core.Config{Tick: time.Hour}}
	sc, _ := nw.Open(serverAddr, 500)
	cc, _ := nw.Open(clientAddr, 0)
	server, client := homa.NewEndpoint(sc, cfg), homa.NewEndpoint(cc, cfg)
	defer server.Close()
	defer client.Close()

	// Stale versions from a client: one CUTOFFS with the Linux defaults.
	stale := func(id uint64) []byte {
		// From a port nobody listens on: the CUTOFFS answer must not
		// reach the client endpoint, which is told its own below.
		d := wire.Data{Common: wire.Common{SrcPort: 40_000, DstPort: 500, SenderID: id},
			MessageLength: 10, Incoming: 10, CutoffVersion: 0, Payload: make([]byte, 10)}
		return d.Append(nil)
	}
	server.HandlePacket(stale(2), clientAddr)
	server.HandlePacket(stale(4), clientAddr)
	mu.Lock()
	if len(cutoffs) != 1 || cutoffs[0].Cutoffs != priority.Default.Values || cutoffs[0].Version != priority.Default.Version {
		t.Fatalf("CUTOFFS sent for two stale DATA in one tick: %+v", cutoffs)
	}
	mu.Unlock()
	if n := server.Stats().CutoffsSent; n != 1 {
		t.Fatalf("CutoffsSent = %d, want 1", n)
	}

	// Our own cutoffs from the server: 100-byte messages at 7, up to
	// 2,000 at 6, the rest at 5. A host accepts CUTOFFS only from a peer
	// it knows, so talk to it first.
	if _, err := client.Send(server.LocalAddr(), []byte("hi"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := server.Recv(withTimeout(t, 5*time.Second), 0); err != nil {
		t.Fatal(err)
	}
	c := wire.Cutoffs{Common: wire.Common{SrcPort: 500, DstPort: client.Port(), SenderID: 3},
		Cutoffs: [8]uint32{0, 0, 0, 0, 0, 1_000_000, 2_000, 100}, Version: 9}
	client.HandlePacket(c.Append(nil), serverAddr)
	before := nw.Stats().DeliveredPackets
	for _, n := range []int{100, 1500, 30_000} {
		if _, err := client.Send(server.LocalAddr(), make([]byte, n), 0); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		if _, err := server.Recv(withTimeout(t, 5*time.Second), 0); err != nil {
			t.Fatal(err)
		}
	}
	after := nw.Stats().DeliveredPackets
	// At the default 1500-byte mem MTU (1,424 payload bytes a packet):
	// 1 packet at 7, 2 at 6, 22 at 5.
	for prio, want := range map[int]uint64{7: 1, 6: 2, 5: 22} {
		if got := after[prio] - before[prio]; got != want {
			t.Errorf("priority %d: %d packets, want %d (all: %v)", prio, got, want, after)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, v := range versions[3:] { // the injected ones were not sent; "hi" went before
		if v != 9 {
			t.Fatalf("DATA carried cutoff version %d after CUTOFFS version 9", v)
		}
	}

}

// TestCutoffsPerPort: two endpoints on one host announce different
// cutoffs to a server; each gets the server's DATA with its own version
// (and so with the priorities its own cutoffs give), rather than the
// version the other announced last, which would have it send CUTOFFS
// every tick. A host cannot make the server keep the cutoffs of more
// than a bounded number of its ports: the ports past the bound get the
// cutoffs the host announced last.
func TestCutoffsPerPort(t *testing.T) {
	var mu sync.Mutex
	seen := map[uint16][]uint16{} // DATA from the server: versions by destination port
	nw := memnet.New(memnet.Config{Seed: 31, Drop: func(src, _ stdnetip.Addr, pkt []byte) bool {
		var p wire.Packet
		if p.Parse(pkt) != nil {
			return false
		}
		if src == serverAddr && p.Type == wire.TypeData {
			mu.Lock()
			seen[p.Data.DstPort] = append(seen[p.Data.DstPort], p.Data.CutoffVersion)
			mu.Unlock()
		}
		// The clients' own cutoffs are the defaults: the test announces
		// others in their name (below), which they must not correct.
		return p.Type == wire.TypeCutoffs
	}})
	cfg := homa.Config{Config: core.Config{Tick: time.Hour}}
	sc, _ := nw.Open(serverAddr, 500)
	server := homa.NewEndpoint(sc, cfg)
	defer server.Close()
	go func() {
		for {
			m, err := server.Recv(context.Background(), 0)
			if err != nil {
				return
			}
			_ = server.Reply(m.Peer.Addr(), m.ID, make([]byte, 30_000))
			m.Release()
		}
	}()
	var clients []*homa.Endpoint
	for range 2 {
		cc, _ := nw.Open(clientAddr, 0)
		c := homa.NewEndpoint(cc, cfg)
		defer c.Close()
		clients = append(clients, c)
	}
	call := func(c *homa.Endpoint) {
		t.Helper()
		ctx := withTimeout(t, 5*time.Second)
		id, err := c.Send(server.LocalAddr(), []byte("hi"), 0)
		if err != nil {
			t.Fatal(err)
		}
		m, err := c.Recv(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		m.Release()
	}
	announce := func(port, version uint16) {
		h := wire.Cutoffs{Common: wire.Common{SrcPort: port, DstPort: 500, SenderID: 2},
			Cutoffs: [8]uint32{0, 0, 0, 0, 0, 1_000_000, 2_000, uint32(version)}, Version: version}
		server.HandlePacket(h.Append(nil), clientAddr)
	}
	for _, c := range clients {
		call(c) // the server knows the host now
	}
	a, b := clients[0].Port(), clients[1].Port()
	announce(a, 5)
	announce(b, 7)
	mu.Lock()
	clear(seen)
	mu.Unlock()
	for range 3 {
		call(clients[0])
		call(clients[1])
	}
	mu.Lock()
	for port, want := range map[uint16]uint16{a: 5, b: 7} {
		if len(seen[port]) == 0 {
			t.Fatalf("no DATA to port %d", port)
		}
		for _, v := range seen[port] {
			if v != want {
				t.Fatalf("DATA to port %d carried cutoff version %d, want %d (its own): %v", port, v, want, seen[port])
			}
		}
	}
	mu.Unlock()

	// The bound: ports announcing past it push out the oldest, whose
	// DATA then carry the host's last announced version.
	for i := range uint16(core.MaxPortCutoffs) {
		announce(20_000+i, 100+i)
	}
	mu.Lock()
	clear(seen)
	mu.Unlock()
	call(clients[1])
	mu.Lock()
	defer mu.Unlock()
	last := uint16(100 + core.MaxPortCutoffs - 1)
	for _, v := range seen[b] {
		if v != last {
			t.Fatalf("DATA to a port pushed out of the table carried version %d, want the host's last, %d", v, last)
		}
	}
}

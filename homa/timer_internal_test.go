package homa

import (
	"net/netip"
	"testing"

	"github.com/homa-go/homa/homa/wire"
)

// TestQueueResendAllGaps: one round asks for every missing range below
// the grant, each in its own RESEND, never for bytes not granted.
func TestQueueResendAllGaps(t *testing.T) {
	e := &Endpoint{port: 500}
	r := &rpc{id: 3, port: 40000, peer: &peer{addr: netip.MustParseAddr("10.0.0.2")}}
	r.in.init(20_000, 10_000) // 10,000 bytes granted so far
	r.inInit = true
	defer r.in.release()
	r.in.add(1000, make([]byte, 1000))
	r.in.add(5000, make([]byte, 1000))
	var b txBatch
	if !e.queueResend(r, &b) {
		t.Fatal("no RESEND queued")
	}
	want := [][2]uint32{{0, 1000}, {2000, 3000}, {6000, 4000}}
	if len(b.pkts) != len(want) {
		t.Fatalf("%d RESENDs, want %d", len(b.pkts), len(want))
	}
	for i, p := range b.pkts {
		var rs wire.Resend
		if _, err := rs.Parse(p.Bytes()); err != nil {
			t.Fatal(err)
		}
		if got := [2]uint32{rs.Offset, rs.Length}; got != want[i] || rs.SenderID != 3 || rs.DstPort != 40000 {
			t.Errorf("RESEND %d: offset/length %v id %d port %d; want %v, id 3, port 40000", i, got, rs.SenderID, rs.DstPort, want[i])
		}
	}
}

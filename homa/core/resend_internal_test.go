package core

import (
	"net/netip"
	"testing"

	"github.com/homa-go/homa/homa/wire"
)

// TestQueueResendAllGaps: one round asks for every missing range below
// the grant, each in its own RESEND, never for bytes not granted.
func TestQueueResendAllGaps(t *testing.T) {
	c := New(Local{Port: 500}, Config{})
	var out Output
	c.out = &out
	r := c.newRPC()
	r.id, r.port, r.peer = 3, 40000, newPeer(netip.MustParseAddr("10.0.0.2"))
	r.in.init(20_000, 10_000) // 10,000 bytes granted so far
	r.inInit = true
	for _, off := range []uint32{1000, 5000} {
		payload := make([]byte, 1000)
		r.in.store(off, payload, payload, false, c.bufs)
	}
	if !c.queueResend(r) {
		t.Fatal("no RESEND queued")
	}
	want := [][2]uint32{{0, 1000}, {2000, 3000}, {6000, 4000}}
	if len(out.Packets) != len(want) {
		t.Fatalf("%d RESENDs, want %d", len(out.Packets), len(want))
	}
	for i, p := range out.Packets {
		var rs wire.Resend
		if _, err := rs.Parse(p.Buf); err != nil {
			t.Fatal(err)
		}
		if got := [2]uint32{rs.Offset, rs.Length}; got != want[i] || rs.SenderID != 3 || rs.DstPort != 40000 {
			t.Errorf("RESEND %d: offset/length %v id %d port %d; want %v, id 3, port 40000", i, got, rs.SenderID, rs.DstPort, want[i])
		}
	}
}

package core

import (
	"net/netip"
	"testing"

	"github.com/homa-go/homa/homa/wire"
)

// TestRetransmitWholeSegments: packets are cut where Linux cuts them
// (whole segments from 0 up to the unscheduled limit, from the limit
// on); a RESEND for a range that starts and ends inside segments is
// answered with those whole segments, cut where the first transmission
// cut them (a Linux receiver drops a packet that overlaps bytes it has);
// a grant that ends inside a segment lets the whole segment go.
func TestRetransmitWholeSegments(t *testing.T) {
	c := New(Local{Port: 40000, FirstID: 2}, Config{UnschedBytes: 10_000})
	server := netip.MustParseAddrPort("10.0.0.2:500")
	var out Output
	id, err := c.Send(server, make([]byte, 100_000), 0, 1500, 0, &out)
	if err != nil {
		t.Fatal(err)
	}
	seg := uint32(len(out.Packets[0].Payload))
	// Linux's cuts: multiples of seg below the unscheduled 10,000 bytes,
	// the limit itself, then the limit plus multiples of seg.
	boundary := func(off uint32) bool {
		if off < 10_000 {
			return off%seg == 0
		}
		return (off-10_000)%seg == 0 || off == 100_000
	}
	first := map[uint32]uint32{} // offset -> length of the first transmission
	record := func(want bool) []wire.Data {
		var ds []wire.Data
		for _, p := range out.Packets {
			var d wire.Data
			if _, err := d.Parse(append(p.Buf[:len(p.Buf):len(p.Buf)], p.Payload...)); err != nil {
				continue
			}
			n := uint32(len(d.Payload))
			if start, end := d.SegOffset, d.SegOffset+n; !boundary(start) || !boundary(end) || n > seg {
				t.Errorf("packet [%d, %d) is not a whole segment of %d", start, end, seg)
			}
			if want {
				first[d.SegOffset] = n
			}
			ds = append(ds, d)
		}
		for _, h := range out.Holds {
			h.Release()
		}
		out.Reset()
		return ds
	}
	record(true)
	control := func(b []byte) {
		c.Handle(b, server.Addr(), 0, &out)
	}
	common := wire.Common{SrcPort: 500, DstPort: 40000, SenderID: id ^ 1}
	grant := wire.Grant{Common: common, Offset: 30_001}
	control(grant.Append(nil))
	sent := record(true)
	if end := sent[len(sent)-1].SegOffset + seg; end != 10_000+(20_001+seg-1)/seg*seg {
		t.Errorf("grant to 30001 sent up to %d; want the end of the segment holding byte 30000", end)
	}
	rs := wire.Resend{Common: common, Offset: 5000, Length: 3000}
	control(rs.Append(nil))
	got := record(false)
	if len(got) == 0 {
		t.Fatal("RESEND answered with nothing")
	}
	if start, end := got[0].SegOffset, got[len(got)-1].SegOffset+seg; start > 5000 || end < 8000 {
		t.Errorf("retransmitted [%d, %d), want it to cover [5000, 8000)", start, end)
	}
	for _, d := range got {
		if n, ok := first[d.SegOffset]; !ok || n != uint32(len(d.Payload)) || d.Retransmit != 1 {
			t.Errorf("retransmitted [%d, +%d) retransmit=%d, not as first sent", d.SegOffset, len(d.Payload), d.Retransmit)
		}
	}
}

package core

import (
	"net/netip"
	"testing"

	"github.com/homa-go/homa/homa/wire"
)

// dataCuts returns the [offset, end) of each DATA packet in out, and
// empties it.
func dataCuts(t *testing.T, out *Output) [][2]uint32 {
	t.Helper()
	var cuts [][2]uint32
	for _, p := range out.Packets {
		var d wire.Data
		if _, err := d.Parse(append(p.Buf[:len(p.Buf):len(p.Buf)], p.Payload...)); err != nil {
			continue
		}
		cuts = append(cuts, [2]uint32{d.SegOffset, d.SegOffset + uint32(len(d.Payload))})
	}
	for _, h := range out.Holds {
		h.Release()
	}
	out.Reset()
	return cuts
}

// TestShortFirstSegment: on a path whose packets hold most of the
// unscheduled bytes (64 KB, as loopback), a message that needs grants
// starts with a short segment, so that its receiver grants while the
// rest of the unscheduled bytes are on their way; retransmissions are
// cut the same way. A message sent whole without grants, and any message
// on a 1,500-byte path, is cut as before.
func TestShortFirstSegment(t *testing.T) {
	server := netip.MustParseAddrPort("10.0.0.2:500")
	cases := []struct {
		name     string
		size     int
		maxPkt   int
		wantCuts [][2]uint32 // the first transmission, before any grant
	}{
		{"needs grants, 64 KB packets", 41_000, 65_535, [][2]uint32{{0, firstSegMax}, {firstSegMax, 40_000}}},
		{"unscheduled only, 64 KB packets", 40_000, 65_535, [][2]uint32{{0, 40_000}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := New(Local{Port: 40000, FirstID: 2}, Config{UnschedBytes: 40_000})
			var out Output
			id, err := c.Send(server, make([]byte, tc.size), 0, tc.maxPkt, 0, &out)
			if err != nil {
				t.Fatal(err)
			}
			got := dataCuts(t, &out)
			if len(got) != len(tc.wantCuts) {
				t.Fatalf("first transmission %v, want %v", got, tc.wantCuts)
			}
			for i := range got {
				if got[i] != tc.wantCuts[i] {
					t.Fatalf("first transmission %v, want %v", got, tc.wantCuts)
				}
			}
			if tc.size <= 40_000 {
				return
			}
			common := wire.Common{SrcPort: 500, DstPort: 40000, SenderID: id ^ 1}
			g := wire.Grant{Common: common, Offset: uint32(tc.size)}
			c.Handle(g.Append(nil), server.Addr(), 0, &out)
			if got := dataCuts(t, &out); len(got) != 1 || got[0] != [2]uint32{40_000, uint32(tc.size)} {
				t.Fatalf("after the grant %v, want [[40000 %d]]", got, tc.size)
			}
			rs := wire.Resend{Common: common, Offset: 1000, Length: 5000}
			c.Handle(rs.Append(nil), server.Addr(), 0, &out)
			want := [][2]uint32{{0, firstSegMax}, {firstSegMax, 40_000}}
			if got := dataCuts(t, &out); len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
				t.Fatalf("RESEND [1000, 6000) answered with %v, want %v", got, want)
			}
		})
	}
	// On a 1,500-byte path every segment is short already: no change.
	c := New(Local{Port: 40000, FirstID: 2}, Config{UnschedBytes: 40_000})
	var out Output
	if _, err := c.Send(server, make([]byte, 41_000), 0, 1500, 0, &out); err != nil {
		t.Fatal(err)
	}
	got := dataCuts(t, &out)
	seg := got[0][1]
	for _, cut := range got {
		if cut[1]-cut[0] != seg && cut[1] != 40_000 {
			t.Fatalf("1,500-byte path cut %v: want whole segments of %d", got, seg)
		}
	}
}

// TestLoopbackUnsched: by default a message to a loopback peer goes with
// loopbackUnschedBytes unscheduled (a copy in memory is faster than a
// grant's round trip), to any other peer with 40,000; an UnschedBytes
// set in the configuration holds for every peer.
func TestLoopbackUnsched(t *testing.T) {
	cases := []struct {
		name    string
		unsched int
		dst     string
		want    uint32
	}{
		{"loopback, default", 0, "127.0.0.1:500", loopbackUnschedBytes},
		{"loopback IPv6, default", 0, "[::1]:500", loopbackUnschedBytes},
		{"another host, default", 0, "10.0.0.2:500", defaultUnschedBytes},
		{"loopback, set", 20_000, "127.0.0.1:500", 20_000},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dst := netip.MustParseAddrPort(tc.dst)
			c := New(Local{Port: 40000, FirstID: 2, IPv6: dst.Addr().Is6()}, Config{UnschedBytes: tc.unsched})
			var out Output
			if _, err := c.Send(dst, make([]byte, 300_000), 0, 65_535, 0, &out); err != nil {
				t.Fatal(err)
			}
			var d wire.Data
			p := out.Packets[0]
			if _, err := d.Parse(append(p.Buf[:len(p.Buf):len(p.Buf)], p.Payload...)); err != nil {
				t.Fatal(err)
			}
			cuts := dataCuts(t, &out)
			if d.Incoming != tc.want || cuts[len(cuts)-1][1] != tc.want {
				t.Fatalf("unscheduled: %d declared, sent up to %d; want %d", d.Incoming, cuts[len(cuts)-1][1], tc.want)
			}
		})
	}
}

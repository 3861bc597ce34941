package rawfloor

import (
	"bytes"
	"errors"
	"testing"

	"pgregory.net/rapid"
)

const testTag = 0x5eed

// build makes a packet as a raw socket returns it: an IPv4 header of
// ihl bytes (none if ihl is 0, as IPv6 returns), the floor header and
// the payload.
func build(ihl int, h header, payload []byte) []byte {
	var b []byte
	if ihl > 0 {
		b = make([]byte, ihl)
		b[0] = 0x40 | byte(ihl/4)
	}
	b = h.appendTo(b)
	return append(b, payload...)
}

// deliver does what the kernel and poll do with pkt: it scatters pkt
// over the receiver's parts at the place the receiver reads next, and
// lands it.
func deliver(r *receiver, pkt []byte) landing {
	at := r.at()
	head, body, spill := r.parts(at)
	rest := pkt
	for _, p := range [][]byte{head, body, spill} {
		rest = rest[copy(p, rest):]
	}
	if len(rest) > 0 {
		return r.drop() // MSG_TRUNC
	}
	return r.land(at, len(pkt))
}

// piece is one packet of a message.
type piece struct {
	h       header
	payload []byte
}

// split cuts msg into its packets, as Pair.send does.
func split(kind uint32, seq uint64, msg []byte) []piece {
	var ps []piece
	for off := 0; ; off += MaxPayload {
		end := min(off+MaxPayload, len(msg))
		h := header{tag: testTag, kind: kind, seq: seq, off: uint32(off), total: uint32(len(msg))}
		ps = append(ps, piece{h, msg[off:end]})
		if end == len(msg) {
			return ps
		}
	}
}

func TestHeaderCodec(t *testing.T) {
	h := header{tag: 0x01020304, kind: 2, seq: 0x05060708090a0b0c, off: 0x0d0e0f10, total: 0x11121314}
	b := h.appendTo([]byte{0xff})
	want := []byte{0xff, 1, 2, 3, 4, 0, 0, 0, 2, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20}
	if !bytes.Equal(b, want) || len(b)-1 != h.encodedLen() {
		t.Fatalf("appendTo = % x, want % x (encodedLen %d)", b, want, h.encodedLen())
	}
	got, n, err := parseHeader(b[1:])
	if err != nil || n != HeaderLen || got != h {
		t.Fatalf("parseHeader = %+v, %d, %v; want %+v", got, n, err, h)
	}
	for i := range HeaderLen {
		if _, _, err := parseHeader(b[1 : 1+i]); !errors.Is(err, errShortHeader) {
			t.Errorf("%d bytes: %v, want errShortHeader", i, err)
		}
	}
}

func TestFits(t *testing.T) {
	for _, c := range []struct {
		off, total uint32
		n          int
		want       bool
	}{
		{0, 0, 0, true},
		{0, 0, 1, false},
		{0, 100, 100, true},
		{0, 100, 99, false},
		{0, 100, 101, false},
		{1, 100, 99, false},
		{MaxPayload, 100, 0, false},
		{0, MaxPayload + 1, MaxPayload, true},
		{MaxPayload, MaxPayload + 1, 1, true},
		{MaxPayload, MaxPayload + 1, 2, false},
		{2 * MaxPayload, MaxPayload + 1, 0, false},
		{15 * MaxPayload, MaxMessage, MaxMessage - 15*MaxPayload, true},
		{0, MaxMessage + 1, MaxPayload, false},
		{1<<32 - 1, MaxMessage, 0, false},
		{66_060 * MaxPayload, MaxMessage, 0, false}, // a multiple past the end that wraps no int
	} {
		h := header{off: c.off, total: c.total}
		if got := h.fits(c.n); got != c.want {
			t.Errorf("off %d total %d len %d: fits %v, want %v", c.off, c.total, c.n, got, c.want)
		}
	}
}

// TestLandInOrder receives messages of every packet count in order: no
// payload byte is moved.
func TestLandInOrder(t *testing.T) {
	for _, ihl := range []int{0, ipv4HeaderMin} {
		r := newReceiver(testTag, kindRequest, ihl > 0, true)
		for i, total := range []int{0, 1, MaxPayload, MaxPayload + 1, 200_000, MaxMessage} {
			msg := pattern(total, i)
			ps := split(kindRequest, uint64(i+1), msg)
			for j, p := range ps {
				want := landedPart
				if j == len(ps)-1 {
					want = landedLast
				}
				if got := deliver(r, build(ihl, p.h, p.payload)); got != want {
					t.Fatalf("ihl %d, %d bytes, packet %d: %v, want %v", ihl, total, j, got, want)
				}
			}
			if !bytes.Equal(r.message(), msg) {
				t.Fatalf("ihl %d, %d bytes: message differs", ihl, total)
			}
		}
		if m, d, s := r.moved.Load(), r.dropped.Load(), r.stale.Load(); m+d+s != 0 {
			t.Errorf("ihl %d: %d moved, %d dropped, %d stale; want none", ihl, m, d, s)
		}
	}
}

// TestLandMoves receives packets that are read at a place not their
// own: out of order, or behind IPv4 options that push the payload along
// (into the spill, for a full packet). Each is moved, and counted.
func TestLandMoves(t *testing.T) {
	msg := pattern(MaxMessage, 5)
	ps := split(kindResponse, 9, msg)

	r := newReceiver(testTag, kindResponse, false, false)
	r.expect(9, len(msg))
	for j := len(ps) - 1; j >= 0; j-- {
		deliver(r, build(0, ps[j].h, ps[j].payload))
	}
	if !r.done || !bytes.Equal(r.message(), msg) {
		t.Fatalf("reversed: done %v, message equal %v", r.done, bytes.Equal(r.message(), msg))
	}
	if got := r.moved.Load(); got != uint64(len(ps)-1) {
		t.Errorf("reversed: %d moved, want %d (all but packet 0)", got, len(ps)-1)
	}

	for _, ihl := range []int{24, ipv4HeaderMax} {
		r := newReceiver(testTag, kindResponse, true, false)
		r.expect(9, len(msg))
		for _, p := range ps {
			deliver(r, build(ihl, p.h, p.payload))
		}
		if !r.done || !bytes.Equal(r.message(), msg) {
			t.Fatalf("ihl %d: done %v, message equal %v", ihl, r.done, bytes.Equal(r.message(), msg))
		}
		if got := r.moved.Load(); got != uint64(len(ps)) {
			t.Errorf("ihl %d: %d moved, want %d", ihl, got, len(ps))
		}
	}
}

// TestLandRejects sends a receiver, in the middle of a message, packets
// that it must drop or ignore; they are counted, and the message comes
// out whole all the same although each was read into the message
// buffer.
func TestLandRejects(t *testing.T) {
	const seq = 7
	msg := pattern(3*MaxPayload, 1)
	ps := split(kindRequest, seq, msg)
	at := func(h header, f func(*header)) header { f(&h); return h }
	h1 := ps[1].h
	for _, follow := range []bool{false, true} {
		r := newReceiver(testTag, kindRequest, true, follow)
		if !follow {
			r.expect(seq, len(msg))
		}
		deliver(r, build(ipv4HeaderMin, ps[0].h, ps[0].payload))
		junk := pattern(MaxPayload, 99)
		for _, c := range []struct {
			name string
			pkt  []byte
			want landing
		}{
			{"other tag", build(20, at(h1, func(h *header) { h.tag++ }), junk), landedDropped},
			{"other kind", build(20, at(h1, func(h *header) { h.kind = kindResponse }), junk), landedDropped},
			{"total changed", build(20, at(h1, func(h *header) { h.total++ }), junk), landedDropped},
			{"total too long", build(20, at(h1, func(h *header) { h.total = MaxMessage + 1 }), junk), landedDropped},
			{"offset inside a packet", build(20, at(h1, func(h *header) { h.off++ }), junk), landedDropped},
			{"payload short", build(20, h1, junk[:MaxPayload-1]), landedDropped},
			{"payload long", build(20, h1, append(junk, 1)), landedDropped},
			{"longer than the buffers", build(60, h1, append(junk, make([]byte, 100)...)), landedDropped},
			{"IHL under 5", build(16, h1, junk), landedDropped},
			{"shorter than a header", build(20, h1, nil)[:20+HeaderLen-1], landedDropped},
			{"earlier round trip", build(20, at(h1, func(h *header) { h.seq-- }), junk), landedStale},
			{"duplicate", build(20, ps[0].h, junk), landedStale},
		} {
			if got := deliver(r, c.pkt); got != c.want {
				t.Errorf("follow %v, %s: %v, want %v", follow, c.name, got, c.want)
			}
		}
		if d, s := r.dropped.Load(), r.stale.Load(); d != 10 || s != 2 {
			t.Errorf("follow %v: %d dropped, %d stale; want 10, 2", follow, d, s)
		}
		later := at(h1, func(h *header) { h.seq++ })
		want := landedStale // the client takes only the round trip it expects
		if follow {
			want = landedPart // the server gives up the message for a later one
		}
		if got := deliver(r, build(20, later, ps[1].payload)); got != want {
			t.Errorf("follow %v, later round trip: %v, want %v", follow, got, want)
		}
		if follow {
			// Round trip seq+1 is now under way, with packet 1 in.
			ps = split(kindRequest, seq+1, msg)
			ps[1] = ps[0]
		}
		for _, p := range ps[1:] {
			deliver(r, build(20, p.h, p.payload))
		}
		if !r.done || !bytes.Equal(r.message(), msg) {
			t.Errorf("follow %v: done %v, message equal %v", follow, r.done, bytes.Equal(r.message(), msg))
		}
		ps = split(kindRequest, seq, msg)
	}
}

// TestLandProperty receives messages of random length as packets in
// random order, with duplicates, IPv4 options and stale packets mixed
// in: the message is complete exactly when its last packet arrives, its
// bytes are exact, and exactly the packets read at the wrong place are
// moved.
func TestLandProperty(t *testing.T) {
	r4 := newReceiver(testTag, kindResponse, true, false)
	r6 := newReceiver(testTag, kindResponse, false, false)
	rapid.Check(t, func(t *rapid.T) {
		v4 := rapid.Bool().Draw(t, "v4")
		r := r6
		if v4 {
			r = r4
		}
		total := rapid.IntRange(0, MaxMessage).Draw(t, "total")
		seq := rapid.Uint64Range(1, 1<<40).Draw(t, "seq")
		msg := pattern(total, int(seq))
		ps := split(kindResponse, seq, msg)
		order := rapid.SliceOfN(rapid.IntRange(0, len(ps)), len(ps), 3*len(ps)).Draw(t, "order")
		for i := range ps {
			order = append(order, i) // every packet at least once
		}
		r.expect(seq, total)
		moved, have := r.moved.Load(), make([]bool, len(ps))
		arrived := 0
		for _, i := range order {
			if r.done {
				break
			}
			ihl := 0
			if v4 {
				ihl = 4 * rapid.IntRange(5, 15).Draw(t, "ihl/4")
			}
			if i == len(ps) { // not a packet of the message: an earlier round trip
				h := ps[0].h
				h.seq--
				if got := deliver(r, build(ihl, h, ps[0].payload)); got != landedStale {
					t.Fatalf("earlier round trip: %v", got)
				}
				continue
			}
			first := 0
			for have[first] {
				first++
			}
			got := deliver(r, build(ihl, ps[i].h, ps[i].payload))
			switch {
			case have[i]:
				if got != landedStale {
					t.Fatalf("duplicate of packet %d: %v", i, got)
				}
				continue
			case i != first || ihl > ipv4HeaderMin:
				moved++
			}
			have[i] = true
			if arrived++; (arrived == len(ps)) != (got == landedLast) {
				t.Fatalf("packet %d, %d of %d arrived: %v", i, arrived, len(ps), got)
			}
		}
		if !r.done || !bytes.Equal(r.message(), msg) {
			t.Fatalf("done %v, message equal %v", r.done, bytes.Equal(r.message(), msg))
		}
		if got := r.moved.Load(); got != moved {
			t.Fatalf("%d moved, want %d", got, moved)
		}
	})
}

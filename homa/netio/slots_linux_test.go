//go:build linux

package netio

import (
	"bytes"
	"net/netip"
	"testing"
	"time"
)

// TestReadSlotsFollowBuffers: a socket Conn keeps the batch it set up
// for one read's buffers for the next read with the same ones (see
// prepareRead), and sets a slot up again whenever its Buf or Land
// changes, in place or length, or a borrowed read used the slot for the
// Conn's own area: every read lands in the buffers offered to it, and
// never writes where an earlier read's buffers were.
func TestReadSlotsFollowBuffers(t *testing.T) { eachLandPair(t, testReadSlots) }

func testReadSlots(t *testing.T, a, b Conn, lo netip.Addr) {
	const sentinel = 0xAA
	fill := func(p []byte) []byte {
		for i := range p {
			p[i] = sentinel
		}
		return p
	}
	untouched := func(name string, p []byte) {
		t.Helper()
		for i, c := range p {
			if c != sentinel {
				t.Fatalf("%s was written at %d", name, i)
			}
		}
	}
	send := func(size int, tag uint64) []byte {
		t.Helper()
		p := testPacket(a.Port(), b.Port(), size, tag)
		if _, err := a.WriteBatch([]Packet{{Buf: p, N: len(p), Addr: lo}}); err != nil {
			t.Fatal(err)
		}
		return p
	}
	pkts := make([]Packet, 1)
	read := func(want []byte) {
		t.Helper()
		timer := time.AfterFunc(safetyTimeout, func() { b.Close() })
		defer timer.Stop()
		n, err := b.ReadBatch(pkts)
		if err != nil || n != 1 {
			t.Fatalf("read: %d packets, %v", n, err)
		}
		p := &pkts[0]
		got := append(bytes.Clone(p.Buf[:min(p.N, LandAt)]), p.Land[:p.Landed]...)
		got = append(got, p.Buf[min(p.N, LandAt):p.N]...)
		if p.Landed == 0 {
			got = p.Bytes()
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("read packet %d (%d bytes), want %d (%d bytes)", tagOf(got), len(got), tagOf(want), len(want))
		}
	}

	// Empty reads set the slot up for buffer A.
	bufA := fill(make([]byte, 4096))
	pkts[0].Buf = bufA
	for range 3 {
		if n, err := b.(Poller).TryReadBatch(pkts); n != 0 || err != nil {
			t.Fatalf("empty read: %d, %v", n, err)
		}
	}
	// Another buffer: the packet goes there, not into A.
	bufB := make([]byte, 4096)
	pkts[0].Buf = bufB
	read(send(300, 1))
	untouched("the earlier buffer", bufA)

	// The same buffer, shorter: a packet longer than it is discarded,
	// and nothing is written past its end.
	fill(bufB)
	pkts[0].Buf = bufB[:100]
	send(300, 2)
	read(send(60, 3))
	untouched("the buffer past its new length", bufB[100:])

	// A Land: the payload goes there. Then none: the next packet comes
	// whole into Buf, and Land is left alone.
	land := make([]byte, 1000)
	pkts[0].Buf, pkts[0].Land = bufB, land
	read(send(500, 4))
	if pkts[0].Landed != 500-LandAt {
		t.Fatalf("landed %d bytes, want %d", pkts[0].Landed, 500-LandAt)
	}
	fill(land)
	pkts[0].Land, pkts[0].Landed = nil, 0
	read(send(500, 5))
	if pkts[0].Landed != 0 {
		t.Fatalf("landed %d bytes without a Land", pkts[0].Landed)
	}
	untouched("the Land taken away", land)

	// Borrowed reads go through the Conn's own area, and the next
	// ordinary read into the same buffer comes back to it.
	br := b.(BorrowReader)
	want := send(200, 6)
	timer := time.AfterFunc(safetyTimeout, func() { b.Close() })
	defer timer.Stop()
	if n, err := br.ReadBorrowed(pkts); n != 1 || err != nil || !bytes.Equal(pkts[0].Bytes(), want) {
		t.Fatalf("borrowed read: %d, %v; packet %d, want %d", n, err, tagOf(pkts[0].Bytes()), tagOf(want))
	}
	fill(bufB)
	pkts[0].Buf = bufB
	read(send(300, 7))
	for range 3 {
		if n, err := br.TryReadBorrowed(pkts); n != 0 || err != nil {
			t.Fatalf("empty borrowed read: %d, %v", n, err)
		}
		pkts[0].Buf = bufB
	}
	read(send(400, 8))
}

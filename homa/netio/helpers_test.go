package netio

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net"
	"net/netip"
	"testing"
	"time"
)

var (
	lo4   = netip.MustParseAddr("127.0.0.1")
	lo6   = netip.MustParseAddr("::1")
	hostA = netip.MustParseAddr("10.0.0.1")
)

// safetyTimeout ends a test whose packets never come, instead of letting
// it hang; no test asserts on how long anything takes.
const safetyTimeout = 20 * time.Second

// testPacket builds a Homa-looking packet of size bytes (at least 4) from
// port src to port dst. When there is room, tag goes in the sender id
// field (offset 20) so tests can recognize their packets; the rest is a
// pattern derived from tag.
func testPacket(src, dst uint16, size int, tag uint64) []byte {
	b := make([]byte, size)
	binary.BigEndian.PutUint16(b[0:], src)
	binary.BigEndian.PutUint16(b[2:], dst)
	if size > 11 {
		b[11] = 0x10 // DATA
	}
	if size >= homaHeaderLen {
		binary.BigEndian.PutUint64(b[20:], tag)
	}
	for i := homaHeaderLen; i < size; i++ {
		b[i] = byte(uint64(i)*131 + tag)
	}
	return b
}

// tagOf returns the tag testPacket put in b, or 0.
func tagOf(b []byte) uint64 {
	if len(b) < homaHeaderLen {
		return 0
	}
	return binary.BigEndian.Uint64(b[20:])
}

// received is a copy of a packet (or report) read from a Conn.
type received struct {
	data    []byte
	addr    netip.Addr
	unreach Unreachable
}

// readN reads n packets from c, failing the test on error or when they do
// not come within safetyTimeout (it then closes c to end the read).
func readN(t testing.TB, c Conn, n int) []received {
	t.Helper()
	type result struct {
		got []received
		err error
	}
	ch := make(chan result, 1)
	go func() {
		pkts := makePackets(8, 1<<16)
		var got []received
		for len(got) < n {
			k, err := c.ReadBatch(pkts[:min(len(pkts), n-len(got))])
			if err != nil {
				ch <- result{got, err}
				return
			}
			for _, p := range pkts[:k] {
				got = append(got, received{bytes.Clone(p.Bytes()), p.Addr, p.Unreachable})
			}
		}
		ch <- result{got, nil}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("ReadBatch after %d of %d packets: %v", len(r.got), n, r.err)
		}
		return r.got
	case <-time.After(safetyTimeout):
		c.Close()
		r := <-ch
		t.Fatalf("only %d of %d packets arrived (safety timeout)", len(r.got), n)
		return nil
	}
}

func makePackets(n, size int) []Packet {
	pkts := make([]Packet, n)
	for i := range pkts {
		pkts[i].Buf = make([]byte, size)
	}
	return pkts
}

// writeAll writes bufs to dst at priority prio and fails on error.
func writeAll(t testing.TB, c Conn, dst netip.Addr, prio uint8, bufs ...[]byte) {
	t.Helper()
	pkts := make([]Packet, len(bufs))
	for i, b := range bufs {
		pkts[i] = Packet{Buf: b, N: len(b), Addr: dst, Priority: prio}
	}
	n, err := c.WriteBatch(pkts)
	if err != nil || n != len(pkts) {
		t.Fatalf("WriteBatch = %d, %v; want %d, nil", n, err, len(pkts))
	}
}

// expectNothing fails if c has a packet ready.
func expectNothing(t testing.TB, c Conn) {
	t.Helper()
	pkts := makePackets(4, 1<<16)
	n, err := c.(Poller).TryReadBatch(pkts)
	if err != nil {
		t.Fatalf("TryReadBatch: %v", err)
	}
	for _, p := range pkts[:n] {
		t.Errorf("port %d got an unexpected packet: %d bytes, dst port %d, tag %#x", c.Port(), p.N, dstPort(p.Buf), tagOf(p.Bytes()))
	}
}

// checkCloseUnblocks starts a ReadBatch, waits (with parked) until it is
// inside, closes c, and checks that the read ends with an error wrapping
// net.ErrClosed, and that Close is idempotent.
func checkCloseUnblocks(t *testing.T, c Conn, parked func()) {
	t.Helper()
	isClosed := errIs(net.ErrClosed)
	errc := make(chan error, 1)
	go func() {
		_, err := c.ReadBatch(makePackets(1, 2048))
		errc <- err
	}()
	parked()
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case err := <-errc:
		if !isClosed(err) {
			t.Fatalf("ReadBatch after Close = %v, want an error wrapping net.ErrClosed", err)
		}
	case <-time.After(safetyTimeout):
		t.Fatal("Close did not unblock ReadBatch")
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := c.ReadBatch(makePackets(1, 2048)); !isClosed(err) {
		t.Fatalf("ReadBatch on a closed Conn = %v, want net.ErrClosed", err)
	}
	if _, err := c.(Poller).TryReadBatch(makePackets(1, 2048)); !isClosed(err) {
		t.Fatalf("TryReadBatch on a closed Conn = %v, want net.ErrClosed", err)
	}
}

func errIs(target error) func(error) bool {
	return func(err error) bool { return errors.Is(err, target) }
}

// openRandomPort opens a Conn with open at a random explicit port in
// 61000..65535: above Linux's ephemeral UDP ports and far from the client
// ports handed out from 32768 up, so that a test can close and reopen it
// without another process on the host taking it in between.
func openRandomPort(t testing.TB, open func(port uint16) (Conn, error)) Conn {
	t.Helper()
	for range 100 {
		c, err := open(uint16(61000 + rand.IntN(65536-61000)))
		if errors.Is(err, ErrPortInUse) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	t.Fatal("no free port found")
	return nil
}

// packetCounts keeps the packet counts of s, leaving out the system call
// counts and the offload state.
func packetCounts(s ConnStats) ConnStats {
	return ConnStats{Read: s.Read, Written: s.Written, Discarded: s.Discarded, Reports: s.Reports, ReportsDiscarded: s.ReportsDiscarded}
}

// withPayload splits pkt for a Scatter-gather write: its first hdr bytes
// in a Buf with spare room (filled with 0xee, which must not be sent),
// the rest as the Payload.
func withPayload(pkt []byte, hdr int, dst netip.Addr, prio uint8) Packet {
	buf := make([]byte, hdr+16)
	copy(buf, pkt[:hdr])
	for i := hdr; i < len(buf); i++ {
		buf[i] = 0xee
	}
	return Packet{Buf: buf, N: hdr, Payload: pkt[hdr:], Addr: dst, Priority: prio}
}

// payloadBatch builds a batch of Scatter-gather packets from src to dst
// port, each a whole packet (as the receiver must see it) and the Packet
// that writes it: a bare header, a header and one byte, a run of
// full-size packets closed by a shorter one (a GSO run over UDP), and a
// packet of max bytes.
func payloadBatch(src, dst uint16, addr netip.Addr, max int, tag uint64) (whole [][]byte, pkts []Packet) {
	const hdr = 60
	add := func(size, h int) {
		b := testPacket(src, dst, size, tag+uint64(len(whole)))
		whole = append(whole, b)
		pkts = append(pkts, withPayload(b, h, addr, 2))
	}
	add(homaHeaderLen, homaHeaderLen)
	add(hdr+1, hdr)
	for range 20 {
		add(1472, hdr)
	}
	add(700, hdr)
	add(max, hdr)
	add(1000, homaHeaderLen)
	return whole, pkts
}

// checkReceived fails unless got holds want's packets, in order, from
// addr.
func checkReceived(t testing.TB, got []received, want [][]byte, addr netip.Addr) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("read %d packets, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i].data, want[i]) || got[i].addr != addr || got[i].unreach != NotUnreachable {
			t.Fatalf("packet %d: %d bytes (tag %#x) from %v, want the %d bytes (tag %#x) sent from %v",
				i, len(got[i].data), tagOf(got[i].data), got[i].addr, len(want[i]), tagOf(want[i]), addr)
		}
	}
}

// pingPong measures one round trip of a 100-byte packet from x to y
// and back per op, through WriteBatch and ReadBatch.
func pingPong(b *testing.B, x, y Conn, xToY, yToX netip.Addr) {
	ping := []Packet{{Buf: testPacket(x.Port(), y.Port(), 100, 1), N: 100, Addr: xToY}}
	pong := []Packet{{Buf: testPacket(y.Port(), x.Port(), 100, 2), N: 100, Addr: yToX}}
	rx, ry := makePackets(1, 2048), makePackets(1, 2048)
	read := func(c Conn, pkts []Packet) {
		for {
			k, err := c.ReadBatch(pkts)
			if err != nil {
				b.Fatal(err)
			}
			if k > 0 {
				return
			}
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := x.WriteBatch(ping); err != nil {
			b.Fatal(err)
		}
		read(y, ry)
		if _, err := y.WriteBatch(pong); err != nil {
			b.Fatal(err)
		}
		read(x, rx)
	}
}

// tryReader is c's non-blocking read: into the caller's buffers, or
// borrowed.
func tryReader(c Conn, borrow bool) func([]Packet) (int, error) {
	if borrow {
		return c.(BorrowReader).TryReadBorrowed
	}
	return c.(Poller).TryReadBatch
}

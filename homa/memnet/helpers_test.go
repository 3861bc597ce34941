package memnet

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/homa-go/homa/homa/netio"
)

// The test packets of this package's tests: Homa-looking bytes whose
// tag, in the sender id field, tells them apart.

// homaHeaderLen is the length of the Homa common header.
const homaHeaderLen = 28

// testPacket builds a packet of size bytes (at least 4) from port src to
// port dst, with tag in the sender id field when there is room and a
// pattern derived from tag after the common header.
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
	unreach netio.Unreachable
}

// makePackets returns n Packets with Bufs of size bytes to read into.
func makePackets(n, size int) []netio.Packet {
	pkts := make([]netio.Packet, n)
	for i := range pkts {
		pkts[i].Buf = make([]byte, size)
	}
	return pkts
}

// writeAll writes bufs to dst at priority prio and fails on error.
func writeAll(t testing.TB, c netio.Conn, dst netip.Addr, prio uint8, bufs ...[]byte) {
	t.Helper()
	pkts := make([]netio.Packet, len(bufs))
	for i, b := range bufs {
		pkts[i] = netio.Packet{Buf: b, N: len(b), Addr: dst, Priority: prio}
	}
	if n, err := c.WriteBatch(pkts); err != nil || n != len(pkts) {
		t.Fatalf("WriteBatch = %d, %v; want %d, nil", n, err, len(pkts))
	}
}

// safetyTimeout ends a test whose packets never come, instead of letting
// it hang; no test asserts on how long anything takes.
const safetyTimeout = 20 * time.Second

// readN reads n packets from c, failing the test on error or when they do
// not come within safetyTimeout (it then closes c to end the read).
func readN(t testing.TB, c netio.Conn, n int) []received {
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

// expectNothing fails if c has a packet ready.
func expectNothing(t testing.TB, c netio.Conn) {
	t.Helper()
	pkts := makePackets(4, 1<<16)
	n, err := c.(netio.Poller).TryReadBatch(pkts)
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
func checkCloseUnblocks(t *testing.T, c netio.Conn, parked func()) {
	t.Helper()
	isClosed := func(err error) bool { return errors.Is(err, net.ErrClosed) }
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
		t.Fatalf("ReadBatch on a closed netio.Conn = %v, want net.ErrClosed", err)
	}
	if _, err := c.(netio.Poller).TryReadBatch(makePackets(1, 2048)); !isClosed(err) {
		t.Fatalf("TryReadBatch on a closed netio.Conn = %v, want net.ErrClosed", err)
	}
}

// checkReceived fails unless got holds want's packets, in order, from
// addr.
func checkReceived(t testing.TB, got []received, want [][]byte, addr netip.Addr) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("read %d packets, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i].data, want[i]) || got[i].addr != addr || got[i].unreach != netio.NotUnreachable {
			t.Fatalf("packet %d: %d bytes (tag %#x) from %v, want the %d bytes (tag %#x) sent from %v",
				i, len(got[i].data), tagOf(got[i].data), got[i].addr, len(want[i]), tagOf(want[i]), addr)
		}
	}
}

// payloadBatch builds a batch of Scatter-gather packets from src to dst
// port, each a whole packet (as the receiver must see it) and the Packet
// that writes it: a bare header, a header and one byte, a run of
// full-size packets closed by a shorter one (a GSO run over UDP), and a
// packet of max bytes.
func payloadBatch(src, dst uint16, addr netip.Addr, max int, tag uint64) (whole [][]byte, pkts []netio.Packet) {
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

// withPayload splits pkt for a Scatter-gather write: its first hdr bytes
// in a Buf with spare room (filled with 0xee, which must not be sent),
// the rest as the Payload.
func withPayload(pkt []byte, hdr int, dst netip.Addr, prio uint8) netio.Packet {
	buf := make([]byte, hdr+16)
	copy(buf, pkt[:hdr])
	for i := hdr; i < len(buf); i++ {
		buf[i] = 0xee
	}
	return netio.Packet{Buf: buf, N: hdr, Payload: pkt[hdr:], Addr: dst, Priority: prio}
}

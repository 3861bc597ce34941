package core

import (
	"net/netip"
	"testing"
	"unsafe"

	"github.com/homa-go/homa/contract"
	"github.com/homa-go/homa/homa/wire"
	"pgregory.net/rapid"
)

// ledger is a Buffers that never reuses a buffer and knows, for every
// byte handed out, whether it is the core's, the application's (in a
// message delivered and not released) or back in the pool: so a test
// can check that a read lands only in a buffer the core holds.
type ledger struct {
	state map[uintptr]*ledgerBuf
}

type ledgerBuf struct {
	b         []byte // kept, so that the address is never reused
	base, end uintptr
	where     int // one of the constants below
}

const (
	heldByCore = iota
	heldByApp
	backInPool
)

func (l *ledger) Get(n int) []byte {
	b := make([]byte, n)
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	l.state[p] = &ledgerBuf{b: b, base: p, end: p + uintptr(cap(b))}
	return b
}

func (l *ledger) Put(b []byte) {
	lb := l.find(b)
	if lb == nil || lb.where == backInPool {
		panic("a buffer went back to the pool twice, or was never handed out")
	}
	lb.where = backInPool
}

// find returns the buffer b lies in (nil: not one of the ledger's).
func (l *ledger) find(b []byte) *ledgerBuf {
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	for _, lb := range l.state {
		if p >= lb.base && p < lb.end {
			return lb
		}
	}
	return nil
}

// TestLendProperties drives a server core with reads of random packets
// of several messages (in order and not, duplicated, from two clients,
// some from the wrong port, some corrupted, some garbage), landed where
// Lend says, with packets
// handled outside reads, RPCs freed and messages released in between,
// and checks that:
//   - a read never lands in a buffer the core does not hold (back in the
//     pool, or the application's);
//   - no buffer goes back to the pool twice;
//   - every message delivered is intact;
//   - when everything is over, every buffer is back in the pool.
func TestLendProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		l := &ledger{state: map[uintptr]*ledgerBuf{}}
		c := New(Local{Port: 500, Buffers: l}, Config{})
		hosts := []netip.Addr{netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.0.3")}
		type msg struct {
			host   netip.Addr
			id     uint64
			length int
			seg    int
			next   int  // next offset sent in order
			forged bool // a corrupted packet of it was sent: its sender is not to be trusted
		}
		var msgs []*msg
		for i := range rapid.IntRange(1, 4).Draw(t, "messages") {
			m := &msg{host: hosts[i%2], id: uint64(2 + 2*i), length: rapid.IntRange(10_000, 120_000).Draw(t, "length"),
				seg: rapid.SampledFrom([]int{1400, 4000, 9000}).Draw(t, "seg")}
			msgs = append(msgs, m)
		}
		byteOf := func(m *msg, i int) byte { return byte(int(m.id)*31 + i*7 + i>>9) }
		packet := func(m *msg, off int, port uint16) []byte {
			end := min(off+m.seg, m.length)
			d := wire.Data{Common: wire.Common{SrcPort: port, DstPort: 500, SenderID: m.id, Sequence: uint32(off)},
				MessageLength: uint32(m.length), Incoming: uint32(m.length), SegOffset: wire.OffsetNone, Payload: make([]byte, end-off)}
			for i := range d.Payload {
				d.Payload[i] = byteOf(m, off+i)
			}
			return d.Append(nil)
		}
		pick := func() ([]byte, netip.Addr) {
			m := rapid.SampledFrom(msgs).Draw(t, "msg")
			off := m.next
			if rapid.IntRange(0, 3).Draw(t, "order") == 0 || off >= m.length {
				off = rapid.IntRange(0, (m.length-1)/m.seg).Draw(t, "segment") * m.seg
			} else {
				m.next += m.seg
			}
			port := uint16(40000)
			switch rapid.IntRange(0, 19).Draw(t, "forged") {
			case 0:
				port = 40001
			case 1: // anything at all: short, of another type, inconsistent
				return rapid.SliceOfN(rapid.Byte(), 0, 12_000).Draw(t, "garbage"), m.host
			case 2: // the message's header, with the length or offset changed
				m.forged = true
				pkt := packet(m, off, port)
				i := rapid.IntRange(28, 55).Draw(t, "corrupted")
				pkt[i] ^= byte(rapid.IntRange(1, 255).Draw(t, "xor"))
				return pkt, m.host
			}
			return packet(m, off, port), m.host
		}
		var delivered []*contract.Message
		check := func(out *Output) {
			for _, m := range out.Messages {
				var src *msg
				for _, x := range msgs {
					if x.host == m.Peer.Addr() && x.id|1 == m.ID {
						src = x
					}
				}
				if src == nil || len(m.Data) != src.length && !src.forged {
					t.Fatalf("message %d from %v of %d bytes delivered", m.ID, m.Peer, len(m.Data))
				}
				for i, b := range m.Data {
					if src.forged {
						break // what its sender claimed may be anything
					}
					if b != byteOf(src, i) {
						t.Fatalf("message %d from %v: byte %d is %#x, want %#x", m.ID, m.Peer, i, b, byteOf(src, i))
					}
				}
				if lb := l.find(m.Data); lb != nil {
					lb.where = heldByApp
				}
				c.Delivered(m.Peer.Addr(), m.ID)
				delivered = append(delivered, m)
			}
			for _, p := range out.Packets { // sent
				l.Put(p.Buf)
			}
			for _, h := range out.Holds {
				h.Release()
			}
			out.Reset()
		}
		var out Output
		regions := make([][]byte, 8)
		lent := 0
		for range rapid.IntRange(1, 80).Draw(t, "steps") {
			switch rapid.IntRange(0, 9).Draw(t, "step") {
			case 0: // a packet handled outside a read
				pkt, host := pick()
				c.Handle(pkt, host, 0, &out)
			case 1: // an RPC freed (timed out, shed, aborted by its client)
				m := rapid.SampledFrom(msgs).Draw(t, "freed")
				if r := c.servers.get(m.host, m.id|1); r != nil {
					c.freeServer(r, false)
				}
			case 2: // the application releases a message
				if len(delivered) > 0 {
					i := rapid.IntRange(0, len(delivered)-1).Draw(t, "released")
					m := delivered[i]
					if lb := l.find(m.Data); lb != nil && lb.where == heldByApp {
						lb.where = heldByCore // Release puts it back, checked by Put
					}
					m.Release()
					delivered = append(delivered[:i], delivered[i+1:]...)
				}
			default: // a read of up to 8 packets, landed where lent
				var pkts [][]byte
				var from []netip.Addr
				for range rapid.IntRange(1, 8).Draw(t, "batch") {
					pkt, host := pick()
					pkts, from = append(pkts, pkt), append(from, host)
				}
				for i := range min(lent, len(pkts)) {
					if lb := l.find(regions[i]); lb == nil || lb.where != heldByCore {
						t.Fatalf("a read lands in a buffer the core does not hold (in the ledger %v)", lb != nil)
					}
				}
				in := landRead(regions[:lent], pkts...)
				for i := range in {
					in[i].Addr = from[i]
				}
				c.HandleBatch(in, 0, &out)
				lent = c.Lend(regions[:cap(regions)])
			}
			check(&out)
		}
		// The last read is handled, then everything ends: every buffer
		// but the packets' own goes back (a buffer on loan while the core
		// closes would be left to the garbage collector, as a read may
		// still write into it).
		c.HandleBatch(nil, 0, &out)
		check(&out)
		for _, m := range delivered {
			m.Release()
		}
		c.Close(0, &out)
		check(&out)
		for _, lb := range l.state {
			if lb.where != backInPool {
				t.Fatalf("a buffer of %d bytes never went back to the pool", lb.end-lb.base)
			}
		}
	})
}

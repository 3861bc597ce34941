package core

import (
	"net/netip"

	"github.com/homa-go/homa/homa/wire"
)

// Receiving in place. Reassembly copies each packet's payload from its
// receive buffer into the message (inmsg.go); for a large message that
// is a second copy of every byte, after the kernel's. Instead the shell
// may ask, before it reads, where the packets it is about to read are
// expected to go (Lend), and have the read put each packet's payload
// there (Inbound.Land): the packet that comes is most often the next
// one of the message that came last, so its bytes land where they
// belong and the core only marks them received.
//
// What Lend hands out is a loan of an incoming message's buffer: regions
// of it that have not been received, one per packet expected, in order.
// Until the loan ends, at the next HandleBatch (the read is over by
// then), the core neither gives the buffer back to Buffers nor hands it
// to the application while a read may still write into it, nor stores
// into it bytes that a read could land on: a message that ends
// meanwhile (aborted, shed for memory, timed out, closed) leaves the
// buffer to the loan, which returns it; a message to which a packet
// handled outside HandleBatch (Handle) brings bytes moves to a copy of
// its buffer, leaving the buffer to the loan.
//
// A read writes whatever comes into the regions, not only what was
// expected. So before it handles any packet, HandleBatch sorts them: a
// packet whose bytes went to a region is received in place only if it
// is a DATA packet of the lent message for exactly that region (same
// peer, port and id, its offset the region's, nothing beyond it); every
// other packet's bytes are first moved back behind its header in its
// receive buffer, as if it had been read whole. Sorting first matters:
// a packet handled normally may copy its bytes into the message over a
// region where a later packet of the batch landed. The regions are
// only ever bytes not received yet, so a packet that landed where it
// does not belong overwrites nothing the message holds.
//
// A packet moved costs a copy more than one read whole: as much as one
// landed in place saves. Lending pays while a stream of packets of one
// message comes (a message received alone; loopback), and costs where
// several senders' packets interleave, each read's packets belonging to
// this message and that in turn. So Lend lends at most one region more
// than the run of packets of the message that came last, in order with
// nothing else between; and the core keeps a score, a point up for
// each packet landed in place and one down for each moved. While it is
// negative, Lend lends only when the run says a stream is under way
// (streamBytes in order), or else a single region in landProbeEvery calls,
// to find out when lending pays again; a loan made then that lands a
// packet in place clears the score.

// maxLend is the most regions one loan hands out: a read's batch.
const maxLend = 64

// The score of landing (see above): its bounds, and how often Lend
// probes while it is negative.
const (
	landScoreMax   = 64
	landProbeEvery = 16
	streamBytes    = 128 << 10
)

// landing is the core's loan of a buffer to the shell's next read.
type landing struct {
	buf     []byte // the buffer lent (nil: none)
	msg     *inMsg // its message, nil once that let go of buf
	id      uint64 // the message's RPC, to recognise its packets
	addr    netip.Addr
	port    uint16
	reading bool // the read may write into buf: Lend to HandleBatch
	free    bool // buf goes back to Buffers when the loan ends
	probe   bool // lent while the score was negative
}

// Lend fills dst with the regions where the next read should put the
// payloads of the packets it reads (Inbound.Land), in the order the
// packets are expected, and returns how many it filled: none when no
// message is expected to go on. They are regions of the buffer of the
// incoming message that received the last packet, after that packet,
// each as long as the longest payload of its run of packets (the
// sender's segment: a packet cut short does not tell it) and none
// across the sender's unscheduled limit, where it cuts a segment short,
// as far as the bytes granted and not received yet go. The loan ends when the
// next HandleBatch returns: the caller reads into the regions, hands
// what it read to HandleBatch with each packet's Land, and lends again.
func (c *Core) Lend(dst [][]byte) int {
	c.endLoan()
	h := &c.landHint
	r := h.r
	if r == nil || c.closed || r.id != h.id || r.state != stateActive || !r.inInit {
		return 0
	}
	m := &r.in
	if m.whole == nil || m.complete() || h.seg == 0 {
		return 0
	}
	most := min(len(dst), maxLend, int(min(h.run, maxLend))+1)
	if c.landScore < 0 && uint64(h.run)*uint64(h.seg) < streamBytes {
		if c.landProbes++; c.landProbes%landProbeEvery != 0 {
			return 0
		}
		most = 1
	}
	n := 0
	limit := min(m.granted, m.length)
	for off := h.next; n < most && off < limit; {
		end := min(off+h.seg, m.length)
		if off < m.unsched && end > m.unsched {
			end = m.unsched // the sender cuts its last unscheduled segment there
		}
		if m.anyReceived(off, end) {
			break
		}
		dst[n] = m.whole[off:end]
		n++
		off = end
	}
	if n > 0 {
		c.land = landing{buf: m.whole, msg: m, id: r.id, addr: r.peer.addr, port: r.port, reading: true, probe: c.landScore < 0}
	}
	return n
}

// landHint remembers the incoming message that received the last DATA
// packet, where its next packet goes, and how many of its packets came
// in order with nothing else between.
type landHint struct {
	r    *rpc
	id   uint64 // r's id then: r may have been recycled since
	next uint32 // the end of that packet
	seg  uint32 // its payload's length
	run  uint32
}

// landed notes that r's message received a packet's payload at
// [off, end).
func (c *Core) landed(r *rpc, off, end uint32) {
	h := &c.landHint
	seg := end - off
	if h.r == r && h.id == r.id && h.next == off {
		h.run++
		// A packet cut short (the first segment, the last unscheduled
		// one, the message's last) does not tell the sender's segment.
		seg = max(seg, h.seg)
	} else {
		h.run = 1
	}
	h.r, h.id, h.next, h.seg = r, r.id, end, seg
}

// settleLanding sorts a batch's packets before they are handled (see
// above): those that landed where they belong keep their Land, the
// others get their bytes back behind their header. The read is over:
// the buffer lent may be handed to the application from now on.
func (c *Core) settleLanding(pkts []Inbound) {
	c.land.reading = false
	score := c.landScore
	for i := range pkts {
		p := &pkts[i]
		if len(p.Land) == 0 {
			continue
		}
		if p.Unreachable == 0 && c.inPlace(p) {
			c.stats.LandedPackets++
			score++
			continue
		}
		c.stats.MovedPackets++
		score--
		p.Buf = unland(p.Buf, p.Land)
		p.Land = nil
	}
	if c.land.probe && score > c.landScore {
		score = max(score, 0)
	}
	c.landScore = max(-landScoreMax, min(score, landScoreMax))
}

// inPlace reports whether p is a DATA packet of the lent message whose
// payload is all in p.Land, at its place in the message.
func (c *Core) inPlace(p *Inbound) bool {
	l := &c.land
	if l.msg == nil || len(p.Buf) != wire.DataLen || cap(p.Land) > cap(l.buf) {
		return false
	}
	off := cap(l.buf) - cap(p.Land)
	if off >= len(l.buf) || &l.buf[off] != &p.Land[0] {
		return false // not a region of the buffer lent
	}
	var d wire.Data
	if _, err := d.Parse(p.Buf); err != nil {
		return false
	}
	return d.SenderID^1 == l.id && d.SrcPort == l.port && c.canon(p.Addr) == l.addr && d.Offset() == uint32(off)
}

// unland puts a packet whose payload went to land back together in its
// receive buffer: header, land, then the rest. The receive buffer has
// room for any packet (it was offered whole to the read); if it has
// not, the packet is cut short where it ends, and dropped as short or
// inconsistent when handled.
func unland(buf, land []byte) []byte {
	hdr := min(len(buf), wire.DataLen)
	n := min(len(buf)+len(land), cap(buf))
	whole := buf[:n]
	copy(whole[hdr+len(land):], buf[hdr:])
	copy(whole[hdr:], land)
	return whole
}

// endLoan ends the loan in place, if any: the buffer of a message that
// let go of it goes back to Buffers, unless a read may still write into
// it (the core closed, or the caller lent again without handling what
// it read): the garbage collector takes it then.
func (c *Core) endLoan() {
	l := &c.land
	if l.free && !l.reading {
		c.bufs.Put(l.buf)
	}
	*l = landing{}
}

// letGo is called before m gives up its buffer for good (released,
// reset): a buffer on loan stays with the loan, which returns it.
func (c *Core) letGo(m *inMsg) {
	l := &c.land
	if l.msg != m || m.whole == nil {
		return
	}
	l.msg, l.free = nil, true
	m.whole = nil // m.mem still counts it: the caller uncharges it
}

// handOver is called before m's buffer goes to the application: while a
// read may still write into it, the application gets a copy, and the
// loan keeps the buffer.
func (c *Core) handOver(m *inMsg) {
	l := &c.land
	if l.msg != m || m.whole == nil {
		return
	}
	if l.reading {
		c.leaveLoan(m)
		return
	}
	l.msg, l.buf = nil, nil // the application's now
}

// storing is called before a packet handled outside a read (Handle)
// stores bytes into m: if m's buffer is on loan, the read may land a
// packet over those bytes, so m moves to a copy of its buffer, and the
// loan keeps the old one.
func (c *Core) storing(m *inMsg) {
	if l := &c.land; l.reading && l.msg == m && m.whole != nil {
		c.leaveLoan(m)
	}
}

// leaveLoan moves m, whose buffer is on loan to a read in progress, to a
// copy of it; the loan returns the buffer when it ends. The copy is of
// the same length, so of the same size in Buffers: m's storage, as
// counted, does not change (and while the read lasts, the buffer on
// loan is not counted: at most one buffer is).
func (c *Core) leaveLoan(m *inMsg) {
	l := &c.land
	l.msg, l.free = nil, true
	own := c.bufs.Get(len(m.whole))
	copy(own, m.whole)
	m.whole = own
}

package rawfloor

import (
	"math/bits"
	"sync/atomic"
)

// Sizes of a receiver's buffers.
const (
	// maxPackets is how many packets carry the longest message.
	maxPackets = (MaxMessage + MaxPayload - 1) / MaxPayload
	// bufLen is the length of a message buffer: MaxMessage rounded up
	// to whole packets, so that a packet of any offset, read at the
	// place of any other, fits there (the last packet of the longest
	// message is shorter than MaxPayload, the others are not).
	bufLen = maxPackets * MaxPayload
	// ipv4HeaderMin and ipv4HeaderMax bound the IPv4 header that a raw
	// IPv4 socket returns in front of the payload (IHL 5 to 15).
	ipv4HeaderMin = 20
	ipv4HeaderMax = 60
	// spillLen is how far IPv4 options can push a packet's payload past
	// its place in the buffer.
	spillLen = ipv4HeaderMax - ipv4HeaderMin
)

// The arrival bitmap has a bit per packet of a message.
const _ uint = 32 - maxPackets

// landing is what a receiver did with a packet.
type landing int

const (
	// landedPart: a packet of the message, which is not complete yet.
	landedPart landing = iota
	// landedLast: the packet that completed the message.
	landedLast
	// landedStale: a packet of an earlier round trip, or a duplicate;
	// ignored.
	landedStale
	// landedDropped: a malformed or truncated packet; dropped.
	landedDropped
)

// receiver puts the packets of one message at a time together in its
// buffer, with no copy of the payload in the ordinary case. Each packet
// is read (see parts) with its IP and floor headers into a small buffer
// and its payload straight into the message buffer at the place of the
// first packet still missing, which is where the next packet in order
// belongs; a packet that belongs elsewhere is moved there, and counted.
// A receiver is used by one goroutine; its counters may be read by any.
type receiver struct {
	tag, kind uint32
	v4        bool // the packets start with an IPv4 header
	// follow says that a packet of a later round trip than the current
	// one starts a new message (the server, whose client may give up on
	// a round trip); otherwise only the round trip set by expect is
	// taken (the client).
	follow bool

	buf   []byte // bufLen bytes, allocated once
	head  []byte // the IPv4 header (of the usual length) and floor header
	spill []byte // the end of a payload that IPv4 options pushed along

	seq   uint64 // round trip of the current message
	total int    // its length
	have  uint32 // bit i: packet i of the message has arrived
	count int    // bits set in have
	done  bool   // the message is complete (or none was started)

	moved, dropped, stale atomic.Uint64
}

// newReceiver makes a receiver of the packets of tag and kind, with its
// buffers.
func newReceiver(tag, kind uint32, v4, follow bool) *receiver {
	r := &receiver{tag: tag, kind: kind, v4: v4, follow: follow, done: true,
		buf: make([]byte, bufLen)}
	headLen, spill := HeaderLen, 0
	if v4 {
		headLen, spill = ipv4HeaderMin+HeaderLen, spillLen
	}
	r.head = make([]byte, headLen)
	r.spill = make([]byte, spill)
	return r
}

// expect starts a message of round trip seq and total bytes, the only
// one the receiver then takes.
func (r *receiver) expect(seq uint64, total int) {
	r.seq, r.total = seq, total
	r.have, r.count, r.done = 0, 0, false
}

// at is the offset in the buffer where the next packet's payload is
// read: the place of the first packet the message still lacks, or the
// first packet's when no message is under way.
func (r *receiver) at() int {
	if r.done {
		return 0
	}
	return bits.TrailingZeros32(^r.have) * MaxPayload
}

// parts are the three buffers a packet is read into, end to end: the
// headers, the payload's place at offset at, and the spill.
func (r *receiver) parts(at int) (head, body, spill []byte) {
	return r.head, r.buf[at : at+MaxPayload], r.spill
}

// message is the complete message, valid until the next packet is read.
func (r *receiver) message() []byte { return r.buf[:r.total] }

// land takes a packet of n bytes that was read into parts(at). It checks
// the packet, drops it or ignores it if it does not belong to the
// message, and otherwise moves its payload to its own offset if it was
// read elsewhere.
func (r *receiver) land(at, n int) landing {
	head, body, spill := r.parts(at)
	ihl := 0
	if r.v4 {
		ihl = int(head[0]&0xf) * 4
		if ihl < ipv4HeaderMin {
			return r.drop()
		}
	}
	if n < ihl+HeaderLen || n > len(head)+len(body)+len(spill) {
		return r.drop()
	}
	var hb [HeaderLen]byte
	gather(hb[:], ihl, head, body, spill)
	h, _, _ := parseHeader(hb[:]) // cannot fail: hb is HeaderLen long
	payloadLen := n - ihl - HeaderLen
	if h.tag != r.tag || h.kind != r.kind || !h.fits(payloadLen) {
		return r.drop()
	}
	switch {
	case h.seq == r.seq && !r.done:
		if int(h.total) != r.total {
			return r.drop() // the length of a message does not change
		}
	case r.follow && h.seq > r.seq:
		r.expect(h.seq, int(h.total))
	default:
		r.stale.Add(1) // an earlier round trip, or a finished one
		return landedStale
	}
	bit := uint32(1) << (h.off / MaxPayload)
	if r.have&bit != 0 {
		r.stale.Add(1)
		return landedStale
	}
	// The payload's place in body, and what of it went on into spill.
	skip := ihl + HeaderLen - len(head)
	end := n - len(head)
	inBody := min(end, len(body))
	if off := int(h.off); off != at || skip != 0 || end > inBody {
		// Not where it belongs: read at the place of another packet, or
		// pushed along by IPv4 options. The bytes at both places belong
		// to packets not yet arrived, so nothing received is lost.
		copy(r.buf[off:], body[skip:inBody])
		copy(r.buf[off+inBody-skip:], spill[:end-inBody])
		r.moved.Add(1)
	}
	r.have |= bit
	if r.count++; r.count == packets(r.total) {
		r.done = true
		return landedLast
	}
	return landedPart
}

// drop counts a dropped packet.
func (r *receiver) drop() landing {
	r.dropped.Add(1)
	return landedDropped
}

// gather copies into dst the bytes from offset from on of the stream
// that parts make end to end. It copies headers, never payloads.
func gather(dst []byte, from int, parts ...[]byte) {
	for _, p := range parts {
		if len(dst) == 0 {
			return
		}
		if from >= len(p) {
			from -= len(p)
			continue
		}
		k := copy(dst, p[from:])
		dst, from = dst[k:], 0
	}
}

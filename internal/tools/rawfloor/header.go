package rawfloor

import (
	"encoding/binary"
	"errors"
)

// Header field offsets, from the table in the package doc.
const (
	tagOff   = 0
	kindOff  = 4
	seqOff   = 8
	offOff   = 16
	totalOff = 20
)

// Packet kinds.
const (
	kindRequest  = 1
	kindResponse = 2
)

// match says which packets a socket receives: those of tag and kind,
// and with byClient only those whose off field is client (a Rate's
// responses to one client).
type match struct {
	tag, kind uint32
	client    uint32
	byClient  bool
}

// errShortHeader: fewer than HeaderLen bytes where a header should be.
var errShortHeader = errors.New("rawfloor: packet shorter than its header")

// header is the floor's header in front of each packet's payload.
type header struct {
	tag, kind uint32
	seq       uint64 // round trip the packet belongs to
	off       uint32 // byte offset of the packet's payload in its message
	total     uint32 // length of the whole message
}

// encodedLen is the length of h on the wire.
func (header) encodedLen() int { return HeaderLen }

// appendTo appends h in wire order to b.
func (h header) appendTo(b []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, h.tag)
	b = binary.BigEndian.AppendUint32(b, h.kind)
	b = binary.BigEndian.AppendUint64(b, h.seq)
	b = binary.BigEndian.AppendUint32(b, h.off)
	return binary.BigEndian.AppendUint32(b, h.total)
}

// parseHeader reads a header from the front of b and says how many
// bytes it took.
func parseHeader(b []byte) (header, int, error) {
	if len(b) < HeaderLen {
		return header{}, 0, errShortHeader
	}
	return header{
		tag:   binary.BigEndian.Uint32(b[tagOff:]),
		kind:  binary.BigEndian.Uint32(b[kindOff:]),
		seq:   binary.BigEndian.Uint64(b[seqOff:]),
		off:   binary.BigEndian.Uint32(b[offOff:]),
		total: binary.BigEndian.Uint32(b[totalOff:]),
	}, HeaderLen, nil
}

// packets is how many packets carry a message of total bytes: one per
// MaxPayload bytes, and one for an empty message.
func packets(total int) int {
	if total == 0 {
		return 1
	}
	return (total + MaxPayload - 1) / MaxPayload
}

// fits reports whether a packet with header h and a payload of n bytes
// is where the fixed layout of a message puts one: a total of at most
// MaxMessage, an offset at a multiple of MaxPayload inside the message,
// and a payload of exactly the bytes from there to the next multiple or
// the end. This excludes off+n > total, and any overlap of two packets.
func (h header) fits(n int) bool {
	if h.total > MaxMessage || h.off > MaxMessage {
		return false // and so both fit an int on every platform
	}
	total, off := int(h.total), int(h.off)
	if off%MaxPayload != 0 || off/MaxPayload >= packets(total) {
		return false
	}
	return n == min(MaxPayload, total-off)
}

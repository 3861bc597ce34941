package netrpc

import (
	"encoding/binary"
	"fmt"
)

// A message longer than one Homa message (a large request or reply,
// homaMax bytes at most each) travels in parts, each a Homa message of
// its own:
//
//	offset size field
//	0      1    version (1)
//	1      1    kind (see below)
//	2      2    zero
//	4      4    total length T of the whole message, big endian
//	8      4    offset of the part's first byte in the message
//	12     8    id: the call's (request parts: net/rpc's sequence
//	            number at the client) or the reply's (reply parts: a
//	            number the server gives it)
//	20     ...  the part's bytes (parts only)
//
// The whole message is a request or response frame as in frame.go.
//
// Kinds: a client sends a large request as requests of kind
// kindRequestPart, a few at a time; the server answers each with a
// kindPartAck, except the part that completes the request, whose Homa
// RPC carries the call's response. A response too long for one Homa
// message goes as a kindReplyPart holding its first bytes and length;
// the client then asks for the rest with requests of kind kindReplyPull
// (offset: where the part wanted begins, a multiple of partData; each
// part is sent once), each answered with a kindReplyPart. Every part but
// the last carries partData bytes. A part that cannot be taken is
// answered with a response frame carrying the error, which ends the
// call.
const (
	kindRequestPart = 3
	kindPartAck     = 4
	kindReplyPart   = 5
	kindReplyPull   = 6

	offPartTotal  = 4
	offPartOffset = 8
	offPartID     = 12
	partHeaderLen = 20

	// partData is the most bytes of the message one part carries.
	partData = homaMax - partHeaderLen
	// minPartData is the fewest bytes a part carries unless it ends
	// the message, so that a message has at most T/minPartData parts
	// whatever its sender does.
	minPartData = 64 << 10
)

// part is one part of a large message, or a pull or an acknowledgment.
type part struct {
	kind   byte
	total  int
	offset int
	id     uint64
	data   []byte // aliases the parsed message
}

// partLen is the encoded length of a part carrying n bytes.
func partLen(n int) int { return partHeaderLen + n }

// appendPart appends p's encoding. total and offset must fit 32 bits
// (MaxMessageLimit does).
func appendPart(b []byte, p part) []byte {
	b = append(b, frameVersion, p.kind, 0, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(p.total))
	b = binary.BigEndian.AppendUint32(b, uint32(p.offset))
	b = binary.BigEndian.AppendUint64(b, p.id)
	return append(b, p.data...)
}

// parsePart parses a part of kind; data aliases msg. It checks the
// fields against each other, not against any limit: total at least 1,
// the part's bytes within it, none for a pull or an acknowledgment.
func parsePart(msg []byte, kind byte) (part, error) {
	if len(msg) < partHeaderLen {
		return part{}, fmt.Errorf("%w: part of %d bytes is shorter than its %d-byte header", errMalformed, len(msg), partHeaderLen)
	}
	if err := checkHead(msg, kind); err != nil {
		return part{}, err
	}
	p := part{
		kind:   kind,
		total:  int(binary.BigEndian.Uint32(msg[offPartTotal:])),
		offset: int(binary.BigEndian.Uint32(msg[offPartOffset:])),
		id:     binary.BigEndian.Uint64(msg[offPartID:]),
		data:   msg[partHeaderLen:],
	}
	switch {
	case msg[2] != 0 || msg[3] != 0:
		return part{}, fmt.Errorf("%w: part header bytes 2..3 are %x, want zero", errMalformed, msg[2:4])
	case p.total == 0:
		return part{}, fmt.Errorf("%w: part of a message of 0 bytes", errMalformed)
	case p.offset >= p.total:
		return part{}, fmt.Errorf("%w: part at byte %d of a message of %d bytes", errMalformed, p.offset, p.total)
	case kind == kindPartAck || kind == kindReplyPull:
		if len(p.data) != 0 {
			return part{}, fmt.Errorf("%w: %d bytes after a part header of kind %d", errMalformed, len(p.data), kind)
		}
	case len(p.data) == 0:
		return part{}, fmt.Errorf("%w: part without bytes", errMalformed)
	case len(p.data) > p.total-p.offset:
		return part{}, fmt.Errorf("%w: part of %d bytes at byte %d of a message of %d bytes", errMalformed, len(p.data), p.offset, p.total)
	case len(p.data) < minPartData && p.offset+len(p.data) != p.total:
		return part{}, fmt.Errorf("%w: part of %d bytes (the least is %d unless it ends the message)", errMalformed, len(p.data), minPartData)
	}
	return p, nil
}

// kindOf returns the kind byte of a message of this package, or 0 when
// it is too short to have one.
func kindOf(msg []byte) byte {
	if len(msg) <= offKind {
		return 0
	}
	return msg[offKind]
}

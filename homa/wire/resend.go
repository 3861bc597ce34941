package wire

import "encoding/binary"

// RESEND layout after the common header (WIRE.md, "Type-specific parts").
const (
	offResendOffset   = 28
	offResendLength   = 32
	offResendPriority = 36

	// ResendLen is the length of a RESEND packet.
	ResendLen = 37
)

// ResendToEnd as a Resend length asks for everything from the offset on.
const ResendToEnd uint32 = 0xffffffff

// Resend is a RESEND packet: a request to retransmit part of a message.
type Resend struct {
	Common
	// Offset is the message offset of the first byte to retransmit.
	Offset uint32
	// Length is the number of bytes to retransmit, or ResendToEnd.
	Length uint32
	// Priority is the priority (0..7) for the retransmitted DATA.
	Priority uint8
}

// Append appends the encoded packet to b.
func (p *Resend) Append(b []byte) []byte {
	b, h := extend(b, ResendLen)
	p.Common.put(h, TypeResend)
	binary.BigEndian.PutUint32(h[offResendOffset:], p.Offset)
	binary.BigEndian.PutUint32(h[offResendLength:], p.Length)
	h[offResendPriority] = p.Priority
	return b
}

// Len returns ResendLen.
func (p *Resend) Len() int { return ResendLen }

// Parse decodes a RESEND from b and returns ResendLen; trailing bytes are
// ignored. On error p is unchanged.
func (p *Resend) Parse(b []byte) (int, error) {
	if err := parseHeader(b, &p.Common, TypeResend, ResendLen); err != nil {
		return 0, err
	}
	p.Offset = binary.BigEndian.Uint32(b[offResendOffset:])
	p.Length = binary.BigEndian.Uint32(b[offResendLength:])
	p.Priority = b[offResendPriority]
	return ResendLen, nil
}

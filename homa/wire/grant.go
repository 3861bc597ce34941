package wire

import "encoding/binary"

// GRANT layout after the common header (WIRE.md, "Type-specific parts").
const (
	offGrantOffset   = 28
	offGrantPriority = 32

	// GrantLen is the length of a GRANT packet.
	GrantLen = 33
)

// Grant is a GRANT packet: the receiver of a message lets its sender
// transmit more of it.
type Grant struct {
	Common
	// Offset is the message offset up to which (not including) the sender
	// may now transmit.
	Offset uint32
	// Priority is the priority (0..7) for the message's further DATA.
	Priority uint8
}

// Append appends the encoded packet to b.
func (p *Grant) Append(b []byte) []byte {
	b, h := extend(b, GrantLen)
	p.Common.put(h, TypeGrant)
	binary.BigEndian.PutUint32(h[offGrantOffset:], p.Offset)
	h[offGrantPriority] = p.Priority
	return b
}

// Len returns GrantLen.
func (p *Grant) Len() int { return GrantLen }

// Parse decodes a GRANT from b and returns GrantLen; trailing bytes are
// ignored. On error p is unchanged.
func (p *Grant) Parse(b []byte) (int, error) {
	if err := parseHeader(b, &p.Common, TypeGrant, GrantLen); err != nil {
		return 0, err
	}
	p.Offset = binary.BigEndian.Uint32(b[offGrantOffset:])
	p.Priority = b[offGrantPriority]
	return GrantLen, nil
}

package wire

import "encoding/binary"

// Common header layout (WIRE.md, "Common header").
const (
	offSrcPort  = 0
	offDstPort  = 2
	offSequence = 4
	// 8..10: unused ack field, zero.
	offType  = 11
	offDoff  = 12
	offFlags = 13
	// 14..15: window, zero.
	offChecksum = 16
	offUrgent   = 18
	offSenderID = 20

	// CommonLen is the length of the common header that starts every packet.
	CommonLen = 28
)

// Values the Linux implementation writes into the TCP-like fields of the
// common header. Receivers must not depend on them.
const (
	// DoffData is the doff of a DATA packet built as a whole.
	DoffData uint8 = 0xe0
	// DoffDataSegment is the doff of a DATA packet cut from a larger send.
	DoffDataSegment uint8 = 0xd0
	// DoffControl is the doff of every packet other than DATA.
	DoffControl uint8 = 0x50
	// FlagsLinux is the flags byte of every Linux packet.
	FlagsLinux uint8 = 6
	// UrgentLinux is the urgent field of every Linux packet.
	UrgentLinux uint16 = 0xb97d
)

// Common is the common header that starts every packet.
type Common struct {
	// SrcPort and DstPort are the Homa ports of the sender and receiver.
	SrcPort, DstPort uint16
	// Sequence is, in DATA, the offset of the first byte of the send the
	// packet was cut from (see Data.Offset); 0 in other types.
	Sequence uint32
	// Type is set by Parse. Append of a typed packet ignores it and writes
	// the packet's own type; Bare.Append writes it.
	Type Type
	// Doff is the TCP-style data offset; 0 on Append means DoffData for
	// DATA and DoffControl otherwise.
	Doff uint8
	// Flags is 0 on Append for FlagsLinux.
	Flags uint8
	// Checksum is not used by Homa; Append writes it as given.
	Checksum uint16
	// Urgent is 0 on Append for UrgentLinux.
	Urgent uint16
	// SenderID is the RPC id as the sender of the packet knows it: even
	// when the client sent the packet, odd when the server did.
	SenderID uint64
}

// markers returns the doff, flags and urgent values Append writes for a
// packet of type t: the fields of c, with zero replaced by the Linux value.
func (c *Common) markers(t Type) (doff, flags uint8, urgent uint16) {
	doff, flags, urgent = c.Doff, c.Flags, c.Urgent
	if doff == 0 {
		doff = DoffControl
		if t == TypeData {
			doff = DoffData
		}
	}
	if flags == 0 {
		flags = FlagsLinux
	}
	if urgent == 0 {
		urgent = UrgentLinux
	}
	return doff, flags, urgent
}

// put encodes c as the header of a packet of type t into h, which holds at
// least CommonLen zero bytes.
func (c *Common) put(h []byte, t Type) {
	doff, flags, urgent := c.markers(t)
	binary.BigEndian.PutUint16(h[offSrcPort:], c.SrcPort)
	binary.BigEndian.PutUint16(h[offDstPort:], c.DstPort)
	binary.BigEndian.PutUint32(h[offSequence:], c.Sequence)
	h[offType] = byte(t)
	h[offDoff] = doff
	h[offFlags] = flags
	binary.BigEndian.PutUint16(h[offChecksum:], c.Checksum)
	binary.BigEndian.PutUint16(h[offUrgent:], urgent)
	binary.BigEndian.PutUint64(h[offSenderID:], c.SenderID)
}

// get decodes c from h, which holds at least CommonLen bytes.
func (c *Common) get(h []byte) {
	c.SrcPort = binary.BigEndian.Uint16(h[offSrcPort:])
	c.DstPort = binary.BigEndian.Uint16(h[offDstPort:])
	c.Sequence = binary.BigEndian.Uint32(h[offSequence:])
	c.Type = Type(h[offType])
	c.Doff = h[offDoff]
	c.Flags = h[offFlags]
	c.Checksum = binary.BigEndian.Uint16(h[offChecksum:])
	c.Urgent = binary.BigEndian.Uint16(h[offUrgent:])
	c.SenderID = binary.BigEndian.Uint64(h[offSenderID:])
}

// PeekType returns the type of the packet in b. It fails with ErrShort if b
// is shorter than the common header and with ErrUnknownType (returning the
// type byte) if the type is not known.
func PeekType(b []byte) (Type, error) {
	if len(b) < CommonLen {
		return 0, ErrShort
	}
	t := Type(b[offType])
	if !t.known() {
		return t, ErrUnknownType
	}
	return t, nil
}

// ParseCommon decodes the common header of the packet in b into c. It checks
// that b holds a common header of a known type (FREEZE included), not that
// it holds the rest of the type's header. On error c is unchanged.
func ParseCommon(b []byte, c *Common) error {
	if _, err := PeekType(b); err != nil {
		return err
	}
	c.get(b)
	return nil
}

// parseHeader checks that b holds a packet of type want with a header of n
// bytes and decodes its common header into c. On error c is unchanged.
func parseHeader(b []byte, c *Common, want Type, n int) error {
	t, err := PeekType(b)
	if err != nil {
		return err
	}
	if t != want {
		return ErrWrongType
	}
	if len(b) < n {
		return ErrShort
	}
	c.get(b)
	return nil
}

// extend appends n zero bytes to b and returns the grown slice and its last
// n bytes. It allocates only when b lacks the capacity.
func extend(b []byte, n int) (grown, tail []byte) {
	b = append(b, make([]byte, n)...)
	return b, b[len(b)-n:]
}

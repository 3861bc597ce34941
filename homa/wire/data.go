package wire

import "encoding/binary"

// DATA layout after the common header (WIRE.md, "Type-specific parts").
const (
	offDataMessageLength = 28
	offDataIncoming      = 32
	offDataAck           = 36 // an AckEntry: client id, then server port
	offDataCutoffVersion = 46
	offDataRetransmit    = 48
	// 49..51: pad, zero.
	offDataSegOffset = 52

	// DataLen is the length of a DATA header; the payload follows it.
	DataLen = 56
)

const (
	// MaxMessageLength is the largest message Homa carries, in bytes.
	MaxMessageLength = 1_000_000
	// OffsetNone in Data.SegOffset means the data offset is the common
	// header's Sequence.
	OffsetNone uint32 = 0xffffffff
)

// Data is a DATA packet: a piece of a request or response message.
type Data struct {
	Common
	// MessageLength is the length of the whole message.
	MessageLength uint32
	// Incoming is the number of initial message bytes the sender will send
	// without further grants.
	Incoming uint32
	// Ack piggybacks the acknowledgment of another RPC (ClientID 0: none).
	Ack AckEntry
	// CutoffVersion is the version of the sender's priority cutoffs for
	// the receiver.
	CutoffVersion uint16
	// Retransmit is nonzero when the packet answers a RESEND.
	Retransmit uint8
	// SegOffset is the message offset of the first payload byte, or
	// OffsetNone to take it from Sequence. Use Offset to read it.
	SegOffset uint32
	// Payload is the message data. Parse points it into the parsed buffer.
	Payload []byte
}

// Offset returns the message offset of the first payload byte: SegOffset,
// or Sequence when SegOffset is OffsetNone.
func (d *Data) Offset() uint32 {
	if d.SegOffset == OffsetNone {
		return d.Sequence
	}
	return d.SegOffset
}

// Append appends the DATA header and then the payload to b.
func (d *Data) Append(b []byte) []byte {
	return append(AppendDataHeader(b, d), d.Payload...)
}

// AppendDataHeader appends the DataLen-byte header of d to b, without the
// payload, so a sender can copy the payload in after it.
func AppendDataHeader(b []byte, d *Data) []byte {
	b, h := extend(b, DataLen)
	d.Common.put(h, TypeData)
	binary.BigEndian.PutUint32(h[offDataMessageLength:], d.MessageLength)
	binary.BigEndian.PutUint32(h[offDataIncoming:], d.Incoming)
	d.Ack.put(h[offDataAck:])
	binary.BigEndian.PutUint16(h[offDataCutoffVersion:], d.CutoffVersion)
	h[offDataRetransmit] = d.Retransmit
	binary.BigEndian.PutUint32(h[offDataSegOffset:], d.SegOffset)
	return b
}

// Len returns the encoded length: DataLen plus the payload length.
func (d *Data) Len() int { return DataLen + len(d.Payload) }

// Parse decodes a DATA packet from b, which must hold the whole packet:
// everything after the header is the payload, which aliases b. It returns
// len(b). On error d is unchanged.
func (d *Data) Parse(b []byte) (int, error) {
	if err := parseHeader(b, &d.Common, TypeData, DataLen); err != nil {
		return 0, err
	}
	d.MessageLength = binary.BigEndian.Uint32(b[offDataMessageLength:])
	d.Incoming = binary.BigEndian.Uint32(b[offDataIncoming:])
	d.Ack.get(b[offDataAck:])
	d.CutoffVersion = binary.BigEndian.Uint16(b[offDataCutoffVersion:])
	d.Retransmit = b[offDataRetransmit]
	d.SegOffset = binary.BigEndian.Uint32(b[offDataSegOffset:])
	d.Payload = b[DataLen:]
	return len(b), nil
}

package wire

import "encoding/binary"

// ACK layout after the common header (WIRE.md, "Type-specific parts").
const (
	offAckNum     = 28
	offAckEntries = 30 // MaxAcks entries of ackEntryLen bytes

	// AckLen is the length of an ACK packet, whatever its NumAcks.
	AckLen = 80
)

// Layout of one acknowledgment, in ACK packets and in DATA headers.
const (
	offEntryClientID   = 0
	offEntryServerPort = 8
	ackEntryLen        = 10
)

// MaxAcks is the number of entries an ACK packet has room for.
const MaxAcks = 5

// AckEntry acknowledges one RPC: the client tells the server it may forget
// the RPC.
type AckEntry struct {
	// ClientID is the RPC id as the client knows it (even); 0 means none.
	ClientID uint64
	// ServerPort is the server port the RPC was sent to.
	ServerPort uint16
}

// put encodes e into h, which holds at least ackEntryLen bytes.
func (e *AckEntry) put(h []byte) {
	binary.BigEndian.PutUint64(h[offEntryClientID:], e.ClientID)
	binary.BigEndian.PutUint16(h[offEntryServerPort:], e.ServerPort)
}

// get decodes e from h, which holds at least ackEntryLen bytes.
func (e *AckEntry) get(h []byte) {
	e.ClientID = binary.BigEndian.Uint64(h[offEntryClientID:])
	e.ServerPort = binary.BigEndian.Uint16(h[offEntryServerPort:])
}

// Ack is an ACK packet: a client acknowledges up to MaxAcks RPCs to a
// server. It is always AckLen bytes on the wire.
type Ack struct {
	Common
	// NumAcks is the number of valid entries. Parse keeps the raw value,
	// which may exceed MaxAcks; use Entries to read the entries.
	NumAcks uint16
	// Acks holds the entries. Append writes all of them as given; entries
	// past NumAcks should be zero.
	Acks [MaxAcks]AckEntry
}

// Entries returns the valid entries: Acks[:min(NumAcks, MaxAcks)].
func (p *Ack) Entries() []AckEntry {
	return p.Acks[:min(int(p.NumAcks), MaxAcks)]
}

// Append appends the encoded packet to b.
func (p *Ack) Append(b []byte) []byte {
	b, h := extend(b, AckLen)
	p.Common.put(h, TypeAck)
	binary.BigEndian.PutUint16(h[offAckNum:], p.NumAcks)
	for i := range p.Acks {
		p.Acks[i].put(h[offAckEntries+ackEntryLen*i:])
	}
	return b
}

// Len returns AckLen.
func (p *Ack) Len() int { return AckLen }

// Parse decodes an ACK from b and returns AckLen; trailing bytes are
// ignored. On error p is unchanged.
func (p *Ack) Parse(b []byte) (int, error) {
	if err := parseHeader(b, &p.Common, TypeAck, AckLen); err != nil {
		return 0, err
	}
	p.NumAcks = binary.BigEndian.Uint16(b[offAckNum:])
	for i := range p.Acks {
		p.Acks[i].get(b[offAckEntries+ackEntryLen*i:])
	}
	return AckLen, nil
}

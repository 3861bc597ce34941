package wire

import "encoding/binary"

// CUTOFFS layout after the common header (WIRE.md, "Type-specific parts").
const (
	offCutoffsValues  = 28 // NumPriorities big-endian uint32s
	offCutoffsVersion = 60

	// CutoffsLen is the length of a CUTOFFS packet.
	CutoffsLen = 62
)

// NumPriorities is the number of network priorities, 0 (lowest) to 7.
const NumPriorities = 8

// Cutoffs is a CUTOFFS packet: the receiver tells a sender which priorities
// to use for unscheduled data.
type Cutoffs struct {
	Common
	// Cutoffs holds, per priority, the largest message length that may use
	// it: an unscheduled message of length n goes at the largest priority
	// i with Cutoffs[i] >= n.
	Cutoffs [NumPriorities]uint32
	// Version identifies this set of cutoffs; the sender echoes it in the
	// CutoffVersion of its DATA packets.
	Version uint16
}

// Append appends the encoded packet to b.
func (p *Cutoffs) Append(b []byte) []byte {
	b, h := extend(b, CutoffsLen)
	p.Common.put(h, TypeCutoffs)
	for i, c := range p.Cutoffs {
		binary.BigEndian.PutUint32(h[offCutoffsValues+4*i:], c)
	}
	binary.BigEndian.PutUint16(h[offCutoffsVersion:], p.Version)
	return b
}

// Len returns CutoffsLen.
func (p *Cutoffs) Len() int { return CutoffsLen }

// Parse decodes a CUTOFFS from b and returns CutoffsLen; trailing bytes are
// ignored. On error p is unchanged.
func (p *Cutoffs) Parse(b []byte) (int, error) {
	if err := parseHeader(b, &p.Common, TypeCutoffs, CutoffsLen); err != nil {
		return 0, err
	}
	for i := range p.Cutoffs {
		p.Cutoffs[i] = binary.BigEndian.Uint32(b[offCutoffsValues+4*i:])
	}
	p.Version = binary.BigEndian.Uint16(b[offCutoffsVersion:])
	return CutoffsLen, nil
}

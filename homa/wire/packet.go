package wire

import (
	"fmt"
	"strings"
)

// Packet holds a packet of any type, for tools and tests. Type says which
// field is in use; header-only types (RPC_UNKNOWN, BUSY, NEED_ACK, FREEZE)
// use Common.
type Packet struct {
	Type    Type
	Common  Common
	Data    Data
	Grant   Grant
	Resend  Resend
	Cutoffs Cutoffs
	Ack     Ack
}

// Parse decodes the packet in b into p, clearing the fields of other types.
// A DATA payload aliases b. On error the contents of p are unspecified.
func (p *Packet) Parse(b []byte) error {
	t, err := PeekType(b)
	if err != nil {
		return err
	}
	*p = Packet{Type: t}
	switch t {
	case TypeData:
		_, err = p.Data.Parse(b)
	case TypeGrant:
		_, err = p.Grant.Parse(b)
	case TypeResend:
		_, err = p.Resend.Parse(b)
	case TypeCutoffs:
		_, err = p.Cutoffs.Parse(b)
	case TypeAck:
		_, err = p.Ack.Parse(b)
	default:
		_, err = parseBare(b, &p.Common)
	}
	return err
}

// Append appends the packet of type p.Type to b. It panics if p.Type is not
// a known type.
func (p *Packet) Append(b []byte) []byte {
	switch p.Type {
	case TypeData:
		return p.Data.Append(b)
	case TypeGrant:
		return p.Grant.Append(b)
	case TypeResend:
		return p.Resend.Append(b)
	case TypeCutoffs:
		return p.Cutoffs.Append(b)
	case TypeAck:
		return p.Ack.Append(b)
	}
	return appendBare(b, &p.Common, p.Type)
}

// Len returns the encoded length of the packet of type p.Type.
func (p *Packet) Len() int {
	switch p.Type {
	case TypeData:
		return p.Data.Len()
	case TypeGrant:
		return GrantLen
	case TypeResend:
		return ResendLen
	case TypeCutoffs:
		return CutoffsLen
	case TypeAck:
		return AckLen
	}
	return CommonLen
}

// header returns the common header of the packet of type p.Type.
func (p *Packet) header() *Common {
	switch p.Type {
	case TypeData:
		return &p.Data.Common
	case TypeGrant:
		return &p.Grant.Common
	case TypeResend:
		return &p.Resend.Common
	case TypeCutoffs:
		return &p.Cutoffs.Common
	case TypeAck:
		return &p.Ack.Common
	}
	return &p.Common
}

// String formats the packet on one line, as the capture logs do:
//
//	GRANT 40000->500 id=2000 offset=50000 priority=3 [homa_len=33 doff=0x50 flags=6 urg=0xb97d csum=0x0000]
//
// Doff, flags and urgent are shown as Append would write them.
func (p *Packet) String() string {
	c := p.header()
	var s strings.Builder
	fmt.Fprintf(&s, "%v %d->%d id=%d ", p.Type, c.SrcPort, c.DstPort, c.SenderID)
	switch p.Type {
	case TypeData:
		d := &p.Data
		segOff := fmt.Sprint(d.SegOffset)
		if d.SegOffset == OffsetNone {
			segOff = "NONE(-1)"
		}
		fmt.Fprintf(&s, "off=%d seq=%d seg_off=%s paylen=%d msg_len=%d incoming=%d ack=(%d,%d) cutoff_ver=%d rexmit=%d ",
			d.Offset(), d.Sequence, segOff, len(d.Payload), d.MessageLength, d.Incoming,
			d.Ack.ClientID, d.Ack.ServerPort, d.CutoffVersion, d.Retransmit)
	case TypeGrant:
		fmt.Fprintf(&s, "offset=%d priority=%d ", p.Grant.Offset, p.Grant.Priority)
	case TypeResend:
		length := fmt.Sprint(p.Resend.Length)
		if p.Resend.Length == ResendToEnd {
			length = "-1"
		}
		fmt.Fprintf(&s, "offset=%d length=%s priority=%d ", p.Resend.Offset, length, p.Resend.Priority)
	case TypeCutoffs:
		s.WriteString("cutoffs=[")
		for i, v := range p.Cutoffs.Cutoffs {
			if i > 0 {
				s.WriteString(", ")
			}
			fmt.Fprint(&s, v)
		}
		fmt.Fprintf(&s, "] version=%d ", p.Cutoffs.Version)
	case TypeAck:
		fmt.Fprintf(&s, "num_acks=%d acks=[", p.Ack.NumAcks)
		for i, e := range p.Ack.Entries() {
			if i > 0 {
				s.WriteString(", ")
			}
			fmt.Fprintf(&s, "(%d, %d)", e.ClientID, e.ServerPort)
		}
		s.WriteString("] ")
	}
	doff, flags, urgent := c.markers(p.Type)
	fmt.Fprintf(&s, "[homa_len=%d doff=0x%02x flags=%d urg=0x%04x csum=0x%04x]", p.Len(), doff, flags, urgent, c.Checksum)
	return s.String()
}

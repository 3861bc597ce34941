package wire

import (
	"bytes"
	"reflect"
	"testing"

	"pgregory.net/rapid"
)

// drawCommon draws a common header of type typ. Doff, Flags and Urgent are
// nonzero, since zero stands for the Linux value (see TestRapidDefaults).
func drawCommon(t *rapid.T, typ Type) Common {
	return Common{
		SrcPort:  rapid.Uint16().Draw(t, "src"),
		DstPort:  rapid.Uint16().Draw(t, "dst"),
		Sequence: rapid.Uint32().Draw(t, "sequence"),
		Type:     typ,
		Doff:     rapid.Uint8Min(1).Draw(t, "doff"),
		Flags:    rapid.Uint8Min(1).Draw(t, "flags"),
		Checksum: rapid.Uint16().Draw(t, "checksum"),
		Urgent:   rapid.Uint16Min(1).Draw(t, "urgent"),
		SenderID: rapid.Uint64().Draw(t, "id"),
	}
}

func drawAckEntry(t *rapid.T) AckEntry {
	return AckEntry{ClientID: rapid.Uint64().Draw(t, "client"), ServerPort: rapid.Uint16().Draw(t, "port")}
}

func drawData(t *rapid.T) *Data {
	return &Data{
		Common:        drawCommon(t, TypeData),
		MessageLength: rapid.Uint32().Draw(t, "length"),
		Incoming:      rapid.Uint32().Draw(t, "incoming"),
		Ack:           drawAckEntry(t),
		CutoffVersion: rapid.Uint16().Draw(t, "version"),
		Retransmit:    rapid.Uint8().Draw(t, "retransmit"),
		SegOffset:     rapid.SampledFrom([]uint32{OffsetNone, rapid.Uint32().Draw(t, "offset")}).Draw(t, "seg"),
		Payload:       append([]byte{}, rapid.SliceOfN(rapid.Byte(), 0, 100).Draw(t, "payload")...),
	}
}

func drawGrant(t *rapid.T) *Grant {
	return &Grant{Common: drawCommon(t, TypeGrant), Offset: rapid.Uint32().Draw(t, "offset"), Priority: rapid.Uint8().Draw(t, "priority")}
}

func drawResend(t *rapid.T) *Resend {
	return &Resend{
		Common:   drawCommon(t, TypeResend),
		Offset:   rapid.Uint32().Draw(t, "offset"),
		Length:   rapid.SampledFrom([]uint32{ResendToEnd, rapid.Uint32().Draw(t, "length")}).Draw(t, "len"),
		Priority: rapid.Uint8().Draw(t, "priority"),
	}
}

func drawCutoffs(t *rapid.T) *Cutoffs {
	p := &Cutoffs{Common: drawCommon(t, TypeCutoffs), Version: rapid.Uint16().Draw(t, "version")}
	for i := range p.Cutoffs {
		p.Cutoffs[i] = rapid.Uint32().Draw(t, "cutoff")
	}
	return p
}

func drawAck(t *rapid.T) *Ack {
	p := &Ack{Common: drawCommon(t, TypeAck), NumAcks: rapid.Uint16().Draw(t, "num")}
	for i := range p.Acks {
		p.Acks[i] = drawAckEntry(t)
	}
	return p
}

var bareTypes = []Type{TypeRPCUnknown, TypeBusy, TypeNeedAck, TypeFreeze}

func drawBare(t *rapid.T) *Bare {
	return &Bare{drawCommon(t, rapid.SampledFrom(bareTypes).Draw(t, "type"))}
}

// roundTrip checks Len, Append after a prefix, and Parse(Append(p)) == p.
func roundTrip[T any, P interface {
	*T
	codec
}](t *rapid.T, p P) {
	b := p.Append(nil)
	if len(b) != p.Len() {
		t.Fatalf("Len %d, Append wrote %d bytes", p.Len(), len(b))
	}
	prefix := rapid.SliceOfN(rapid.Byte(), 0, 8).Draw(t, "prefix")
	if got := p.Append(bytes.Clone(prefix)); !bytes.Equal(got, append(prefix, b...)) {
		t.Fatalf("Append after %x:\n got %x\nwant %x", prefix, got, b)
	}
	q := P(new(T))
	n, err := q.Parse(b)
	if err != nil || n != len(b) {
		t.Fatalf("Parse = %d, %v; want %d, nil", n, err, len(b))
	}
	if !reflect.DeepEqual(q, p) {
		t.Fatalf("Parse(Append(p)):\n got %+v\nwant %+v", q, p)
	}
}

func TestRapidData(t *testing.T)   { rapid.Check(t, func(t *rapid.T) { roundTrip(t, drawData(t)) }) }
func TestRapidGrant(t *testing.T)  { rapid.Check(t, func(t *rapid.T) { roundTrip(t, drawGrant(t)) }) }
func TestRapidResend(t *testing.T) { rapid.Check(t, func(t *rapid.T) { roundTrip(t, drawResend(t)) }) }
func TestRapidCutoffs(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) { roundTrip(t, drawCutoffs(t)) })
}
func TestRapidAck(t *testing.T)  { rapid.Check(t, func(t *rapid.T) { roundTrip(t, drawAck(t)) }) }
func TestRapidBare(t *testing.T) { rapid.Check(t, func(t *rapid.T) { roundTrip(t, drawBare(t)) }) }

// drawPacket draws a packet of any type.
func drawPacket(t *rapid.T) *Packet {
	var p Packet
	switch p.Type = rapid.SampledFrom(append([]Type{TypeData, TypeGrant, TypeResend, TypeCutoffs, TypeAck}, bareTypes...)).Draw(t, "type"); p.Type {
	case TypeData:
		p.Data = *drawData(t)
	case TypeGrant:
		p.Grant = *drawGrant(t)
	case TypeResend:
		p.Resend = *drawResend(t)
	case TypeCutoffs:
		p.Cutoffs = *drawCutoffs(t)
	case TypeAck:
		p.Ack = *drawAck(t)
	default:
		p.Common = drawCommon(t, p.Type)
	}
	return &p
}

// TestRapidPacket round-trips the union type.
func TestRapidPacket(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := drawPacket(t)
		b := p.Append(nil)
		if len(b) != p.Len() {
			t.Fatalf("Len %d, Append wrote %d bytes", p.Len(), len(b))
		}
		var q Packet
		if err := q.Parse(b); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(&q, p) {
			t.Fatalf("Parse(Append(p)):\n got %+v\nwant %+v", q, *p)
		}
		if q.String() != p.String() {
			t.Fatalf("String differs after a round trip: %s vs %s", q.String(), p.String())
		}
	})
}

// TestRapidDefaults checks that zero Doff, Flags and Urgent come back as the
// Linux values and that nothing else changes.
func TestRapidDefaults(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := drawPacket(t)
		c := p.header()
		c.Doff, c.Flags, c.Urgent = 0, 0, 0
		var q Packet
		if err := q.Parse(p.Append(nil)); err != nil {
			t.Fatal(err)
		}
		c.Doff, c.Urgent, c.Flags = DoffControl, UrgentLinux, FlagsLinux
		if p.Type == TypeData {
			c.Doff = DoffData
		}
		if !reflect.DeepEqual(&q, p) {
			t.Fatalf("zero markers:\n got %+v\nwant %+v", q, *p)
		}
	})
}

// TestRapidParseArbitrary feeds random bytes with a plausible type byte to
// the same checks as FuzzParse.
func TestRapidParseArbitrary(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		b := rapid.SliceOfN(rapid.Byte(), 0, 120).Draw(rt, "packet")
		if len(b) > offType {
			b[offType] = rapid.ByteRange(0x0f, 0x19).Draw(rt, "type")
		}
		checkParse(rt, b)
	})
}

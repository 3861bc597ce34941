package wire

import (
	"errors"
	"reflect"
	"testing"
)

// parsers returns a fresh value of every packet type.
func parsers() []codec {
	return []codec{new(Data), new(Grant), new(Resend), new(Cutoffs), new(Ack), new(Bare)}
}

// TestTruncation checks that every cut of every vector short of its header
// fails with ErrShort, in the typed parser of its type, in Packet.Parse and
// (below the common header) in every parser.
func TestTruncation(t *testing.T) {
	for _, v := range vectors() {
		b := unhex(t, v.hex)
		hdr := len(b)
		if v.want.Type == TypeData {
			hdr = DataLen
		}
		for n := range hdr {
			var p Packet
			if err := p.Parse(b[:n]); !errors.Is(err, ErrShort) {
				t.Errorf("%s cut to %d bytes: Packet.Parse error %v, want ErrShort", v.name, n, err)
			}
			for _, c := range parsers() {
				if n >= CommonLen && !accepts(c, v.want.Type) {
					continue // ErrWrongType, see TestWrongType
				}
				if _, err := c.Parse(b[:n]); !errors.Is(err, ErrShort) {
					t.Errorf("%s cut to %d bytes: %T.Parse error %v, want ErrShort", v.name, n, c, err)
				}
			}
		}
		if v.want.Type == TypeData {
			// Shorter payloads are still valid DATA packets.
			var d Data
			if n, err := d.Parse(b[:DataLen]); err != nil || n != DataLen || len(d.Payload) != 0 {
				t.Errorf("%s without payload: %d, %v, payload %d bytes", v.name, n, err, len(d.Payload))
			}
		}
	}
}

// TestTrailingBytes checks that fixed-size packets parse from a padded
// frame and consume only their header.
func TestTrailingBytes(t *testing.T) {
	for _, v := range vectors() {
		if v.want.Type == TypeData {
			continue
		}
		b := unhex(t, v.hex)
		padded := append(b, make([]byte, 18)...)
		var p Packet
		if err := p.Parse(padded); err != nil {
			t.Errorf("%s padded: %v", v.name, err)
			continue
		}
		for _, c := range parsers() {
			if !accepts(c, v.want.Type) {
				continue
			}
			if n, err := c.Parse(padded); err != nil || n != len(b) {
				t.Errorf("%s padded: %T.Parse = %d, %v; want %d, nil", v.name, c, n, err, len(b))
			}
		}
	}
}

func TestUnknownType(t *testing.T) {
	b := unhex(t, vectors()[0].hex)
	for typ := range 256 {
		if Type(typ).known() {
			continue
		}
		b[offType] = byte(typ)
		var p Packet
		if err := p.Parse(b); !errors.Is(err, ErrUnknownType) {
			t.Errorf("type %#x: Packet.Parse error %v", typ, err)
		}
		if got, err := PeekType(b); !errors.Is(err, ErrUnknownType) || got != Type(typ) {
			t.Errorf("type %#x: PeekType = %v, %v", typ, got, err)
		}
		var c Common
		if err := ParseCommon(b, &c); !errors.Is(err, ErrUnknownType) {
			t.Errorf("type %#x: ParseCommon error %v", typ, err)
		}
		for _, c := range parsers() {
			if _, err := c.Parse(b); !errors.Is(err, ErrUnknownType) {
				t.Errorf("type %#x: %T.Parse error %v", typ, c, err)
			}
		}
	}
}

// TestWrongType checks that a typed parser refuses another type's packet
// and leaves its value unchanged.
func TestWrongType(t *testing.T) {
	for _, v := range vectors() {
		b := unhex(t, v.hex)
		for i, c := range parsers() {
			if accepts(c, v.want.Type) {
				continue
			}
			if _, err := c.Parse(b); !errors.Is(err, ErrWrongType) {
				t.Errorf("%s into %T: error %v, want ErrWrongType", v.name, c, err)
			}
			if !reflect.DeepEqual(c, parsers()[i]) {
				t.Errorf("%s into %T: value changed on error", v.name, c)
			}
		}
	}
}

// accepts reports whether parser c takes packets of type typ.
func accepts(c codec, typ Type) bool {
	return reflect.TypeOf(c) == reflect.TypeOf(typed(&Packet{Type: typ}))
}

func TestParseCommon(t *testing.T) {
	v := vectors()[3] // GRANT
	b := unhex(t, v.hex)
	var c Common
	if err := ParseCommon(b[:CommonLen], &c); err != nil {
		t.Fatal(err)
	}
	if c != v.want.Grant.Common {
		t.Errorf("ParseCommon:\n got %+v\nwant %+v", c, v.want.Grant.Common)
	}
	if err := ParseCommon(b[:CommonLen-1], &c); !errors.Is(err, ErrShort) {
		t.Errorf("short: %v", err)
	}
	if typ, err := PeekType(b); typ != TypeGrant || err != nil {
		t.Errorf("PeekType = %v, %v", typ, err)
	}
}

func TestErrorStrings(t *testing.T) {
	for _, e := range []Error{ErrShort, ErrUnknownType, ErrWrongType, 0} {
		if e.Error() == "" {
			t.Errorf("Error(%d) has no message", e)
		}
	}
	if ErrShort.Error() == ErrUnknownType.Error() {
		t.Error("errors share a message")
	}
}

func TestAppendPanicsOnBadType(t *testing.T) {
	for _, typ := range []Type{0, TypeData, TypeAck, 0x42} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Bare.Append of type %v did not panic", typ)
				}
			}()
			(&Bare{Common{Type: typ}}).Append(nil)
		}()
	}
}

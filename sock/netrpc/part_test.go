package netrpc

import (
	"bytes"
	"errors"
	"testing"
)

func TestPartFrame(t *testing.T) {
	data := bytes.Repeat([]byte{0xab}, minPartData)
	p := part{kind: kindRequestPart, total: 0x01020304, offset: 0x00050607, id: 0x0102030405060708, data: data}
	b := appendPart(nil, p)
	want := []byte{1, 3, 0, 0, 1, 2, 3, 4, 0, 5, 6, 7, 1, 2, 3, 4, 5, 6, 7, 8}
	if !bytes.Equal(b[:partHeaderLen], want) || !bytes.Equal(b[partHeaderLen:], data) {
		t.Fatalf("part header = %x, want %x", b[:partHeaderLen], want)
	}
	if len(b) != partLen(len(data)) {
		t.Errorf("partLen(%d) = %d, appended %d", len(data), partLen(len(data)), len(b))
	}
	got, err := parsePart(b, kindRequestPart)
	if err != nil || got.total != p.total || got.offset != p.offset || got.id != p.id || !bytes.Equal(got.data, data) {
		t.Fatalf("parsePart = %+v, %v", got, err)
	}
	for n := range partHeaderLen {
		if _, err := parsePart(b[:n], kindRequestPart); !errors.Is(err, errMalformed) {
			t.Errorf("part cut to %d bytes: %v, want errMalformed", n, err)
		}
	}
	if _, err := parsePart(append([]byte{1, 3, 0, 1}, b[4:]...), kindRequestPart); !errors.Is(err, errMalformed) {
		t.Errorf("part with a reserved byte set: %v, want errMalformed", err)
	}
	if _, err := parsePart(b, kindReplyPart); !errors.Is(err, errMalformed) {
		t.Errorf("part of another kind: %v, want errMalformed", err)
	}
	pull := appendPart(nil, part{kind: kindReplyPull, total: 3 << 20, offset: partData, id: 9})
	if got, err := parsePart(pull, kindReplyPull); err != nil || got.offset != partData || len(got.data) != 0 {
		t.Errorf("pull: %+v, %v", got, err)
	}
	for _, bad := range []part{
		{kind: kindRequestPart, total: 0, data: []byte{1}},                          // empty message
		{kind: kindRequestPart, total: 10, offset: 10, data: []byte{1}},             // offset at the end
		{kind: kindRequestPart, total: 100, offset: 0, data: nil},                   // no bytes
		{kind: kindRequestPart, total: 5, offset: 0, data: make([]byte, 6)},         // past the end
		{kind: kindRequestPart, total: 3 << 20, offset: 0, data: make([]byte, 100)}, // short, not last
		{kind: kindReplyPull, total: 3 << 20, offset: 0, data: []byte{1}},           // a pull with bytes
		{kind: kindPartAck, total: 3 << 20, offset: 3 << 20},                        // ack past the end
	} {
		if _, err := parsePart(appendPart(nil, bad), bad.kind); !errors.Is(err, errMalformed) {
			t.Errorf("part %+v (%d bytes): %v, want errMalformed", bad, len(bad.data), err)
		}
	}
	// A short part that ends the message is fine.
	if _, err := parsePart(appendPart(nil, part{kind: kindRequestPart, total: 3 << 20, offset: 3<<20 - 5, data: make([]byte, 5)}), kindRequestPart); err != nil {
		t.Errorf("short last part: %v", err)
	}
}

// FuzzPart: what parsePart accepts encodes back to the same bytes.
func FuzzPart(f *testing.F) {
	f.Add(appendPart(nil, part{kind: kindRequestPart, total: 70000, offset: 0, id: 1, data: make([]byte, 70000)}))
	f.Add(appendPart(nil, part{kind: kindReplyPull, total: 3 << 20, offset: partData, id: 2}))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, kind := range []byte{kindRequestPart, kindPartAck, kindReplyPart, kindReplyPull} {
			p, err := parsePart(b, kind)
			if err != nil {
				continue
			}
			if p.offset+len(p.data) > p.total {
				t.Fatalf("parsed part of %d bytes at %d of %d", len(p.data), p.offset, p.total)
			}
			if out := appendPart(nil, p); !bytes.Equal(out, b) {
				t.Fatalf("re-encoded %x, parsed from %x", out, b)
			}
		}
	})
}

package netrpc

import (
	"bytes"
	"encoding/gob"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
)

type point struct{ X, Y int }

type shape struct {
	Name   string
	Points []point
	Tags   map[string]int
	Next   *shape
}

type boxed struct{ V any }

type inner struct{ W any }

func init() {
	gob.Register(point{})
	gob.Register(shape{})
	gob.Register(inner{})
	gob.Register("")
}

// encodeMsg encodes v with e into a fresh message.
func encodeMsg(t *testing.T, e *encoders, v any) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := e.encode(&buf, v); err != nil {
		t.Fatalf("encode %#v: %v", v, err)
	}
	return buf.Bytes()
}

// Every body is a gob stream of its own, readable by a fresh decoder,
// and by the kept decoders in any order, whatever the kept encoders
// have sent before.
func TestBodiesStandAlone(t *testing.T) {
	values := []any{
		&point{1, 2},
		&shape{Name: "tri", Points: []point{{0, 0}, {1, 0}, {0, 1}}, Tags: map[string]int{"a": 1}},
		42,
		"text",
		[]byte{1, 2, 3},
		&shape{Name: "nested", Next: &shape{Name: "leaf"}},
		&boxed{V: point{3, 4}},
		&boxed{V: "str"},
		&boxed{V: inner{W: shape{Name: "deep"}}},
		&boxed{V: inner{W: point{5, 6}}},
	}
	var e encoders
	var msgs [][]byte
	var want []any
	for range 3 {
		for _, v := range values {
			msgs = append(msgs, encodeMsg(t, &e, v))
			want = append(want, v)
		}
	}
	var kept decoders
	// Backwards, so the kept decoders meet later messages first.
	for i := len(msgs) - 1; i >= 0; i-- {
		for name, dec := range map[string]func([]byte, any) error{
			"fresh": func(b []byte, v any) error { return gob.NewDecoder(bytes.NewReader(b)).Decode(v) },
			"kept":  kept.decode,
		} {
			got := reflect.New(reflect.TypeOf(want[i]))
			if err := dec(msgs[i], got.Interface()); err != nil {
				t.Fatalf("%s decoder, message %d (%#v): %v", name, i, want[i], err)
			}
			if !reflect.DeepEqual(got.Elem().Interface(), want[i]) {
				t.Errorf("%s decoder, message %d: got %#v, want %#v", name, i, got.Elem().Interface(), want[i])
			}
		}
	}
}

// After the first value of a type, the kept encoder sends only values
// behind the kept descriptions, and the kept decoder reuses itself.
func TestBodiesReuse(t *testing.T) {
	var e encoders
	var d decoders
	first := encodeMsg(t, &e, &point{1, 2})
	p, err := splitGob(first)
	if err != nil || p == 0 {
		t.Fatalf("first message: %d bytes of descriptions, %v", p, err)
	}
	for i := range 5 {
		msg := encodeMsg(t, &e, &point{i, i})
		if !bytes.Equal(msg[:p], first[:p]) {
			t.Fatalf("message %d does not start with the descriptions", i)
		}
		if q, err := splitGob(msg[p:]); err != nil || q != 0 {
			t.Fatalf("message %d describes types again after the prefix (%d bytes, %v)", i, q, err)
		}
		var got point
		if err := d.decode(msg, &got); err != nil || got != (point{i, i}) {
			t.Fatalf("message %d = %v, %v", i, got, err)
		}
	}
	if len(d.all) != 1 {
		t.Errorf("%d kept decoders, want 1", len(d.all))
	}
	// One kept decoder reads the same wire type into other Go types.
	var i64 int64
	msg := encodeMsg(t, &e, 7)
	if err := d.decode(msg, &i64); err != nil || i64 != 7 {
		t.Errorf("int into int64 = %d, %v", i64, err)
	}
	var s string
	if err := d.decode(msg, &s); err == nil {
		t.Errorf("int decoded into a string: %q", s)
	}
	var i8 int8
	if err := d.decode(msg, &i8); err != nil || i8 != 7 {
		t.Errorf("int into int8 after a failure = %d, %v", i8, err)
	}
}

// The kept decoders are bounded: prefixes come from peers.
func TestDecodersBounded(t *testing.T) {
	var e encoders
	var d decoders
	for i := range 2*maxDecoders + 3 {
		typ := reflect.StructOf([]reflect.StructField{{Name: fmt.Sprintf("F%d", i), Type: reflect.TypeFor[int]()}})
		v := reflect.New(typ)
		v.Elem().Field(0).SetInt(int64(i))
		msg := encodeMsg(t, &e, v.Interface())
		got := reflect.New(typ)
		if err := d.decode(msg, got.Interface()); err != nil || got.Elem().Field(0).Int() != int64(i) {
			t.Fatalf("type %d: %v, %v", i, got.Elem().Interface(), err)
		}
		if len(d.all) > maxDecoders {
			t.Fatalf("%d kept decoders, more than %d", len(d.all), maxDecoders)
		}
	}
	// Decoders of long prefixes or after long values are not kept.
	d = decoders{}
	long := reflect.StructOf([]reflect.StructField{{Name: "F" + strings.Repeat("x", maxKeptPrefix), Type: reflect.TypeFor[int]()}})
	if err := d.decode(encodeMsg(t, &e, reflect.New(long).Interface()), reflect.New(long).Interface()); err != nil {
		t.Fatal(err)
	}
	var b []byte
	if err := d.decode(encodeMsg(t, &e, make([]byte, maxKeptValue+1)), &b); err != nil || len(b) != maxKeptValue+1 {
		t.Fatalf("a long value: %d bytes, %v", len(b), err)
	}
	if len(d.all) != 0 {
		t.Errorf("%d decoders kept after a prefix and a value too long to keep", len(d.all))
	}
	if err := d.decode(encodeMsg(t, &e, make([]byte, 10)), &b); err != nil || len(d.all) != 1 {
		t.Errorf("a short value: %v, %d decoders kept, want 1", err, len(d.all))
	}
}

func TestHoldsInterface(t *testing.T) {
	type rec struct {
		Next *rec
		N    int
	}
	type recIface struct {
		Next *recIface
		M    map[string][]any
	}
	for _, tc := range []struct {
		v    any
		want bool
	}{
		{0, false}, {point{}, false}, {&shape{}, false}, {rec{}, false},
		{boxed{}, true}, {&recIface{}, true}, {[]error{}, true}, {map[any]int{}, true},
	} {
		if got := holdsInterface(reflect.TypeOf(tc.v), nil); got != tc.want {
			t.Errorf("holdsInterface(%T) = %v, want %v", tc.v, got, tc.want)
		}
	}
}

func TestSplitGobBad(t *testing.T) {
	good := encodeMsg(t, &encoders{}, &point{1, 2})
	p, _ := splitGob(good)
	for _, bad := range [][]byte{
		nil,
		{0},                // empty message
		{5, 1},             // length beyond the data
		{0xf7, 1},          // a nine-byte count
		{0xfe, 0x01},       // a count cut short
		{1, 0},             // type number 0
		good[:p],           // descriptions without a value
		{2, 0xff, 0xff},    // a type number cut short inside its message
		{0x81, 0x80, 0x00}, // length 128 beyond the data
	} {
		if _, err := splitGob(bad); !errors.Is(err, errGobFraming) {
			t.Errorf("splitGob(%x) = %v, want errGobFraming", bad, err)
		}
	}
}

// FuzzDecode: decoding any bytes never panics, and an error leaves the
// kept decoders working.
func FuzzDecode(f *testing.F) {
	var e encoders
	var buf bytes.Buffer
	for _, v := range []any{&point{1, 2}, &shape{Name: "x", Points: []point{{1, 1}}}, 3} {
		buf.Reset()
		if err := e.encode(&buf, v); err != nil {
			f.Fatal(err)
		}
		f.Add(bytes.Clone(buf.Bytes()))
	}
	good := bytes.Clone(buf.Bytes()) // the int
	f.Fuzz(func(t *testing.T, data []byte) {
		var d decoders
		var s shape
		_ = d.decode(data, &s)
		var n int
		_ = d.decode(data, &n)
		if err := d.decode(good, &n); err != nil || n != 3 {
			t.Fatalf("good message after %x = %d, %v", data, n, err)
		}
	})
}

// The kept decoders serve many goroutines at once.
func TestDecodersConcurrent(t *testing.T) {
	var e encoders
	var d decoders
	msgs := make([][]byte, 50)
	for i := range msgs {
		msgs[i] = encodeMsg(t, &e, &shape{Name: fmt.Sprint(i), Points: []point{{i, i}}})
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for k := range 200 {
				i := (g*7 + k) % len(msgs)
				var s shape
				if err := d.decode(msgs[i], &s); err != nil || s.Name != fmt.Sprint(i) || s.Points[0] != (point{i, i}) {
					t.Errorf("message %d = %+v, %v", i, s, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// A body in pieces decodes as the same body whole, wherever the pieces
// are cut: across the value, decodePieces reads it in place; across the
// type descriptions, it says so (errSplitPrefix) and decodeBody joins
// the pieces first.
func TestDecodePieces(t *testing.T) {
	want := shape{Name: "pieces", Points: []point{{1, 2}, {3, 4}}, Tags: map[string]int{"a": 1}}
	var buf bytes.Buffer
	var e encoders
	if err := e.encode(&buf, &want); err != nil {
		t.Fatal(err)
	}
	body := buf.Bytes()
	prefix, err := splitGob(body)
	if err != nil {
		t.Fatal(err)
	}
	var d decoders
	for cut := 1; cut < len(body); cut++ {
		for _, second := range []int{cut, (cut + len(body)) / 2} {
			pieces := [][]byte{body[cut:second], body[second:]}
			var got shape
			err := d.decodePieces(body[:cut], pieces, &got)
			if cut <= prefix && !errors.Is(err, errSplitPrefix) {
				t.Fatalf("cut at %d, in the descriptions (%d bytes): %v, want errSplitPrefix", cut, prefix, err)
			}
			if errors.Is(err, errSplitPrefix) {
				if cut > prefix+18 { // past the value's length and type number
					t.Fatalf("cut at %d, in the value after %d bytes of descriptions: errSplitPrefix", cut, prefix)
				}
				in := inbound{first: body[:cut], rest: pieces}
				err = in.decodeBody(&d, 0, &got)
			}
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Fatalf("cut at %d and %d: %+v, %v", cut, second, got, err)
			}
		}
	}
	// Bytes after the value, in a later piece, are an error.
	var got shape
	if err := d.decodePieces(body, [][]byte{{0}}, &got); !errors.Is(err, errGobFraming) {
		t.Errorf("a byte after the value in another piece: %v, want errGobFraming", err)
	}
}

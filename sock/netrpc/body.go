package netrpc

import (
	"bytes"
	"encoding/gob"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sync"
)

// Bodies are encoded with encoding/gob, as by net/rpc's own codec, but
// every body is a gob stream of its own: the descriptions of the types
// it uses, then the value. Over a connection net/rpc describes a type
// once, since a byte stream arrives in order; Homa RPCs are independent
// and complete in any order, so no message may depend on another.
//
// Building a gob encoder and decoder for every message would cost more
// than the rest of the call, so both ends keep them:
//
//   - The sender keeps one gob.Encoder per Go type. Its first output is
//     the type descriptions and the value; the descriptions are kept and
//     put before every later value of that type, which the encoder then
//     sends alone. This is exact only when the type's descriptions do not
//     depend on the value, so a type that holds an interface anywhere is
//     encoded by a fresh encoder every time.
//   - The receiver splits each body into its descriptions (the prefix)
//     and the value, and keeps idle gob.Decoders per distinct prefix (up
//     to maxDecoders prefixes) that have read the prefix once: they are
//     fed only the values that follow the same prefix. Equal prefixes
//     mean equal type numbering, so a kept decoder reads the value as a
//     fresh one would. If it fails, the body is decoded again from
//     scratch. Only short prefixes, after short values, are kept
//     (maxKeptPrefix, maxKeptValue), since a decoder keeps a buffer as
//     long as the longest message it read; the long bodies of large
//     messages are decoded by fresh decoders, whose setup is small
//     beside them.
//
// Like net/rpc's codec, gob decodes untrusted input with only basic
// checks of sizes; here a body is never longer than Config.MaxMessage
// (8 MiB by default) at the end that decodes it, which bounds what
// decoding it may allocate (gob grows a slice it decodes in steps of at
// most 10 MB as elements arrive, rather than trusting the count it
// reads).

// errGobFraming marks a body that is not a sequence of gob messages
// ending in a value.
var errGobFraming = errors.New("netrpc: body is not a gob stream")

// encoders keeps one encoder per Go type for one codec.
type encoders struct {
	mu  sync.Mutex
	all map[reflect.Type]*typeEncoder
}

// typeEncoder is the gob encoder of one Go type and the descriptions it
// sent first.
type typeEncoder struct {
	mu      sync.Mutex
	enc     *gob.Encoder
	out     bufferWriter
	primed  bool
	prefix  []byte
	retired bool // stop using it: it is not known to repeat itself exactly
}

// bufferWriter sends an encoder's output to the message being built,
// and notes the type descriptions written before the value. gob writes
// each of its messages (a description or the value) with one Write; a
// write that is not one whole gob message retires the encoder.
type bufferWriter struct {
	to    io.Writer
	desc  []byte // the descriptions written before the value
	value bool   // the value has been written
	bad   bool   // a write was not one gob message
}

func (w *bufferWriter) Write(p []byte) (int, error) {
	if !w.value && !w.bad {
		n, k, ok := gobUint(p)
		u, _, ok2 := gobUint(p[min(k, len(p)):])
		switch {
		case !ok || !ok2 || n != uint64(len(p)-k) || u == 0:
			w.bad = true
		case u&1 == 0: // a non-negative type number: the value
			w.value = true
		default:
			w.desc = append(w.desc, p...)
		}
	}
	return w.to.Write(p)
}

// encode appends body to w as a self-contained gob stream.
func (e *encoders) encode(w io.Writer, body any) error {
	if body == nil {
		return errors.New("netrpc: cannot encode a nil body")
	}
	t := reflect.TypeOf(body)
	e.mu.Lock()
	if e.all == nil {
		e.all = make(map[reflect.Type]*typeEncoder)
	}
	te := e.all[t]
	if te == nil {
		if holdsInterface(t, nil) {
			e.mu.Unlock()
			return gob.NewEncoder(w).Encode(body)
		}
		te = &typeEncoder{}
		te.enc = gob.NewEncoder(&te.out)
		e.all[t] = te
	}
	e.mu.Unlock()

	te.mu.Lock()
	defer te.mu.Unlock()
	if te.retired {
		return gob.NewEncoder(w).Encode(body)
	}
	if te.primed {
		if _, err := w.Write(te.prefix); err != nil {
			return err
		}
	}
	te.out = bufferWriter{to: w, desc: te.out.desc[:0]}
	err := te.enc.Encode(body)
	out := te.out
	te.out.to = nil
	switch {
	case err != nil:
		te.retire(e, t)
		return err
	case out.bad || !out.value:
		te.retire(e, t)
		if out.bad {
			return nil // what it wrote still stands
		}
		return fmt.Errorf("%w: %w: no value", errGobFraming, io.ErrUnexpectedEOF)
	case !te.primed:
		te.prefix = bytes.Clone(out.desc)
		te.primed = true
	case len(out.desc) != 0:
		// The encoder described a type again: it does not repeat
		// itself. What it wrote still stands after the kept prefix.
		te.retire(e, t)
	}
	return nil
}

// retire takes te out of use; te.mu is held.
func (te *typeEncoder) retire(e *encoders, t reflect.Type) {
	te.retired = true
	e.mu.Lock()
	if e.all[t] == te {
		delete(e.all, t)
	}
	e.mu.Unlock()
}

// holdsInterface reports whether a value of type t can hold an interface
// value anywhere, whose type descriptions would then depend on the value.
func holdsInterface(t reflect.Type, seen map[reflect.Type]bool) bool {
	if seen[t] {
		return false
	}
	switch t.Kind() {
	case reflect.Interface:
		return true
	case reflect.Pointer, reflect.Slice, reflect.Array:
		return holdsInterface(t.Elem(), mark(seen, t))
	case reflect.Map:
		seen = mark(seen, t)
		return holdsInterface(t.Key(), seen) || holdsInterface(t.Elem(), seen)
	case reflect.Struct:
		seen = mark(seen, t)
		for i := range t.NumField() {
			if holdsInterface(t.Field(i).Type, seen) {
				return true
			}
		}
	}
	return false
}

func mark(seen map[reflect.Type]bool, t reflect.Type) map[reflect.Type]bool {
	if seen == nil {
		seen = make(map[reflect.Type]bool)
	}
	seen[t] = true
	return seen
}

// maxDecoders bounds the prefixes a codec keeps decoders for. Prefixes
// come from peers, so when a new one would exceed it, all are dropped and
// learned again.
const maxDecoders = 64

// A decoder is kept only for a prefix of at most maxKeptPrefix bytes,
// and only after a value of at most maxKeptValue: a gob.Decoder keeps a
// buffer as long as the longest message it read. So what peers can make
// a codec keep is bounded by these, not by the messages they send.
const (
	maxKeptPrefix = 16 << 10
	maxKeptValue  = 64 << 10
)

// decoders keeps idle gob decoders per prefix. It is safe for concurrent
// use: each decoding takes a decoder of its own.
type decoders struct {
	mu  sync.Mutex
	all map[string]*sync.Pool // prefix -> idle *primedDecoder
}

// primedDecoder is a gob decoder that has read one prefix.
type primedDecoder struct {
	dec *gob.Decoder
	r   pieceReader
}

// errSplitPrefix marks a body whose type descriptions do not fit its
// first piece: join the pieces and decode again.
var errSplitPrefix = errors.New("netrpc: gob type descriptions span two parts of the message")

// decode decodes the self-contained gob stream data into body.
func (d *decoders) decode(data []byte, body any) error {
	return d.decodePieces(data, nil, body)
}

// decodePieces decodes the self-contained gob stream that is first
// followed by rest into body. It returns errSplitPrefix when the
// stream's type descriptions do not fit first.
func (d *decoders) decodePieces(first []byte, rest [][]byte, body any) error {
	total := len(first)
	for _, r := range rest {
		total += len(r)
	}
	p, err := splitGobIn(first, total)
	if err != nil {
		return err
	}
	keep := p <= maxKeptPrefix && total-p <= maxKeptValue
	var pool *sync.Pool
	if keep {
		d.mu.Lock()
		pool = d.all[string(first[:p])]
		d.mu.Unlock()
	}
	if pool != nil {
		if pd, _ := pool.Get().(*primedDecoder); pd != nil {
			pd.r.reset(first[p:], rest)
			err := pd.dec.Decode(body)
			left := pd.r.len()
			pd.r.reset(nil, nil)
			if err == nil && left == 0 {
				pool.Put(pd)
				return nil
			}
			// Drop it: decode again from scratch, with a fresh one.
		}
	}
	pd := &primedDecoder{}
	pd.r.reset(first, rest)
	pd.dec = gob.NewDecoder(&pd.r)
	err = pd.dec.Decode(body)
	left := pd.r.len()
	pd.r.reset(nil, nil)
	if err != nil {
		return err
	}
	if left != 0 {
		return fmt.Errorf("%w: %d bytes after the value", errGobFraming, left)
	}
	if !keep {
		return nil
	}
	if pool == nil {
		d.mu.Lock()
		if pool = d.all[string(first[:p])]; pool == nil {
			if d.all == nil || len(d.all) >= maxDecoders {
				d.all = make(map[string]*sync.Pool)
			}
			pool = new(sync.Pool)
			d.all[string(first[:p])] = pool
		}
		d.mu.Unlock()
	}
	pool.Put(pd)
	return nil
}

// pieceReader reads a message in pieces, as gob.Decoder wants it (an
// io.ByteReader, which it then does not buffer again).
type pieceReader struct {
	cur  []byte
	rest [][]byte
}

func (r *pieceReader) reset(first []byte, rest [][]byte) { r.cur, r.rest = first, rest }

// next moves to the next piece when the current one is spent.
func (r *pieceReader) next() bool {
	for len(r.cur) == 0 {
		if len(r.rest) == 0 {
			return false
		}
		r.cur, r.rest = r.rest[0], r.rest[1:]
	}
	return true
}

func (r *pieceReader) Read(p []byte) (int, error) {
	if !r.next() {
		return 0, io.EOF
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	return n, nil
}

func (r *pieceReader) ReadByte() (byte, error) {
	if !r.next() {
		return 0, io.EOF
	}
	b := r.cur[0]
	r.cur = r.cur[1:]
	return b, nil
}

// len is the number of bytes left.
func (r *pieceReader) len() int {
	n := len(r.cur)
	for _, p := range r.rest {
		n += len(p)
	}
	return n
}

// splitGob returns the length of the type descriptions at the start of
// the gob stream data: the messages before the first value message. Each
// gob message is a length and that many bytes, which begin with a type
// number: negative for a type description, positive for a value.
func splitGob(data []byte) (int, error) { return splitGobIn(data, len(data)) }

// splitGobIn is splitGob of a stream of total bytes that begins with
// data: the descriptions must lie in data, and lengths fit total. It
// returns errSplitPrefix when they do not fit data but might fit total.
func splitGobIn(data []byte, total int) (int, error) {
	off := 0
	for off < len(data) {
		n, w, ok := gobUint(data[off:])
		if !ok || n == 0 || n > uint64(total-off-w) {
			if total > len(data) && len(data)-off < 9 {
				return 0, errSplitPrefix
			}
			return 0, fmt.Errorf("%w: bad message length at byte %d", errGobFraming, off)
		}
		end := off + w + int(n)
		u, _, ok := gobUint(data[off+w : min(end, len(data))])
		if !ok {
			if end > len(data) {
				return 0, errSplitPrefix
			}
			return 0, fmt.Errorf("%w: bad type number at byte %d", errGobFraming, off+w)
		}
		if u&1 == 0 { // a non-negative number: a value
			if u == 0 {
				return 0, fmt.Errorf("%w: type number 0 at byte %d", errGobFraming, off+w)
			}
			return off, nil
		}
		if end > len(data) {
			return 0, errSplitPrefix
		}
		off = end
	}
	if total > len(data) {
		return 0, errSplitPrefix
	}
	return 0, fmt.Errorf("%w: %w: no value", errGobFraming, io.ErrUnexpectedEOF)
}

// gobUint decodes a gob unsigned integer: a byte below 128 is the
// number; otherwise it is minus the count of big-endian bytes that
// follow (1..8).
func gobUint(b []byte) (x uint64, n int, ok bool) {
	if len(b) == 0 {
		return 0, 0, false
	}
	if b[0] < 0x80 {
		return uint64(b[0]), 1, true
	}
	k := -int(int8(b[0]))
	if k > 8 || len(b) < 1+k {
		return 0, 0, false
	}
	for _, c := range b[1 : 1+k] {
		x = x<<8 | uint64(c)
	}
	return x, 1 + k, true
}

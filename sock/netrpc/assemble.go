package netrpc

import (
	"fmt"
	"slices"

	"github.com/homa-go/homa/sock"
)

// assembler puts one large message together from parts that arrive in
// any order. Its memory follows what has arrived, never the total a part
// claims: it keeps the first parts in their Homa messages until half of
// the message has arrived, then gives it one buffer of its whole length
// and copies every part into place, so that it holds at most about twice
// what arrived, and each byte is copied once. Parts must not overlap.
// (The engine's receive path does the same at a quarter: docs/design.md,
// receive storage.)
//
// An assembler is not safe for concurrent use.
type assembler struct {
	total int
	buf   []byte     // the whole message, once half of it has arrived
	held  []heldPart // parts not yet copied into buf, by offset
	got   []span     // the ranges arrived, by offset, adjacent ones merged
	have  int        // bytes arrived
}

// heldPart is a part kept in its Homa message.
type heldPart struct {
	off  int
	data []byte        // aliases m.Data
	m    *sock.Message // released once data is copied
}

// span is the bytes off..end of the message.
type span struct{ off, end int }

// heldCost is what the assembler counts for keeping a part besides its
// buffer: the message and the bookkeeping.
const heldCost = 256

// cost is the memory the assembler holds.
func (a *assembler) cost() int {
	n := cap(a.buf)
	for _, h := range a.held {
		n += cap(h.m.Data) + heldCost
	}
	return n
}

// check reports whether n bytes at off fit the message and overlap
// nothing that has arrived, and what taking them would add to cost.
// c is the capacity of the buffer holding them.
func (a *assembler) check(off, n, c int) (grow int, err error) {
	end := off + n
	if off < 0 || n <= 0 || end > a.total {
		return 0, fmt.Errorf("%w: part of %d bytes at byte %d of a message of %d bytes", errMalformed, n, off, a.total)
	}
	i := a.spanAfter(off)
	if i > 0 && a.got[i-1].end > off || i < len(a.got) && a.got[i].off < end {
		return 0, fmt.Errorf("%w: part at bytes %d..%d repeats or overlaps bytes that arrived before", errMalformed, off, end)
	}
	switch {
	case a.buf != nil:
		return 0, nil
	case a.joins(n):
		return a.total - a.cost(), nil
	}
	return c + heldCost, nil
}

// spanAfter is the index of the first span starting after off.
func (a *assembler) spanAfter(off int) int {
	i, found := slices.BinarySearchFunc(a.got, off, func(s span, off int) int { return s.off - off })
	if found {
		i++
	}
	return i
}

// joins reports whether n more bytes bring half of the message.
func (a *assembler) joins(n int) bool { return 2*(a.have+n) >= a.total }

// add takes the part data at off, which check has accepted; m holds it
// and is released once data is copied.
func (a *assembler) add(off int, data []byte, m *sock.Message) {
	a.note(off, off+len(data))
	join := a.buf == nil && a.joins(len(data))
	a.have += len(data)
	if a.buf == nil && !join {
		i, _ := slices.BinarySearchFunc(a.held, off, func(h heldPart, off int) int { return h.off - off })
		a.held = slices.Insert(a.held, i, heldPart{off: off, data: data, m: m})
		return
	}
	if join {
		a.buf = make([]byte, a.total)
		for i, h := range a.held {
			copy(a.buf[h.off:], h.data)
			h.m.Release()
			a.held[i] = heldPart{}
		}
		a.held = nil
	}
	copy(a.buf[off:], data)
	m.Release()
}

// note records that off..end arrived.
func (a *assembler) note(off, end int) {
	i := a.spanAfter(off)
	switch {
	case i > 0 && a.got[i-1].end == off && i < len(a.got) && a.got[i].off == end:
		a.got[i-1].end = a.got[i].end
		a.got = slices.Delete(a.got, i, i+1)
	case i > 0 && a.got[i-1].end == off:
		a.got[i-1].end = end
	case i < len(a.got) && a.got[i].off == end:
		a.got[i].off = off
	default:
		a.got = slices.Insert(a.got, i, span{off, end})
	}
}

// complete reports whether the whole message has arrived; buf holds it.
func (a *assembler) complete() bool { return a.have == a.total }

// free releases what the assembler holds.
func (a *assembler) free() {
	for _, h := range a.held {
		h.m.Release()
	}
	a.held, a.buf, a.got = nil, nil, nil
}

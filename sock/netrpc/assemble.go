package netrpc

import (
	"fmt"
	"slices"

	"github.com/homa-go/homa/sock"
)

// assembler puts one large message together from parts that arrive in
// any order. Its memory follows what has arrived, never the total a part
// claims: the bytes from the start that have arrived in order are copied
// into buf, which grows with them (to at most twice what it holds, and
// never beyond the total); a part that arrives early is kept in its Homa
// message until the bytes before it are in. Parts must not overlap.
//
// An assembler is not safe for concurrent use.
type assembler struct {
	total int
	buf   []byte     // bytes 0..len(buf) of the message
	held  []heldPart // parts beyond len(buf), by offset, not overlapping
	have  int        // bytes arrived: len(buf) + the held parts'
}

// heldPart is a part that arrived before the bytes ahead of it.
type heldPart struct {
	off  int
	data []byte        // aliases m.Data
	m    *sock.Message // released once data is copied
}

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
	if off < len(a.buf) {
		return 0, fmt.Errorf("%w: part at bytes %d..%d repeats bytes that arrived before", errMalformed, off, end)
	}
	i, _ := slices.BinarySearchFunc(a.held, off, func(h heldPart, off int) int { return h.off - off })
	if i > 0 && a.held[i-1].off+len(a.held[i-1].data) > off || i < len(a.held) && a.held[i].off < end {
		return 0, fmt.Errorf("%w: part at bytes %d..%d overlaps bytes that arrived before", errMalformed, off, end)
	}
	if off > len(a.buf) {
		return c + heldCost, nil
	}
	// It joins buf, and so do the held parts it reaches.
	for _, h := range a.held[i:] {
		if h.off != end {
			break
		}
		end += len(h.data)
		grow -= cap(h.m.Data) + heldCost
	}
	return grow + newCap(cap(a.buf), end, a.total) - cap(a.buf), nil
}

// newCap is the capacity buf gets to hold need bytes.
func newCap(cur, need, total int) int {
	if need <= cur {
		return cur
	}
	return min(total, max(need, 2*cur))
}

// add takes the part data at off, which check has accepted; m holds it
// and is released once data is copied.
func (a *assembler) add(off int, data []byte, m *sock.Message) {
	a.have += len(data)
	if off > len(a.buf) {
		i, _ := slices.BinarySearchFunc(a.held, off, func(h heldPart, off int) int { return h.off - off })
		a.held = slices.Insert(a.held, i, heldPart{off: off, data: data, m: m})
		return
	}
	end := off + len(data)
	k := 0 // the held parts it reaches
	for ; k < len(a.held) && a.held[k].off == end; k++ {
		end += len(a.held[k].data)
	}
	if c := newCap(cap(a.buf), end, a.total); c > cap(a.buf) {
		b := make([]byte, len(a.buf), c)
		copy(b, a.buf)
		a.buf = b
	}
	a.buf = append(a.buf, data...)
	m.Release()
	for i := range k {
		a.buf = append(a.buf, a.held[i].data...)
		a.held[i].m.Release()
		a.held[i] = heldPart{}
	}
	a.held = a.held[k:]
}

// complete reports whether the whole message has arrived.
func (a *assembler) complete() bool { return len(a.buf) == a.total }

// free releases what the assembler holds.
func (a *assembler) free() {
	for _, h := range a.held {
		h.m.Release()
	}
	a.held, a.buf = nil, nil
}

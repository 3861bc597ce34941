package netrpc

import (
	"errors"
	"fmt"
	"slices"

	"github.com/homa-go/homa/sock"
)

// assembler collects the parts of one large message, which arrive in
// any order. It keeps each part in the Homa message that brought it,
// so its memory is what arrived (and never the total a part claims),
// each byte is copied once, by whoever reads the message in the end
// (see inbound), and the buffers go back to the socket's pool. Parts
// must not overlap.
//
// An assembler is not safe for concurrent use.
type assembler struct {
	total int
	parts []heldPart // by offset, not overlapping
	have  int        // bytes arrived
}

// heldPart is a part kept in its Homa message.
type heldPart struct {
	off  int
	data []byte        // aliases m.Data
	m    *sock.Message // released with the assembler
}

// heldCost is what the assembler counts for keeping a part besides its
// buffer: the message and the bookkeeping.
const heldCost = 256

// cost is the memory the assembler holds.
func (a *assembler) cost() int {
	n := 0
	for _, h := range a.parts {
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
	i := a.index(off)
	if i > 0 && a.parts[i-1].off+len(a.parts[i-1].data) > off || i < len(a.parts) && a.parts[i].off < end {
		return 0, fmt.Errorf("%w: part at bytes %d..%d repeats or overlaps bytes that arrived before", errMalformed, off, end)
	}
	return c + heldCost, nil
}

// index is where a part at off goes: after those at or before it.
func (a *assembler) index(off int) int {
	i, found := slices.BinarySearchFunc(a.parts, off, func(h heldPart, off int) int { return h.off - off })
	if found {
		i++
	}
	return i
}

// add keeps the part data at off, which check has accepted, and m,
// which holds it.
func (a *assembler) add(off int, data []byte, m *sock.Message) {
	a.parts = slices.Insert(a.parts, a.index(off), heldPart{off: off, data: data, m: m})
	a.have += len(data)
}

// complete reports whether the whole message has arrived: its parts,
// in order, are the message.
func (a *assembler) complete() bool { return a.have == a.total }

// free releases the parts.
func (a *assembler) free() {
	for i, h := range a.parts {
		h.m.Release()
		a.parts[i] = heldPart{}
	}
	a.parts = nil
}

// inbound is a message to read: one Homa message, or the parts of a
// complete large one. first is its first piece, rest the others.
type inbound struct {
	first []byte
	rest  [][]byte
	m     *sock.Message // a whole message, released by free
	asm   *assembler    // a large one's parts, freed by free
}

// wholeMessage is the inbound message m.
func wholeMessage(m *sock.Message) inbound { return inbound{first: m.Data, m: m} }

// assembled is the inbound message of the complete a.
func assembled(a *assembler) inbound {
	in := inbound{first: a.parts[0].data, asm: a}
	for _, h := range a.parts[1:] {
		in.rest = append(in.rest, h.data)
	}
	return in
}

// join copies the pieces into one buffer, releasing each part as it is
// copied, for a message whose header or gob type descriptions do not fit
// its first part (a sender's odd choice: this package's parts are as
// long as they can be).
func (in *inbound) join() {
	if in.rest == nil {
		return
	}
	n := len(in.first)
	for _, r := range in.rest {
		n += len(r)
	}
	buf := append(make([]byte, 0, n), in.first...)
	if in.asm != nil {
		in.asm.parts[0].m.Release()
	}
	for i, r := range in.rest {
		buf = append(buf, r...)
		if in.asm != nil {
			in.asm.parts[i+1].m.Release()
		}
	}
	if in.asm != nil {
		in.asm.parts = nil
	}
	in.first, in.rest, in.asm = buf, nil, nil
}

// decodeBody decodes the gob stream that follows the first hdr bytes of
// the message into body, joining the pieces first if its type
// descriptions do not fit the first.
func (in *inbound) decodeBody(d *decoders, hdr int, body any) error {
	err := d.decodePieces(in.first[hdr:], in.rest, body)
	if errors.Is(err, errSplitPrefix) {
		in.join()
		err = d.decode(in.first[hdr:], body)
	}
	return err
}

// free releases what holds the message.
func (in *inbound) free() {
	if in.m != nil {
		in.m.Release()
	}
	if in.asm != nil {
		in.asm.free()
	}
	*in = inbound{}
}

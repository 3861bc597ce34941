package pacer

// order says which key a heap sorts by; it also indexes entry.pos.
type order uint8

const (
	bySRPT order = iota // fewest bytes left first, then oldest, then smallest ID
	byAge               // oldest first, then smallest ID
)

// heap is a binary min-heap of entry numbers. Each entry records its
// position in the heap, so any entry can be fixed or removed in O(log n).
type heap struct {
	s   []int32
	ord order
}

// less reports whether entry a goes before entry b.
func (h *heap) less(es []entry, a, b int32) bool {
	x, y := &es[a], &es[b]
	if h.ord == bySRPT && x.remaining != y.remaining {
		return x.remaining < y.remaining
	}
	if x.seq != y.seq {
		return x.seq < y.seq
	}
	return x.id < y.id
}

// set puts entry e at position i.
func (h *heap) set(es []entry, i int, e int32) {
	h.s[i] = e
	es[e].pos[h.ord] = int32(i)
}

// push adds entry e.
func (h *heap) push(es []entry, e int32) {
	h.s = append(h.s, e)
	h.up(es, len(h.s)-1)
}

// remove takes entry e out.
func (h *heap) remove(es []entry, e int32) {
	i, last := int(es[e].pos[h.ord]), len(h.s)-1
	if i != last {
		h.set(es, i, h.s[last])
	}
	h.s = h.s[:last]
	if i != last {
		h.fixAt(es, i)
	}
}

// fix restores the order after entry e's key changed.
func (h *heap) fix(es []entry, e int32) {
	h.fixAt(es, int(es[e].pos[h.ord]))
}

// fixAt restores the order after the key at position i changed.
func (h *heap) fixAt(es []entry, i int) {
	if !h.down(es, i) {
		h.up(es, i)
	}
}

// up moves the entry at position i towards the root while it goes
// before its parent.
func (h *heap) up(es []entry, i int) {
	e := h.s[i]
	for i > 0 {
		parent := (i - 1) / 2
		if !h.less(es, e, h.s[parent]) {
			break
		}
		h.set(es, i, h.s[parent])
		i = parent
	}
	h.set(es, i, e)
}

// down moves the entry at position i towards the leaves while a child
// goes before it, and reports whether it moved.
func (h *heap) down(es []entry, i int) bool {
	e, start, n := h.s[i], i, len(h.s)
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if c+1 < n && h.less(es, h.s[c+1], h.s[c]) {
			c++
		}
		if !h.less(es, h.s[c], e) {
			break
		}
		h.set(es, i, h.s[c])
		i = c
	}
	h.set(es, i, e)
	return i > start
}

package pacer

import "math/bits"

// index maps message IDs to entry numbers: an open-addressing hash table
// with linear probing and backward-shift deletion, so it needs no
// tombstones and, once grown to the most messages queued at once, never
// allocates again (a Go map may, as deleted keys pile up).
type index struct {
	slots []int32 // entry number + 1; 0 is empty
	shift uint    // 64 - log2(len(slots))
	n     int     // occupied slots
}

// init makes an empty table of size slots, a power of two.
func (x *index) init(size int) {
	x.slots = make([]int32, size)
	x.shift = 64 - uint(bits.TrailingZeros(uint(size)))
	x.n = 0
}

// home returns the slot where the probe for id starts (Fibonacci hashing).
func (x *index) home(id ID) int {
	return int((uint64(id) * 0x9e3779b97f4a7c15) >> x.shift)
}

// find returns the slot holding id and its entry number, or the empty
// slot where id would go and -1.
func (x *index) find(id ID, es []entry) (slot int, e int32) {
	mask := len(x.slots) - 1
	for i := x.home(id); ; i = (i + 1) & mask {
		s := x.slots[i]
		if s == 0 {
			return i, -1
		}
		if es[s-1].id == id {
			return i, s - 1
		}
	}
}

// insert adds id, not present, as entry e, growing the table to keep it
// at most half full.
func (x *index) insert(id ID, e int32, es []entry) {
	if 2*(x.n+1) > len(x.slots) {
		old := x.slots
		x.init(2 * len(old))
		for _, s := range old {
			if s != 0 {
				i, _ := x.find(es[s-1].id, es)
				x.slots[i] = s
				x.n++
			}
		}
	}
	i, _ := x.find(id, es)
	x.slots[i] = e + 1
	x.n++
}

// remove empties the slot at, found by find, and shifts back the entries
// after it that probed past it, so that no probe stops short.
func (x *index) remove(at int, es []entry) {
	mask := len(x.slots) - 1
	hole := at
	for j := (at + 1) & mask; x.slots[j] != 0; j = (j + 1) & mask {
		// The entry at j may fill the hole if the hole lies between its
		// home and j, going round the table.
		if h := x.home(es[x.slots[j]-1].id); (j-h)&mask >= (j-hole)&mask {
			x.slots[hole] = x.slots[j]
			hole = j
		}
	}
	x.slots[hole] = 0
	x.n--
}

package ack

import (
	"math"
	"testing"

	"pgregory.net/rapid"
)

func TestSeenBasics(t *testing.T) {
	s := NewSeen(3) // rounds up to 64 ids
	if s.Cap() != 64 || s.Len() != 0 || s.Floor() != 0 {
		t.Fatalf("new Seen: cap %d len %d floor %d", s.Cap(), s.Len(), s.Floor())
	}
	if !s.Done(0) || s.Done(2) {
		t.Fatal("a new Seen must refuse only id 0")
	}
	// Out of order, as concurrent RPCs finish.
	for _, id := range []uint64{10, 4, 8} {
		s.Finish(id)
	}
	for id, want := range map[uint64]bool{2: false, 4: true, 6: false, 8: true, 10: true, 12: false} {
		if s.Done(id) != want {
			t.Errorf("Done(%d) = %v, want %v", id, !want, want)
		}
	}
	s.Finish(8) // already done: no change
	if s.Len() != 3 || s.Floor() != 0 {
		t.Fatalf("after a repeated Finish: len %d floor %d", s.Len(), s.Floor())
	}
	// An id 64 indices above 4 (id 2*(2+64) = 132) slides the window past
	// ids 4 and below: they join the floor.
	s.Finish(132)
	if s.Floor() != 5 || !s.Done(2) || !s.Done(4) || s.Done(6) || !s.Done(8) || !s.Done(132) || s.Len() != 3 {
		t.Fatalf("after sliding: floor %d len %d, Done(2)=%v Done(6)=%v Done(8)=%v", s.Floor(), s.Len(), s.Done(2), s.Done(6), s.Done(8))
	}
	s.Finish(1 << 20) // far beyond: the whole window goes to the floor
	if s.Len() != 1 || s.Floor() != 1<<20-127 || !s.Done(132) || s.Done(1<<20+2) {
		t.Fatalf("after a jump: floor %d len %d", s.Floor(), s.Len())
	}
	s.Reset()
	if s.Len() != 0 || s.Floor() != 0 || s.Done(6) {
		t.Fatal("Reset kept state")
	}
	if NewSeen(0).Cap() != DefaultSeenCapacity {
		t.Fatal("NewSeen(0) must use the default capacity")
	}
}

func TestSeenZeroValueIsAFloor(t *testing.T) {
	var s Seen
	s.Finish(10)
	s.Finish(6)
	if s.Floor() < 10 || !s.Done(8) || !s.Done(10) || s.Done(12) {
		t.Fatalf("zero Seen: floor %d, Done(8)=%v Done(12)=%v", s.Floor(), s.Done(8), s.Done(12))
	}
}

func TestSeenLargeIDs(t *testing.T) {
	s := NewSeen(64)
	top := uint64(math.MaxUint64) - 1
	s.Finish(top)
	s.Finish(top - 4)
	s.Finish(top - 200) // below the window
	if !s.Done(top) || !s.Done(top-4) || s.Done(top-2) || !s.Done(top-200) || s.Done(math.MaxUint64-1-2) {
		t.Fatalf("floor %d", s.Floor())
	}
}

// seenModel is the specification of Seen: a window of width ids (by
// index id>>1) ending at the largest finished id, finished ids marked in
// it, and every index below it done.
type seenModel struct {
	width    uint64
	base     uint64          // first index of the window
	marked   map[uint64]bool // finished indices in the window
	finished map[uint64]bool // every id ever finished
}

func (m *seenModel) done(id uint64) bool {
	k := id >> 1
	return id == 0 || k < m.base || (k-m.base < m.width && m.marked[k])
}

func (m *seenModel) finish(id uint64) {
	m.finished[id] = true
	k := id >> 1
	if id == 0 || k < m.base {
		return
	}
	if k-m.base >= m.width {
		m.base = k - m.width + 1
		for x := range m.marked {
			if x < m.base {
				delete(m.marked, x)
			}
		}
	}
	m.marked[k] = true
}

func TestSeenModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := NewSeen(64)
		span := uint64(rapid.IntRange(4, 400).Draw(t, "span"))
		base := rapid.SampledFrom([]uint64{0, 1 << 40, math.MaxUint64 - 1000}).Draw(t, "base")
		m := &seenModel{width: 64, marked: map[uint64]bool{}, finished: map[uint64]bool{}}
		for range rapid.IntRange(0, 100).Draw(t, "ops") {
			// Client ids are even and mostly rise, with stragglers.
			id := base + 2*rapid.Uint64Range(0, span).Draw(t, "id")
			s.Finish(id)
			m.finish(id)
			if s.Len() != len(m.marked) {
				t.Fatalf("len %d, model %d", s.Len(), len(m.marked))
			}
			for x := base; x <= base+2*span+3; x++ {
				checkSeenID(t, s, m, x)
			}
		}
	})
}

// checkSeenID checks Done(x) against the model and the two guarantees:
// a finished id is always done, and an id never finished is refused only
// when an id at least the window's width above it has finished.
func checkSeenID(t *rapid.T, s *Seen, m *seenModel, x uint64) {
	got := s.Done(x)
	if got != m.done(x) {
		t.Fatalf("Done(%d) = %v, model says %v", x, got, m.done(x))
	}
	if m.finished[x] && !got {
		t.Fatalf("finished id %d is not done", x)
	}
	if got && !m.finished[x] && x != 0 {
		far := false
		for y := range m.finished {
			far = far || y>>1 >= x>>1+m.width
		}
		if !far && !m.finished[x^1] {
			t.Fatalf("new id %d refused though no finished id is %d ids above it", x, m.width)
		}
	}
}

func TestSeenAllocs(t *testing.T) {
	s := NewSeen(DefaultSeenCapacity)
	id := uint64(2)
	allocs := testing.AllocsPerRun(1000, func() {
		id += 6
		s.Finish(id)
		s.Finish(id - 2) // out of order
		s.Done(id - 4)
		s.Done(id + 2)
	})
	if allocs != 0 {
		t.Errorf("Finish/Done allocate %.1f times per run", allocs)
	}
}

func BenchmarkSeenFinishDone(b *testing.B) {
	s := NewSeen(DefaultSeenCapacity)
	b.ReportAllocs()
	for n := range b.N {
		id := uint64(n)*4 + 2
		s.Finish(id + 2)
		s.Finish(id)
		if !s.Done(id) {
			b.Fatal("finished id not done")
		}
	}
}

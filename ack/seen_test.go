package ack

import (
	"math"
	"testing"

	"pgregory.net/rapid"
)

func TestSeenBasics(t *testing.T) {
	s := NewSeen(3)
	if s.Cap() != 3 || s.Len() != 0 || s.Floor() != 0 {
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
	s.Finish(6) // full: the smallest, 4, becomes the floor
	if s.Floor() != 4 || !s.Done(2) || s.Done(5) || !s.Done(6) {
		t.Fatalf("after evicting 4: floor %d, Done(2)=%v Done(5)=%v Done(6)=%v",
			s.Floor(), s.Done(2), s.Done(5), s.Done(6))
	}
	s.Finish(5) // full and smaller than all remembered: becomes the floor itself
	if s.Floor() != 5 || s.Len() != 3 || !s.Done(5) || s.Done(7) {
		t.Fatalf("after finishing 5: floor %d len %d", s.Floor(), s.Len())
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
	if s.Floor() != 10 || !s.Done(8) || s.Done(12) {
		t.Fatalf("zero Seen: floor %d, Done(8)=%v Done(12)=%v", s.Floor(), s.Done(8), s.Done(12))
	}
}

func TestSeenLargeIDs(t *testing.T) {
	s := NewSeen(2)
	top := uint64(math.MaxUint64) - 1
	s.Finish(top)
	s.Finish(top - 4)
	s.Finish(top - 2)
	if s.Floor() != top-4 || !s.Done(top) || !s.Done(top-2) || s.Done(math.MaxUint64) {
		t.Fatalf("floor %d", s.Floor())
	}
}

// seenModel is the specification of Seen: a set of remembered ids above
// a floor, the smallest leaving for the floor when there are too many.
type seenModel struct {
	capacity int
	mem      map[uint64]bool
	floor    uint64
	finished map[uint64]bool // every id ever finished
}

func (m *seenModel) done(id uint64) bool { return id <= m.floor || m.mem[id] }

func (m *seenModel) finish(id uint64) {
	m.finished[id] = true
	if m.done(id) {
		return
	}
	m.mem[id] = true
	if len(m.mem) > m.capacity {
		low := id
		for x := range m.mem {
			low = min(low, x)
		}
		delete(m.mem, low)
		m.floor = low
	}
}

func TestSeenModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		capacity := rapid.IntRange(1, 8).Draw(t, "capacity")
		span := uint64(rapid.IntRange(4, 80).Draw(t, "span"))
		base := rapid.SampledFrom([]uint64{0, 1 << 40, math.MaxUint64 - 200}).Draw(t, "base")
		s := NewSeen(capacity)
		m := &seenModel{capacity: capacity, mem: map[uint64]bool{}, finished: map[uint64]bool{}}
		for range rapid.IntRange(0, 100).Draw(t, "ops") {
			// Client ids are even and mostly rise, with stragglers.
			id := base + 2*rapid.Uint64Range(0, span).Draw(t, "id")
			s.Finish(id)
			m.finish(id)
			if s.Len() > s.Cap() || s.Len() != len(m.mem) || s.Floor() != m.floor {
				t.Fatalf("len %d cap %d floor %d; model len %d floor %d",
					s.Len(), s.Cap(), s.Floor(), len(m.mem), m.floor)
			}
			for x := base; x <= base+2*span+3; x++ {
				checkSeenID(t, s, m, x)
			}
		}
	})
}

// checkSeenID checks Done(x) against the model and the two guarantees:
// a finished id is always done, and an id never finished is refused only
// when capacity larger ids have finished.
func checkSeenID(t *rapid.T, s *Seen, m *seenModel, x uint64) {
	got := s.Done(x)
	if got != m.done(x) {
		t.Fatalf("Done(%d) = %v, model says %v", x, got, m.done(x))
	}
	if m.finished[x] && !got {
		t.Fatalf("finished id %d is not done", x)
	}
	if got && !m.finished[x] && x != 0 {
		larger := 0
		for y := range m.finished {
			if y > x {
				larger++
			}
		}
		if larger < m.capacity {
			t.Fatalf("new id %d refused with only %d larger ids finished (capacity %d)", x, larger, m.capacity)
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
	if s.Len() != s.Cap() {
		t.Errorf("ring not full after the run: %d of %d", s.Len(), s.Cap())
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

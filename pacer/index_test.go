package pacer

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestIndexAgainstMap inserts and removes random IDs, growing the table
// from its smallest size, and checks every lookup against a map.
func TestIndexAgainstMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var x index
	x.init(2)
	var es []entry
	want := map[ID]int32{}
	for round := range 200_000 {
		id := ID(rng.Uint64N(20_000))
		if rng.IntN(4) == 0 {
			id <<= 40 // spread over the high bits too
		}
		at, e := x.find(id, es)
		if w, ok := want[id]; ok != (e >= 0) || ok && w != e {
			t.Fatalf("round %d: find(%d) = %d, want %d (present %v)", round, id, e, w, ok)
		}
		switch {
		case e < 0 && rng.IntN(3) > 0:
			e = int32(len(es))
			es = append(es, entry{id: id})
			x.insert(id, e, es)
			want[id] = e
		case e >= 0:
			x.remove(at, es)
			delete(want, id)
		}
		if x.n != len(want) {
			t.Fatalf("round %d: %d in the table, want %d", round, x.n, len(want))
		}
	}
	for id, e := range want {
		if _, got := x.find(id, es); got != e {
			t.Fatalf("find(%d) = %d, want %d", id, got, e)
		}
	}
}

// TestManyMessages queues 20,000 messages, changes and removes some, and
// checks that pure SRPT drains the rest in key order.
func TestManyMessages(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	p := New(Config{FIFOPerMille: -1})
	keys := map[ID]entry{}
	for i := range 20_000 {
		e := entry{id: ID(rng.Uint64()), remaining: rng.Uint32N(5000), seq: uint64(i)}
		p.Ready(e.id, e.remaining, e.seq)
		keys[e.id] = e
	}
	for id, e := range keys {
		switch rng.IntN(4) {
		case 0:
			p.Idle(id)
			delete(keys, id)
		case 1:
			e.remaining = rng.Uint32N(5000)
			p.Update(id, e.remaining)
			keys[id] = e
		}
	}
	want := make([]entry, 0, len(keys))
	for _, e := range keys {
		want = append(want, e)
	}
	slices.SortFunc(want, func(a, b entry) int {
		return cmp.Or(cmp.Compare(a.remaining, b.remaining), cmp.Compare(a.seq, b.seq), cmp.Compare(a.id, b.id))
	})
	got := drain(p, 1500)
	if len(got) != len(want) {
		t.Fatalf("drained %d messages, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i].id {
			t.Fatalf("pick %d: %d, want %d", i, got[i], want[i].id)
		}
	}
}

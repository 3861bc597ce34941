package homa

import (
	"bytes"
	"testing"

	"pgregory.net/rapid"
)

// TestInMsgReassembly checks reassembly against a model: a message is
// delivered as random, overlapping, duplicated and reordered fragments;
// the buffer ends equal to the message, received counts distinct bytes,
// and the span list stays sorted, disjoint and merged.
func TestInMsgReassembly(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		length := rapid.IntRange(1, 5000).Draw(t, "length")
		msg := rapid.SliceOfN(rapid.Byte(), length, length).Draw(t, "msg")
		var m inMsg
		m.init(uint32(length), 100)
		defer m.release()
		seen := make([]bool, length)
		steps := rapid.IntRange(1, 60).Draw(t, "steps")
		for i := 0; i < steps || !m.complete(); i++ {
			var off, n int
			if i < steps {
				off = rapid.IntRange(0, length-1).Draw(t, "off")
				n = rapid.IntRange(0, length-off).Draw(t, "n")
			} else {
				// Fill the first hole so the run ends complete.
				for seen[off] {
					off++
				}
				n = 1
			}
			fresh := 0
			for k := off; k < off+n; k++ {
				if !seen[k] {
					fresh++
					seen[k] = true
				}
			}
			if got := m.add(uint32(off), msg[off:off+n]); int(got) != fresh {
				t.Fatalf("add(%d, %d bytes) = %d new bytes, want %d", off, n, got, fresh)
			}
			checkSpans(t, &m, seen)
		}
		if !bytes.Equal(m.buf, msg) {
			t.Fatalf("reassembled message differs")
		}
	})
}

func checkSpans(t *rapid.T, m *inMsg, seen []bool) {
	var total uint32
	for i, s := range m.have {
		if s.Start >= s.End {
			t.Fatalf("empty span %v", s)
		}
		if i > 0 && m.have[i-1].End >= s.Start {
			t.Fatalf("spans %v and %v overlap or touch", m.have[i-1], s)
		}
		total += s.End - s.Start
	}
	if total != m.received {
		t.Fatalf("spans hold %d bytes, received says %d", total, m.received)
	}
	want := 0
	for _, ok := range seen {
		if ok {
			want++
		}
	}
	if int(m.received) != want {
		t.Fatalf("received %d, model %d", m.received, want)
	}
}

func TestIDs(t *testing.T) {
	a := newIDSource(40000, fixedTime)
	b := newIDSource(40001, fixedTime)
	prev := uint64(0)
	seen := map[uint64]bool{}
	for range 1000 {
		for _, s := range []*idSource{a, b} {
			id := s.newID()
			if id&1 != 0 || id == 0 {
				t.Fatalf("client id %#x is odd or zero", id)
			}
			if seen[id] {
				t.Fatalf("id %#x issued twice", id)
			}
			seen[id] = true
		}
	}
	for range 100 {
		id := a.newID()
		if id <= prev {
			t.Fatalf("ids not increasing: %#x after %#x", id, prev)
		}
		prev = id
	}
	// A later process on the same port continues above.
	c := newIDSource(40000, fixedTime.Add(1e9))
	if id := c.newID(); id <= prev {
		t.Fatalf("restarted source issued %#x, not above %#x", id, prev)
	}
}

func TestBufPool(t *testing.T) {
	for _, n := range []int{0, 1, 256, 257, 1500, 40000, 65536, MaxMessage} {
		b := getBuf(n)
		if len(b) != n || cap(b) < n {
			t.Fatalf("getBuf(%d): len %d cap %d", n, len(b), cap(b))
		}
		putBuf(b)
	}
	putBuf(make([]byte, 300)) // foreign capacity: ignored, must not panic
	b := getBuf(1000)
	putBuf(b)
	if allocs := testing.AllocsPerRun(100, func() { putBuf(getBuf(1000)) }); allocs != 0 {
		t.Fatalf("get/put allocates %v times", allocs)
	}
}

package homa

import (
	"testing"

	"github.com/homa-go/homa/contract"
)

func TestBufPool(t *testing.T) {
	for _, n := range []int{0, 1, 256, 257, 1500, 40000, 65536, contract.MaxMessage} {
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

// TestBufferStats: the pool counts what it hands out, allocates, keeps
// and discards. No endpoint runs during this test, so the counts are
// exact.
func TestBufferStats(t *testing.T) {
	const n = 3000 // class 4096
	c := sizeClass(n)
	b := getBuf(n)
	putBuf(b)
	before := ReadBufferStats()
	if before.Free == 0 || before.FreeBytes < 4096 {
		t.Fatalf("a returned buffer is not in the pool: %+v", before)
	}
	b = getBuf(n) // from the pool
	s := ReadBufferStats()
	if s.Gets != before.Gets+1 || s.Allocs != before.Allocs || s.Free != before.Free-1 || s.FreeBytes != before.FreeBytes-4096 {
		t.Errorf("reuse: %+v, before %+v", s, before)
	}
	// Drain the class, then take one more: an allocation.
	var held [][]byte
	for len(bufClasses[c].free) > 0 {
		held = append(held, getBuf(n))
	}
	before = ReadBufferStats()
	held = append(held, getBuf(n), b)
	s = ReadBufferStats()
	if s.Allocs != before.Allocs+1 || s.AllocBytes != before.AllocBytes+4096 {
		t.Errorf("allocation: %+v, before %+v", s, before)
	}
	// Return more than the class keeps: the excess is discarded.
	for range classLimit(c) {
		held = append(held, getBuf(n))
	}
	before = ReadBufferStats()
	for _, h := range held {
		putBuf(h)
	}
	s = ReadBufferStats()
	if kept := s.Free - before.Free; s.Discards-before.Discards+kept != uint64(len(held)) || s.Discards == before.Discards {
		t.Errorf("%d buffers returned: kept %d, discarded %d", len(held), kept, s.Discards-before.Discards)
	}
}

// TestTrimClasses: a trim lets go of the buffers of a class that went
// unused since the last trim, oldest first, and keeps those the interval
// needed; the next trim, with nothing needed, empties the class.
func TestTrimClasses(t *testing.T) {
	const size = 300 << 10 // the 512 KiB class, which the other tests leave alone
	bc := &bufClasses[sizeClass(size)]
	trimClasses()
	trimClasses() // the class is empty now, whatever came before
	var held [][]byte
	for range 8 {
		held = append(held, getBuf(size))
	}
	for _, b := range held {
		putBuf(b)
	}
	trimClasses() // the 8 were in use during this interval: all kept
	if n := len(bc.free); n != 8 {
		t.Fatalf("after a trim following their use, %d buffers free, want the 8", n)
	}
	oldest := &bc.free[0][:1][0]
	for range 3 { // an interval that needs 3 of them
		b := getBuf(size)
		putBuf(b)
	}
	b1, b2, b3 := getBuf(size), getBuf(size), getBuf(size)
	putBuf(b1)
	putBuf(b2)
	putBuf(b3)
	trimClasses()
	if n := len(bc.free); n != 3 {
		t.Fatalf("after an interval that needed 3 of 8, %d free, want 3", n)
	}
	for _, b := range bc.free {
		if &b[:1][0] == oldest {
			t.Error("the oldest buffer was kept; the newest should be")
		}
	}
	trimClasses()
	if n := len(bc.free); n != 0 {
		t.Fatalf("after an idle interval, %d free, want 0", n)
	}
}

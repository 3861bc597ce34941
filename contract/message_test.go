package contract

import (
	"bytes"
	"testing"
)

// countingBuffers hands out exact-size slices and counts the bytes held
// outside the pool.
type countingBuffers struct{ held int }

func (b *countingBuffers) Get(n int) []byte { b.held += n; return make([]byte, n) }
func (b *countingBuffers) Put(p []byte)     { b.held -= cap(p) }

// TestTakeData: a message that fills a buffer of its own is handed over
// as it is; one inside a larger receive buffer is copied into a buffer
// of its own, and the receive buffer goes back to the pool.
func TestTakeData(t *testing.T) {
	bufs := &countingBuffers{}
	whole := bufs.Get(1000)
	m := &Message{ID: 3}
	m.SetData(whole, whole, bufs)
	if d := m.TakeData(); &d[0] != &whole[0] || m.Data != nil {
		t.Fatal("a whole buffer was not handed over as it is")
	}
	m.Release() // nothing left to release
	if bufs.held != 1000 {
		t.Fatalf("%d bytes held after Release of a taken message, want the caller's 1000", bufs.held)
	}
	rx := bufs.Get(65536)
	m = &Message{ID: 3}
	m.SetData(rx[100:1100], rx, bufs)
	d := m.TakeData()
	if &d[0] == &rx[100] || cap(d) != len(d) || !bytes.Equal(d, rx[100:1100]) {
		t.Fatal("a window of a receive buffer was not copied into a buffer of its own")
	}
	if bufs.held != 1000+1000 {
		t.Fatalf("%d bytes held, want the two messages' 2000 (the receive buffer returned)", bufs.held)
	}
}

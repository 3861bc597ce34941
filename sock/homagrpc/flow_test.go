package homagrpc

import (
	"bytes"
	"testing"
)

// A message at a time through a stream's queues allocates nothing once
// they have run (ping-pong costs no allocation per message here), and
// what comes out is what went in, in order, also when several wait.
func TestQueuesReuseTheirArrays(t *testing.T) {
	var out outQueue
	out.limit = 1 << 40
	in := newInQueue(1<<20, 1<<20, 1<<40, nil)
	msg := []byte("hello")
	frame := make([]byte, 0, 256)
	step := func() {
		out.push(msg, false, nil)
		frame = out.fill(frame[:0], 256)
		if err := in.add(frame, nil); err != nil {
			t.Fatal(err)
		}
		m, ok := in.take()
		if !ok || !bytes.Equal(m.data, msg) {
			t.Fatalf("took %q, %v", m.data, ok)
		}
	}
	step()
	// The inQueue copies a message that does not alias a frame: that
	// allocation is the only one.
	if n := testing.AllocsPerRun(100, step); n > 1 {
		t.Errorf("%.1f allocations per message through the queues, want at most 1 (the copy)", n)
	}

	// Several waiting: a frame with room for two takes two, in order,
	// and the third waits.
	for _, s := range []string{"a1", "b22", "c333"} {
		out.push([]byte(s), false, nil)
	}
	frame = out.fill(frame[:0], 2*chunkHeaderLen+5)
	if err := in.add(frame, nil); err != nil {
		t.Fatal(err)
	}
	frame = out.fill(frame[:0], 256)
	if err := in.add(frame, nil); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"a1", "b22", "c333"} {
		if m, ok := in.take(); !ok || string(m.data) != s {
			t.Fatalf("took %q, %v; want %q", m.data, ok, s)
		}
	}
	if !out.empty() || out.pending != 0 {
		t.Errorf("out queue after sending everything: %d messages, %d bytes pending", len(out.msgs), out.pending)
	}
	if _, ok := in.take(); ok {
		t.Error("a message beyond those sent")
	}
}

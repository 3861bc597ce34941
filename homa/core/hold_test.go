package core

import (
	"net/netip"
	"testing"
	"unsafe"

	"github.com/homa-go/homa/homa/wire"
)

// trackingBuffers records which buffers came back.
type trackingBuffers struct{ put map[*byte]bool }

func (b *trackingBuffers) Get(n int) []byte { return make([]byte, n) }
func (b *trackingBuffers) Put(p []byte)     { b.put[unsafe.SliceData(p)] = true }

// TestZeroCopyHold: DATA packets of a large message point into it and the
// Output holds it, so it goes back to Buffers only when both the core and
// every Output are done with it; a small message is copied into its
// packets and holds nothing.
func TestZeroCopyHold(t *testing.T) {
	bufs := &trackingBuffers{put: map[*byte]bool{}}
	c := New(Local{Port: 40000, FirstID: 2, Buffers: bufs}, Config{})
	dst := netip.MustParseAddrPort("10.0.0.2:500")

	big := bufs.Get(100_000)
	for i := range big {
		big[i] = byte(i)
	}
	var out Output
	id, err := c.Send(dst, big, 0, 1500, 0, &out)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Packets) == 0 || len(out.Holds) != 1 {
		t.Fatalf("%d packets, %d holds; want some packets and 1 hold", len(out.Packets), len(out.Holds))
	}
	sent := 0
	for _, p := range out.Packets {
		var d wire.Data
		if _, err := d.Parse(p.Buf); err != nil {
			t.Fatalf("header: %v", err)
		}
		if len(p.Buf) != wire.DataLen {
			t.Errorf("DATA header is %d bytes, want %d", len(p.Buf), wire.DataLen)
		}
		if len(p.Payload) == 0 || &p.Payload[0] != &big[d.SegOffset] {
			t.Fatalf("packet at offset %d does not point into the message", d.SegOffset)
		}
		sent += len(p.Payload)
	}
	if sent != 40_000 {
		t.Errorf("%d unscheduled bytes sent, want 40000", sent)
	}
	if _, err := c.Abort(id, 0, &Output{}); err != nil {
		t.Fatal(err)
	}
	if bufs.put[&big[0]] {
		t.Fatal("message returned to Buffers while an Output still points into it")
	}
	for _, h := range out.Holds {
		h.Release()
	}
	if !bufs.put[&big[0]] {
		t.Fatal("message not returned to Buffers after the last release")
	}

	small := bufs.Get(ZeroCopyMin - 1)
	out.Reset()
	if _, err := c.Send(dst, small, 0, 1500, 0, &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Holds) != 0 {
		t.Errorf("small message: %d holds, want 0", len(out.Holds))
	}
	for _, p := range out.Packets {
		if p.Payload != nil || len(p.Buf) <= wire.DataLen {
			t.Errorf("small message: packet of %d+%d bytes; want the payload copied after the header", len(p.Buf), len(p.Payload))
		}
	}
}

// TestHoldsRecycled: the core reuses a Hold only once its last reference
// is gone (the message done and every Output that pointed into it
// released), never while a packet may still point into its buffer.
func TestHoldsRecycled(t *testing.T) {
	bufs := &trackingBuffers{put: map[*byte]bool{}}
	c := New(Local{Port: 40000, FirstID: 2, Buffers: bufs}, Config{})
	dst := netip.MustParseAddrPort("10.0.0.2:500")
	send := func() (uint64, *Hold, *Output) {
		t.Helper()
		out := &Output{}
		id, err := c.Send(dst, bufs.Get(100_000), 0, 1500, 0, out)
		if err != nil || len(out.Holds) != 1 {
			t.Fatalf("Send: %v, %d holds", err, len(out.Holds))
		}
		return id, out.Holds[0], out
	}
	id1, h1, out1 := send()
	if _, err := c.Abort(id1, 0, &Output{}); err != nil {
		t.Fatal(err)
	}
	id2, h2, out2 := send()
	if h2 == h1 {
		t.Fatal("a Hold was reused while an Output still held it")
	}
	for _, h := range out1.Holds {
		h.Release()
	}
	_, h3, _ := send()
	if h3 != h1 {
		t.Error("a Hold whose references were all released was not reused")
	}
	if _, err := c.Abort(id2, 0, &Output{}); err != nil {
		t.Fatal(err)
	}
	out2.Holds[0].Release()
	if !h2.free.Load() {
		t.Error("the second Hold is not free after its last release")
	}
}

// sourceBuffers counts its gets and records its puts.
type sourceBuffers struct {
	trackingBuffers
	gets int
}

func (b *sourceBuffers) Get(n int) []byte { b.gets++; return b.trackingBuffers.Get(n) }

// TestCacheAndBuffers: with a Cache, the core takes its buffers from it,
// while Messages and Holds, which other goroutines release, go back to
// Buffers.
func TestCacheAndBuffers(t *testing.T) {
	shared := &sourceBuffers{trackingBuffers: trackingBuffers{put: map[*byte]bool{}}}
	cache := &sourceBuffers{trackingBuffers: trackingBuffers{put: map[*byte]bool{}}}
	c := New(Local{Port: 500, Buffers: shared, Cache: cache}, Config{})
	client := netip.MustParseAddr("10.0.0.2")

	req := wire.Data{Common: wire.Common{SrcPort: 40000, DstPort: 500, SenderID: 2},
		MessageLength: 100, Incoming: 100, SegOffset: wire.OffsetNone, Payload: make([]byte, 100)}
	var out Output
	c.Handle(req.Append(nil), client, 0, &out)
	if len(out.Messages) != 1 {
		t.Fatalf("%d messages, want the request", len(out.Messages))
	}
	if cache.gets == 0 || shared.gets != 0 {
		t.Fatalf("the core took %d buffers from its cache and %d from Buffers; want some and 0", cache.gets, shared.gets)
	}
	m := out.Messages[0]
	data := unsafe.SliceData(m.Data)
	m.Release()
	if !shared.put[data] || cache.put[data] {
		t.Fatalf("a released message went back to Buffers: %v, to the cache: %v; want true, false", shared.put[data], cache.put[data])
	}

	big := make([]byte, 100_000)
	out.Reset()
	id, err := c.Send(netip.AddrPortFrom(client, 40000), big, 0, 1500, 0, &out)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Abort(id, 0, &Output{}); err != nil {
		t.Fatal(err)
	}
	for _, h := range out.Holds {
		h.Release()
	}
	if !shared.put[&big[0]] || cache.put[&big[0]] {
		t.Fatalf("a held message went back to Buffers: %v, to the cache: %v; want true, false", shared.put[&big[0]], cache.put[&big[0]])
	}
}

// TestHoldLetsGo: once its last reference is released a Hold keeps no
// pointer to the buffer, so that a retired Hold waiting for its next
// message does not keep a buffer the pool let go of reachable.
func TestHoldLetsGo(t *testing.T) {
	bufs := &trackingBuffers{put: map[*byte]bool{}}
	c := New(Local{Buffers: bufs}, Config{})
	data := make([]byte, ZeroCopyMin)
	h := c.holdFor(data)
	h.refs.Add(1) // an Output's
	h.Release()
	if h.buf == nil || h.Done() {
		t.Fatal("released with a reference left")
	}
	h.Release()
	if !h.Done() || h.buf != nil || !bufs.put[unsafe.SliceData(data)] {
		t.Fatalf("after the last release: done %v, buffer kept %v, returned %v", h.Done(), h.buf != nil, bufs.put[unsafe.SliceData(data)])
	}
}

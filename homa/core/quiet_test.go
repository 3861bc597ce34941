package core

import (
	"net/netip"
	"testing"
	"time"

	"github.com/homa-go/homa/homa/wire"
)

// TestEagerAck: a client that calls now and then (each request long
// after the last response) acknowledges with the response's arrival, in
// an ACK packet, and is left quiet: no timer armed, nothing in
// progress. A client calling back to back lets its next request carry
// the acknowledgment, and no ACK packet goes out.
func TestEagerAck(t *testing.T) {
	server := netip.MustParseAddrPort("10.0.0.1:500")
	// call makes one RPC at now, its response arriving 20 µs later, and
	// returns the ACK packets the response's arrival produced.
	call := func(c *Core, now time.Duration) (acks int) {
		t.Helper()
		var out Output
		id, err := c.Send(server, make([]byte, 100), 0, 1500, now, &out)
		if err != nil {
			t.Fatal(err)
		}
		if c.Quiet() {
			t.Fatal("quiet with an RPC in flight")
		}
		out.Reset()
		resp := wire.Data{Common: wire.Common{SrcPort: 500, DstPort: 40000, SenderID: id | 1}, MessageLength: 100, Incoming: 100, SegOffset: wire.OffsetNone, Payload: make([]byte, 100)}
		c.Handle(resp.Append(nil), server.Addr(), now+20*time.Microsecond, &out)
		if len(out.Messages) != 1 {
			t.Fatalf("%d messages, want the response", len(out.Messages))
		}
		for _, p := range out.Packets {
			if typ, _ := wire.PeekType(p.Buf); typ == wire.TypeAck {
				acks++
			}
		}
		out.Reset()
		c.Idle(now+30*time.Microsecond, &out)
		return acks
	}

	sparse := New(Local{Port: 40000}, Config{})
	now := time.Duration(0)
	acks := 0
	for i := range 10 {
		now += 5 * time.Millisecond
		n := call(sparse, now)
		acks += n
		if i >= 2 && (n != 1 || !sparse.Quiet()) {
			t.Fatalf("sparse RPC %d: %d ACK packets, quiet %v; want 1 and quiet", i, n, sparse.Quiet())
		}
	}
	if at, ok := sparse.Next(); ok && at < now+peerLinger-time.Second {
		t.Fatalf("a sparse client has a deadline at %v after its RPCs, before its idle peer's expiry", at)
	}

	busy := New(Local{Port: 40000}, Config{})
	now = 0
	for i := range 10 {
		now += 25 * time.Microsecond // the next request right after the response
		if n := call(busy, now); n != 0 {
			t.Fatalf("back-to-back RPC %d: %d ACK packets, want none (the next request carries it)", i, n)
		}
	}
	if busy.Quiet() {
		t.Fatal("quiet while an acknowledgment waits for a request or the timer")
	}
	if _, ok := busy.Next(); !ok {
		t.Fatal("no deadline for the pending acknowledgment")
	}
}

// TestAwaitsAcks: a server whose only RPCs are responses waiting for
// their acknowledgments awaits acknowledgments, as long as their client
// host acknowledged its last response within promptAck; a host seen
// acknowledging later (with its next request, or on a timer) is not
// waited for until it acknowledges promptly again. Anything else in
// progress (a request with the application, a client RPC) is not a wait
// for acknowledgments.
func TestAwaitsAcks(t *testing.T) {
	c := New(Local{Port: 500}, Config{})
	client := netip.MustParseAddr("10.0.0.2")
	var out Output
	ack := func(id uint64, now time.Duration) {
		t.Helper()
		a := wire.Ack{Common: wire.Common{SrcPort: 40000, DstPort: 500, SenderID: id}}
		c.Handle(a.Append(nil), client, now, &out)
		out.Reset()
	}
	// serve takes request id at now and answers it 10 µs later.
	serve := func(id uint64, now time.Duration) {
		t.Helper()
		c.Handle(request(id, 0), client, now, &out)
		if len(out.Messages) != 1 {
			t.Fatalf("%d messages, want request %d", len(out.Messages), id)
		}
		out.Reset()
		if c.AwaitsAcks() {
			t.Fatal("awaits acknowledgments while the request is with the application")
		}
		c.Delivered(client, id|1)
		if err := c.Reply(client, id|1, make([]byte, 100), 1500, now+10*time.Microsecond, &out); err != nil {
			t.Fatal(err)
		}
		out.Reset()
	}
	ms := time.Millisecond
	steps := []struct {
		want     bool          // AwaitsAcks after the step's reply
		ackAfter time.Duration // when the acknowledgment comes, after the reply
	}{
		{true, 20 * time.Microsecond},  // a new host is taken to be prompt
		{true, 2 * ms},                 // its last acknowledgment was prompt
		{false, 30 * time.Microsecond}, // the last came 2 ms late
		{true, 40 * time.Microsecond},  // prompt again
	}
	now := time.Duration(0)
	for i, s := range steps {
		id := uint64(2 + 2*i)
		now += 10 * ms
		serve(id, now)
		if got := c.AwaitsAcks(); got != s.want {
			t.Fatalf("step %d: AwaitsAcks %v after the reply, want %v", i, got, s.want)
		}
		ack(id, now+10*time.Microsecond+s.ackAfter)
		if c.AwaitsAcks() || !c.Quiet() {
			t.Fatalf("step %d: after the acknowledgment AwaitsAcks %v, quiet %v; want false, true", i, c.AwaitsAcks(), c.Quiet())
		}
	}

	// A client RPC in flight beside the response: not only waiting.
	now += 10 * ms
	serve(20, now)
	if !c.AwaitsAcks() {
		t.Fatal("a prompt host's response: not awaiting its acknowledgment")
	}
	if _, err := c.Send(netip.MustParseAddrPort("10.0.0.3:600"), make([]byte, 100), 0, 1500, now, &out); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if c.AwaitsAcks() {
		t.Fatal("awaits acknowledgments with a client RPC in flight")
	}
}

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

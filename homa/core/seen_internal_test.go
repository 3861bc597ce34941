package core

import (
	"net/netip"
	"testing"
)

// TestLookupSeenForgets: the record of the client port looked up last,
// kept at hand, goes with its entry when the table forgets it to make
// room: no lookup finds it afterwards.
func TestLookupSeenForgets(t *testing.T) {
	c := New(Local{Port: 500}, Config{})
	addr := netip.MustParseAddr("10.0.0.2")
	k := clientKey{addr, 40000}
	s := c.seenFor(addr, k.port)
	s.Finish(2)
	if got := c.lookupSeen(k); got != s || c.lastSeen.s != s {
		t.Fatalf("lookupSeen = %p, want the record %p, kept at hand", got, s)
	}
	for port := 0; ; port++ {
		if port > 10*maxSeenClients {
			t.Fatal("the table never forgot the record")
		}
		c.seenFor(netip.AddrFrom4([4]byte{10, 1, byte(port >> 8), byte(port)}), 1)
		if c.seen[k] == nil {
			break
		}
		c.lookupSeen(k) // keep it at hand
	}
	if got := c.lookupSeen(k); got != nil {
		t.Fatalf("lookupSeen found the forgotten record %p", got)
	}
	if c.stale(addr, k.port, 2, false) {
		t.Fatal("a forgotten record still marks its ids finished")
	}
}

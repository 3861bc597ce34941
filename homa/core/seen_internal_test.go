package core

import (
	"net/netip"
	"testing"
	"time"
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
	if got := c.lookupSeen(k); got != s || c.seen.last.s != s {
		t.Fatalf("lookupSeen = %p, want the record %p, kept at hand", got, s)
	}
	for port := 0; ; port++ {
		if port > 10*maxSeenClients {
			t.Fatal("the table never forgot the record")
		}
		c.seenFor(netip.AddrFrom4([4]byte{10, 1, byte(port >> 8), byte(port)}), 1)
		if c.seen.m[k] == nil {
			break
		}
		c.seen.last = c.seen.m[k] // at hand, yet not touched
	}
	if got := c.lookupSeen(k); got != nil {
		t.Fatalf("lookupSeen found the forgotten record %p", got)
	}
	if c.stale(addr, k.port, 2, false) {
		t.Fatal("a forgotten record still marks its ids finished")
	}
}

// TestSeenEvictsLeastRecent: a full table makes room by forgetting the
// record whose port was active least recently, not the oldest nor an
// arbitrary one; each eviction is counted.
func TestSeenEvictsLeastRecent(t *testing.T) {
	c := New(Local{Port: 500}, Config{})
	var out Output
	addrOf := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 2, byte(i >> 8), byte(i)}) }
	for i := range maxSeenClients {
		c.Tick(time.Duration(i)*time.Millisecond, &out)
		c.seenFor(addrOf(i), 1).Finish(2)
	}
	c.Tick(maxSeenClients*time.Millisecond, &out)
	if !c.stale(addrOf(0), 1, 2, false) { // the oldest, active again
		t.Fatal("record 0 lost before the table was full")
	}
	c.seenFor(addrOf(maxSeenClients), 1)
	if c.seen.m[clientKey{addrOf(0), 1}] == nil {
		t.Fatal("the table forgot the record active last but one")
	}
	if c.seen.m[clientKey{addrOf(1), 1}] != nil {
		t.Fatal("the least recently active record stayed")
	}
	if st := c.Stats(); st.SeenEvicted != 1 || st.SeenClients != maxSeenClients || st.SeenExpired != 0 {
		t.Fatalf("evicted %d, expired %d, held %d; want 1, 0, %d", st.SeenEvicted, st.SeenExpired, st.SeenClients, maxSeenClients)
	}
}

// runTimers runs c's timers in deadline order up to limit, calling
// each after every Tick, and returns the time of the last Tick.
func runTimers(c *Core, limit time.Duration, each func(now time.Duration)) time.Duration {
	var out Output
	var last time.Duration
	for {
		at, ok := c.Next()
		if !ok || at > limit {
			return last
		}
		c.Tick(at, &out)
		out.Reset()
		last = at
		each(at)
	}
}

// TestSeenExpiresAfterSilence: a record outlives its port's last
// activity by seenTicks, and goes within a grain after that: the timer
// wakes at most once a grain, it finds the record while it is due to
// stay, and once the record has gone the core has no deadline left (an
// idle core sleeps). Its map, emptied far below its peak, is rebuilt.
func TestSeenExpiresAfterSilence(t *testing.T) {
	c := New(Local{Port: 500}, Config{})
	var out Output
	addr := netip.MustParseAddr("10.0.0.2")
	for i := range 100 {
		c.seenFor(addr, uint16(1000+i)).Finish(2)
	}
	start := 10 * time.Second
	c.Tick(start, &out)
	if !c.stale(addr, 1000, 2, false) { // port 1000 is active at start
		t.Fatal("finished id not stale")
	}
	big := c.seen.m
	bound := start + c.at(c.seenTicks())
	grain := c.at(c.seenTicks() / seenGrain)
	wakes := 0
	var gone time.Duration
	runTimers(c, bound+time.Hour, func(now time.Duration) {
		wakes++
		if _, ok := c.seen.m[clientKey{addr, 1000}]; !ok && gone == 0 {
			gone = now
		}
	})
	if gone < bound || gone > bound+grain {
		t.Fatalf("record expired at %v, want in [%v, %v]", gone, bound, bound+grain)
	}
	if wakes > 2*seenGrain+4 {
		t.Fatalf("the timer woke %d times over the expiry of 100 records", wakes)
	}
	if _, ok := c.Next(); ok {
		t.Fatal("a deadline remains after every record expired")
	}
	if st := c.Stats(); st.SeenExpired != 100 || st.SeenClients != 0 {
		t.Fatalf("expired %d, held %d; want 100, 0", st.SeenExpired, st.SeenClients)
	}
	if c.stale(addr, 1000, 2, false) {
		t.Fatal("an expired record still marks its ids finished")
	}
	c.seenFor(addr, 1)
	if _, ok := big[clientKey{addr, 1}]; ok || c.seen.peak >= 100 {
		t.Fatalf("the map emptied from its peak of 100 was not replaced (peak %d)", c.seen.peak)
	}
}

// TestSeenActiveStays: a port that consults its record (a request from
// it) more often than the expiry time keeps the record for ever.
func TestSeenActiveStays(t *testing.T) {
	c := New(Local{Port: 500}, Config{})
	var out Output
	addr := netip.MustParseAddr("10.0.0.2")
	c.seenFor(addr, 7).Finish(2)
	step := c.at(c.seenTicks() - 1)
	for i := range 20 {
		now := time.Duration(i+1) * step
		runTimers(c, now, func(time.Duration) {})
		c.Tick(now, &out)
		if !c.stale(addr, 7, 2, false) {
			t.Fatalf("record of an active port lost after %v", now)
		}
	}
	if st := c.Stats(); st.SeenExpired != 0 || st.SeenClients != 1 {
		t.Fatalf("expired %d, held %d; want 0, 1", st.SeenExpired, st.SeenClients)
	}
}

// TestShrinkMap: a map is moved only once it holds an eighth of a peak
// worth moving, and then to a new map with the same entries.
func TestShrinkMap(t *testing.T) {
	m := map[int]int{}
	for i := range 1000 {
		m[i] = i
	}
	_, peak := shrinkMap(m, 0)
	if peak != 1000 {
		t.Fatalf("peak %d, want 1000", peak)
	}
	for i := range 800 {
		delete(m, i)
	}
	if _, p2 := shrinkMap(m, peak); p2 != peak {
		t.Fatalf("moved at %d of peak %d", len(m), peak)
	}
	for i := 800; i < 875; i++ {
		delete(m, i)
	}
	m3, p3 := shrinkMap(m, peak)
	if p3 != 125 || len(m3) != 125 || m3[900] != 900 {
		t.Fatalf("at 125 of peak 1000: peak %d, %d entries", p3, len(m3))
	}
	m3[-1] = 1
	if _, ok := m[-1]; ok {
		t.Fatal("the map returned is the old one")
	}
	small := map[int]int{1: 1}
	if _, p := shrinkMap(small, shrinkFloor-1); p != shrinkFloor-1 {
		t.Fatal("a map below the floor was moved")
	}
}

package pacer

import (
	"testing"
	"time"
)

// drain calls Next, Sent(n) and Idle until the queue is empty and returns
// the order of the picks.
func drain(p *Pacer, n int) []ID {
	var got []ID
	for {
		id, ok := p.Next()
		if !ok {
			return got
		}
		got = append(got, id)
		p.Sent(n, 0)
		p.Idle(id)
	}
}

// equalIDs reports whether two pick orders are the same.
func equalIDs(a, b []ID) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestSRPTOrder(t *testing.T) {
	type ready struct {
		id        ID
		remaining uint32
		seq       uint64
	}
	tests := []struct {
		name  string
		ready []ready
		want  []ID
	}{
		{"short after long goes first", []ready{{1, 1_000_000, 1}, {2, 1000, 2}}, []ID{2, 1}},
		{"fewest bytes first", []ready{{1, 300, 1}, {2, 100, 2}, {3, 200, 3}, {4, 50, 4}}, []ID{4, 2, 3, 1}},
		{"equal bytes: older first", []ready{{1, 500, 9}, {2, 500, 3}, {3, 500, 5}}, []ID{2, 3, 1}},
		{"equal bytes and age: smaller ID", []ready{{9, 500, 1}, {4, 500, 1}, {6, 500, 1}}, []ID{4, 6, 9}},
		{"ready again replaces", []ready{{1, 100, 1}, {2, 200, 2}, {1, 300, 1}}, []ID{2, 1}},
		{"zero bytes left", []ready{{1, 1, 1}, {2, 0, 2}}, []ID{2, 1}},
	}
	for _, tt := range tests {
		p := New(Config{FIFOPerMille: -1})
		for _, r := range tt.ready {
			p.Ready(r.id, r.remaining, r.seq)
		}
		if got := drain(p, 1500); !equalIDs(got, tt.want) {
			t.Errorf("%s: order %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestUpdateAndIdle(t *testing.T) {
	p := New(Config{FIFOPerMille: -1})
	p.Ready(1, 10_000, 1)
	p.Ready(2, 5_000, 2)
	p.Ready(3, 7_000, 3)
	if id, _ := p.Next(); id != 2 {
		t.Fatalf("Next = %d, want 2", id)
	}
	p.Update(1, 1_000) // message 1 has sent most of its bytes
	if id, _ := p.Next(); id != 1 {
		t.Fatalf("after Update: Next = %d, want 1", id)
	}
	p.Idle(1) // waits for a grant
	if id, _ := p.Next(); id != 2 {
		t.Fatalf("after Idle: Next = %d, want 2", id)
	}
	p.Update(42, 1) // not queued: ignored
	p.Idle(42)
	if s := p.Stats(); p.Len() != 2 || s.Queued != 2 || s.QueuedBytes != 12_000 {
		t.Fatalf("Len %d, stats %+v; want 2 messages, 12,000 bytes", p.Len(), s)
	}
	p.Idle(2)
	p.Idle(3)
	if id, ok := p.Next(); ok || p.Len() != 0 || p.Stats().QueuedBytes != 0 {
		t.Fatalf("empty queue: Next = %d, %v; Len %d; stats %+v", id, ok, p.Len(), p.Stats())
	}
}

// starve simulates an old message of oldBytes among an endless stream of
// one-packet messages of shortBytes, always one ready and each younger
// than the last. Every packet is full: the old message's carry oldPkt
// bytes. It returns the bytes sent, in all, when the old message is done
// (or when limit bytes are sent) and how many of them were the old
// message's.
func starve(cfg Config, oldBytes, oldPkt, shortBytes int, limit uint64) (total, old uint64) {
	p := New(cfg)
	p.Ready(1, uint32(oldBytes), 0)
	next := ID(2)
	p.Ready(next, uint32(shortBytes), uint64(next))
	for total < limit {
		id, _ := p.Next()
		n := shortBytes
		if id == 1 {
			n = min(oldPkt, oldBytes)
			old += uint64(n)
		}
		p.Sent(n, 0)
		total += uint64(n)
		if id != 1 {
			p.Idle(id)
			next++
			p.Ready(next, uint32(shortBytes), uint64(next))
			continue
		}
		if oldBytes -= n; oldBytes == 0 {
			break
		}
		p.Update(1, uint32(oldBytes))
	}
	return total, old
}

// TestFIFOPreventsStarvation: a 1 MB message sent in 1,500-byte packets
// under an endless stream of 1,000-byte messages. With the default 5%
// share it is done once 20 MB are sent, 160 ms at 1 Gbit/s: within 50 KB,
// as its share is exact within a packet (times 20: 30 KB) and it sends
// its last 1,000 bytes as the shortest message. With no share it gets
// nothing in 100 MB; with a 100% share it goes first.
func TestFIFOPreventsStarvation(t *testing.T) {
	const oldBytes = 1_000_000
	total, old := starve(Config{}, oldBytes, 1500, 1000, 1<<40)
	want := uint64(oldBytes * 1000 / DefaultFIFOPerMille)
	if old != oldBytes || total > want+50_000 || total < want-50_000 {
		t.Fatalf("5%% share: done after %d bytes (old %d), want %d within 50,000", total, old, want)
	}
	if _, old := starve(Config{FIFOPerMille: -1}, oldBytes, 1500, 1000, 100_000_000); old != 0 {
		t.Fatalf("no share: the old message got %d bytes", old)
	}
	if total, _ := starve(Config{FIFOPerMille: 1000}, oldBytes, 1500, 1000, 1<<40); total != oldBytes {
		t.Fatalf("pure FIFO: done after %d bytes, want %d", total, oldBytes)
	}
}

// TestFIFOShareIsBytes checks that the share counts bytes, not packets:
// against 100-byte messages the old message's 1,500-byte packets get one
// pick in about 300 (5% of the bytes), not one in 20.
func TestFIFOShareIsBytes(t *testing.T) {
	const limit = 10_000_000
	for _, perMille := range []int{10, 50, 200} {
		total, old := starve(Config{FIFOPerMille: perMille}, 1<<31, 1500, 100, limit)
		share := uint64(perMille) * total / 1000
		if lag := uint64(1000+perMille) * 1500 / 1000; old+lag < share || old > share+1500 {
			t.Errorf("%d per mille: the old message got %d of %d bytes, want %d within a packet",
				perMille, old, total, share)
		}
	}
}

// TestFIFONoDebtWhenAlone checks that bytes a message sends while it is
// both oldest and shortest do not count against its share later, and
// that the share starts once the oldest is owed more than a packet.
func TestFIFONoDebtWhenAlone(t *testing.T) {
	p := New(Config{})
	p.Ready(1, 1_000_000, 1)
	for range 1000 {
		p.Next()
		p.Sent(1500, 0)
	}
	p.Ready(2, 100, 2)
	var picks []ID
	for range 22 {
		id, _ := p.Next()
		picks = append(picks, id)
		p.Sent(1500, 0)
	}
	// 21 packets of message 2 make the oldest owed more than a packet
	// (5% of 31,500 bytes > 1,500).
	for i, id := range picks {
		want := ID(2)
		if i == 21 {
			want = 1
		}
		if id != want {
			t.Fatalf("after being alone: picks %v, want 21 times 2, then 1", picks)
		}
	}
}

// TestRateOneSecond sends 1,500-byte packets as fast as Admit allows for a
// simulated second at 1,000 Mbit/s: 125 MB go, plus what fits in
// MaxQueue at the start, and the outstanding time never exceeds MaxQueue.
func TestRateOneSecond(t *testing.T) {
	p := New(Config{RateMbps: 1000})
	maxQueue := p.Config().MaxQueue.Nanoseconds()
	var sent, now int64
	for now < int64(time.Second) {
		ok, wait := p.Admit(1500, now)
		if !ok {
			now += int64(wait)
			continue
		}
		p.Sent(1500, now)
		sent += 1500
		if out := p.Outstanding(now).Nanoseconds(); out > maxQueue {
			t.Fatalf("at %d ns: %d ns outstanding, MaxQueue %d", now, out, maxQueue)
		}
	}
	// 125 bytes per µs: the link drains 125,000,000 bytes in the second,
	// and at most MaxQueue's worth (2,500 bytes) is still below at its end.
	const want = 125_000_000
	if sent < want || sent > want+2500 {
		t.Fatalf("sent %d bytes in a second, want %d..%d", sent, want, want+2500)
	}
	if s := p.Stats(); s.SentBytes != uint64(sent) || s.Sends != uint64(sent/1500) || s.Throttled == 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestAdmit(t *testing.T) {
	// 10,000 Mbit/s: a 1,500-byte packet takes 1,200 ns; MaxQueue 5 µs.
	p := New(Config{RateMbps: 10_000, MaxQueue: 5 * time.Microsecond})
	const t0 = 1_000_000
	for i := range 4 {
		if ok, _ := p.Admit(1500, t0); !ok {
			t.Fatalf("packet %d refused", i)
		}
		p.Sent(1500, t0)
	}
	// 4,800 ns outstanding: a fifth packet must wait until 3,800 are left.
	ok, wait := p.Admit(1500, t0)
	if ok || wait != 1000 {
		t.Fatalf("fifth packet: ok %v, wait %v; want wait 1µs", ok, wait)
	}
	if ok, _ := p.Admit(1500, t0+999); ok {
		t.Fatalf("admitted 1 ns early")
	}
	if ok, _ := p.Admit(1500, t0+1000); !ok {
		t.Fatalf("refused after the wait")
	}
	if ok, _ := p.Admit(200, t0); !ok {
		t.Fatalf("a 200-byte packet (160 ns) fits in the last 200 ns")
	}
	// A packet longer than MaxQueue goes only when nothing is below.
	ok, wait = p.Admit(64_000, t0)
	if ok || wait != 4800 {
		t.Fatalf("64 KB packet: ok %v, wait %v; want wait 4.8µs", ok, wait)
	}
	if ok, _ := p.Admit(64_000, t0+4800); !ok {
		t.Fatalf("64 KB packet refused on an empty link")
	}
	p.Sent(64_000, t0+4800)
	if out := p.Outstanding(t0 + 4800); out != 51_200 {
		t.Fatalf("outstanding %v after a 64 KB packet, want 51.2µs", out)
	}
	if got := p.Stats().Throttled; got != 3 {
		t.Fatalf("Throttled = %d, want 3", got)
	}
}

// TestSentFractions checks that transmit times that are not whole
// nanoseconds add up without drift: 3 bytes at 7 Mbit/s take 3428.57 ns.
func TestSentFractions(t *testing.T) {
	p := New(Config{RateMbps: 7, MaxQueue: time.Hour})
	for range 7000 {
		p.Sent(3, 0)
	}
	if out := p.Outstanding(0); out != 24_000_000 {
		t.Fatalf("7,000 packets of 3 bytes at 7 Mbit/s: %v, want 24ms", out)
	}
	p.Sent(3, 0)
	if out := p.Outstanding(0); out != 24_003_429 {
		t.Fatalf("one more: %v, want 24.003429ms (rounded up)", out)
	}
}

func TestUnlimited(t *testing.T) {
	p := New(Config{})
	for range 1000 {
		if ok, wait := p.Admit(64_000, 0); !ok || wait != 0 {
			t.Fatalf("unlimited rate refused a packet")
		}
		p.Sent(64_000, 0)
	}
	if p.Outstanding(0) != 0 || p.Stats().Throttled != 0 || p.Stats().SentBytes != 64_000_000 {
		t.Fatalf("stats %+v", p.Stats())
	}
}

func TestConfigDefaults(t *testing.T) {
	tests := []struct{ in, want Config }{
		{Config{}, Config{MaxQueue: DefaultMaxQueue, FIFOPerMille: DefaultFIFOPerMille, LinkSlice: DefaultMaxQueue / 4}},
		{Config{RateMbps: -5, MaxQueue: -1, FIFOPerMille: -1, LinkSlice: -1}, Config{MaxQueue: DefaultMaxQueue}},
		{Config{RateMbps: 25_000, MaxQueue: time.Microsecond, FIFOPerMille: 5000},
			Config{RateMbps: 25_000, MaxQueue: time.Microsecond, FIFOPerMille: 1000, LinkSlice: 250 * time.Nanosecond}},
		{Config{MaxQueue: time.Microsecond, LinkSlice: time.Second},
			Config{MaxQueue: time.Microsecond, FIFOPerMille: DefaultFIFOPerMille, LinkSlice: time.Microsecond}},
	}
	for _, tt := range tests {
		if got := New(tt.in).Config(); got != tt.want {
			t.Errorf("New(%+v).Config() = %+v, want %+v", tt.in, got, tt.want)
		}
	}
}

// churner keeps a Pacer in a steady state: messages come and go with
// new IDs, and packets go out at 25 Gbit/s.
type churner struct {
	p   *Pacer
	id  ID
	now int64
}

// newChurner returns a churner with n messages queued.
func newChurner(n int) *churner {
	c := &churner{p: New(Config{RateMbps: 25_000})}
	for ; c.id < ID(n); c.id++ {
		c.p.Ready(c.id, uint32(c.id)*1000, uint64(c.id))
	}
	return c
}

// step queues a new message, sends a packet of the one Next names once
// Admit allows, and retires that one.
func (c *churner) step() {
	c.p.Ready(c.id, uint32(c.id%1000)*1000, uint64(c.id))
	c.p.Update(c.id, uint32(c.id%1000)*999)
	c.id++
	next, _ := c.p.Next()
	if ok, wait := c.p.Admit(1500, c.now); !ok {
		c.now += int64(wait)
	}
	c.p.Sent(1500, c.now)
	c.p.Idle(next)
}

// TestAllocs checks that a steady state of messages coming and going,
// with new IDs, allocates nothing in Ready, Update, Next, Admit, Sent,
// Idle or Stats.
func TestAllocs(t *testing.T) {
	c := newChurner(500)
	allocs := testing.AllocsPerRun(10_000, func() {
		c.step()
		c.p.Stats()
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per round", allocs)
	}
}

func BenchmarkStep(b *testing.B) {
	c := newChurner(1000)
	b.ReportAllocs()
	for b.Loop() {
		c.step()
	}
}

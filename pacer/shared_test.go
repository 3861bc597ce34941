package pacer

import (
	"testing"
	"time"
)

// testLink is a Link shared by n Pacers, one view per sharer.
type testLink struct {
	busy    int64
	best    []uint32
	adds    int   // Add calls: writes of the shared account
	returns int   // Return calls that took time back
	added   int64 // the net time added (countingShare)
}

func newTestLink(n int) *testLink {
	l := &testLink{best: make([]uint32, n)}
	for i := range l.best {
		l.best[i] = NotWaiting
	}
	return l
}

type testShare struct {
	l *testLink
	k int
}

func (s *testShare) Busy() int64 { return s.l.busy }
func (s *testShare) Add(now, tx int64) int64 {
	s.l.adds++
	s.l.busy = max(s.l.busy, now) + tx
	return s.l.busy
}
func (s *testShare) Wait(best uint32) { s.l.best[s.k] = best }
func (s *testShare) Return(end, tx int64) {
	if s.l.busy == end {
		s.l.busy -= tx
		s.l.returns++
	}
}
func (s *testShare) Beaten(best uint32) bool { return beaten(s.l.best, s.k, best) }

// beaten is the order of Link: fewer bytes left, then the lower sharer.
func beaten(bests []uint32, k int, best uint32) bool {
	for j, o := range bests {
		if j != k && (o < best || o == best && o != NotWaiting && j < k) {
			return true
		}
	}
	return false
}

// A runResult is what sharedRun saw: the packets each pacer sent, when
// each sent its last, the most transmit time ever waiting below by the
// link's account and in the NIC's queue (the packets handed down, sent
// one after the other at the link's rate), and the writes of the
// shared account.
type runResult struct {
	sent            []int
	last            []int64
	peak, queuePeak int64
	adds            int
}

// sharedRun drives pacers that share one link of 10 Gbit/s for d: every
// 100 ns, in a fixed order (the first always first), each pumps what
// its Admit lets through, 1,500-byte packets, of the messages ready
// holds for it (bytes left, by pacer, 0 for none) and those that arrive
// (by time). Each takes slices of the link (Config.LinkSlice).
func sharedRun(ready []uint32, arrive map[int64][2]uint32, d, slice time.Duration) runResult {
	const rate, size = 10_000, 1500
	link := newTestLink(len(ready))
	ps := make([]*Pacer, len(ready))
	left := make([]uint32, len(ready))
	for i, r := range ready {
		ps[i] = New(Config{RateMbps: rate, Link: &testShare{l: link, k: i}, LinkSlice: slice})
		if r > 0 {
			ps[i].Ready(ID(i+1), r, 1)
			left[i] = r
		}
	}
	res := runResult{sent: make([]int, len(ps)), last: make([]int64, len(ps))}
	var nic int64 // when the NIC drains what was handed to it
	for now := int64(0); now < d.Nanoseconds(); now += 100 {
		if a, ok := arrive[now]; ok {
			ps[a[0]].Ready(ID(a[0]+1), a[1], 2)
			left[a[0]] = a[1]
		}
		for i, p := range ps {
			for {
				if _, ok := p.Next(); !ok {
					break
				}
				if ok, _ := p.Admit(size, now); !ok {
					break
				}
				p.Sent(size, now)
				nic = max(nic, now) + size*8000/rate
				res.sent[i]++
				res.last[i] = now
				res.peak = max(res.peak, link.busy-now)
				res.queuePeak = max(res.queuePeak, nic-now)
				if left[i] = left[i] - min(left[i], 1400); left[i] == 0 {
					p.Idle(ID(i + 1))
				} else {
					p.Update(ID(i+1), left[i])
				}
			}
		}
	}
	res.adds = link.adds
	return res
}

// linkSlices are the ways a sharer may take the link's time: a packet at a
// time, and in slices of the default size.
var linkSlices = []struct {
	name  string
	slice time.Duration
}{{"per-packet", -1}, {"slices", 0}}

// TestSharedLinkSRPT: a short message of one sharer goes ahead of a
// long one another sharer is sending, as soon as the queue below has
// room (and, with slices, the other's slice is spent), though the
// other pumps first; what waits below stays within MaxQueue and a
// packet.
func TestSharedLinkSRPT(t *testing.T) {
	const at = 200_000 // ns: the short message arrives
	for _, sl := range linkSlices {
		t.Run(sl.name, func(t *testing.T) {
			r := sharedRun([]uint32{1 << 30, 0}, map[int64][2]uint32{at: {1, 14_000}}, time.Millisecond, sl.slice)
			// Ten packets: the queue below (20 µs) drains 1.2 µs a packet
			// before the first, then one more packet time each.
			if took := time.Duration(r.last[1] - at); r.sent[1] != 10 || took > DefaultMaxQueue+12*1200*time.Nanosecond {
				t.Errorf("the short message sent %d packets, the last %v after it arrived", r.sent[1], took)
			}
			if max := DefaultMaxQueue.Nanoseconds() + 1200; r.peak > max || r.queuePeak > max {
				t.Errorf("%v waited below by the account, %v in the NIC: more than MaxQueue and a packet",
					time.Duration(r.peak), time.Duration(r.queuePeak))
			}
			if full := int(time.Millisecond / (1200 * time.Nanosecond)); r.sent[0]+r.sent[1] < full*95/100 {
				t.Errorf("the link carried %d packets of %d", r.sent[0]+r.sent[1], full)
			}
		})
	}
}

// TestSharedLinkSlices: sharers taking slices write the shared account
// once a slice (5 µs: four packets here), not once a packet.
func TestSharedLinkSlices(t *testing.T) {
	for _, sl := range linkSlices {
		t.Run(sl.name, func(t *testing.T) {
			r := sharedRun([]uint32{1 << 30, 1 << 30, 0}, map[int64][2]uint32{300_000: {2, 50_000}}, time.Millisecond, sl.slice)
			packets := r.sent[0] + r.sent[1] + r.sent[2]
			t.Logf("%d packets, %d writes of the account", packets, r.adds)
			want := packets // a write a packet
			if sl.slice == 0 {
				want = packets / 3
			}
			if r.adds > want || sl.slice < 0 && r.adds != packets {
				t.Errorf("%d packets wrote the shared account %d times, want at most %d", packets, r.adds, want)
			}
			if full := int(time.Millisecond / (1200 * time.Nanosecond)); packets < full*98/100 {
				t.Errorf("the link carried %d packets of %d", packets, full)
			}
		})
	}
}

// TestSharedLinkLapse: a slice not spent by the time the link would
// have drained it lapses: the Pacer goes to the shared account again,
// and a slice counts against what waits below.
func TestSharedLinkLapse(t *testing.T) {
	link := newTestLink(2)
	a := New(Config{RateMbps: 10_000, Link: &testShare{l: link, k: 0}})
	a.Ready(1, 1<<20, 1)
	a.Next()
	if ok, _ := a.Admit(1500, 0); !ok {
		t.Fatal("refused on an idle link")
	}
	a.Sent(1500, 0)
	if link.adds != 1 || link.busy != 5000 {
		t.Fatalf("first packet: %d writes, link busy until %d ns; want one slice of 5 µs", link.adds, link.busy)
	}
	for _, now := range []int64{100, 4900} {
		if ok, _ := a.Admit(1500, now); !ok || a.Outstanding(now) != time.Duration(5000-now) {
			t.Fatalf("at %d ns: admitted %v, outstanding %v", now, ok, a.Outstanding(now))
		}
		a.Sent(1500, now)
	}
	if link.adds != 1 {
		t.Fatalf("three packets in a slice wrote the account %d times", link.adds)
	}
	// The slice's fourth packet would go after the link drained it.
	if ok, _ := a.Admit(1000, 5000); !ok || link.adds != 2 || link.busy != 10_000 {
		t.Fatalf("after the slice: admitted %v, %d writes, link busy until %d ns", ok, link.adds, link.busy)
	}
}

// TestSharedLinkNoStarvation: two sharers with equally long messages,
// the lower-numbered one winning every tie: the other still sends a
// packet about every MaxQueue (and, with slices, a slice).
func TestSharedLinkNoStarvation(t *testing.T) {
	const d = 2 * time.Millisecond
	for _, sl := range linkSlices {
		t.Run(sl.name, func(t *testing.T) {
			r := sharedRun([]uint32{1 << 30, 1 << 30}, nil, d, sl.slice)
			floor := int(d / (DefaultMaxQueue + DefaultMaxQueue/4 + 2400*time.Nanosecond))
			t.Logf("sent %v", r.sent)
			if r.sent[1] < floor {
				t.Errorf("the beaten sharer sent %d packets in %v, fewer than one per MaxQueue (%d)", r.sent[1], d, floor)
			}
		})
	}
}

// TestSharedLinkAlone: a Pacer whose sharers have nothing to send uses
// the whole link and the whole MaxQueue; one that waited and ran out of
// packets stops holding the others back.
func TestSharedLinkAlone(t *testing.T) {
	const d = time.Millisecond
	for _, sl := range linkSlices {
		r := sharedRun([]uint32{0, 1 << 30, 0}, nil, d, sl.slice)
		full := int(d.Nanoseconds() / 1200)
		if r.sent[1] < full*95/100 || r.peak < DefaultMaxQueue.Nanoseconds()-1200 {
			t.Errorf("%s: alone on the link: sent %d of %d, at most %v below", sl.name, r.sent[1], full, time.Duration(r.peak))
		}
	}
	link := newTestLink(2)
	a, b := New(Config{RateMbps: 10_000, Link: &testShare{l: link, k: 0}}), New(Config{RateMbps: 10_000, Link: &testShare{l: link, k: 1}})
	a.Ready(1, 1<<30, 1)
	b.Ready(2, 1500, 1)
	for a.Next(); ; a.Sent(1500, 0) { // a fills the link
		if ok, _ := a.Admit(1500, 0); !ok {
			break
		}
	}
	if ok, _ := b.Admit(1500, 0); ok || link.best[1] != 1500 {
		t.Fatalf("b admitted onto a full link, or not waiting (%d)", link.best[1])
	}
	b.Idle(2)
	if _, ok := b.Next(); ok || link.best[1] != NotWaiting {
		t.Fatalf("b, with nothing left to send, still waits (%d)", link.best[1])
	}
}

// TestSharedLinkSliceSize: a slice is as long as the best message needs
// (at least its packet), not as what the whole queue holds: a short
// message that waited for room for a long one's slice lost its place
// to the other sharers' short messages (in the simulator, 16 shards, a
// p99 slowdown of 40 against 5). A sharer owed a packet takes that
// packet only.
func TestSharedLinkSliceSize(t *testing.T) {
	link := newTestLink(2)
	p := New(Config{RateMbps: 10_000, Link: &testShare{l: link, k: 0}})
	p.Ready(1, 1<<20, 1)
	p.Ready(2, 1000, 2)
	if id, _ := p.Next(); id != 2 {
		t.Fatalf("Next = %d, want the short message", id)
	}
	if ok, _ := p.Admit(1100, 0); !ok || link.busy != 880 {
		t.Fatalf("the short message's packet: admitted %v, link busy until %d ns, want its 880", ok, link.busy)
	}
	p.Sent(1100, 0)
	p.Idle(2)
	p.Next()
	if ok, _ := p.Admit(1500, 0); !ok || link.busy != 880+5000 {
		t.Fatalf("the long message: admitted %v, link busy until %d ns, want a slice more", ok, link.busy)
	}

	// Owed: refused for MaxQueue without a break, a packet's room will do.
	q := New(Config{RateMbps: 10_000, Link: &testShare{l: link, k: 1}})
	q.Ready(1, 1<<20, 1)
	q.Next()
	link.busy = 30_000 // others keep the link full
	if ok, _ := q.Admit(1500, 0); ok {
		t.Fatal("admitted onto a full link")
	}
	link.busy = 20_000 + 18_800 // MaxQueue later: room for one packet, not a slice
	if ok, _ := q.Admit(1500, 20_000); !ok || link.busy != 40_000 {
		t.Fatalf("owed: admitted %v, link busy until %d ns, want a packet more", ok, link.busy)
	}
}

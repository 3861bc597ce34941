package pacer

import (
	"testing"
	"time"
)

// testLink is a Link shared by n Pacers, one view per sharer.
type testLink struct {
	busy int64
	best []uint32
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

func (s *testShare) Busy() int64             { return s.l.busy }
func (s *testShare) Add(now, tx int64)       { s.l.busy = max(s.l.busy, now) + tx }
func (s *testShare) Wait(best uint32)        { s.l.best[s.k] = best }
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

// sharedRun drives pacers that share one link of 10 Gbit/s for d: every
// 100 ns, in a fixed order (the first always first), each pumps what
// its Admit lets through, 1,500-byte packets, of the messages ready
// holds for it (bytes left, by pacer, 0 for none) and those that arrive
// (by time). It returns the packets each sent, when each sent its last,
// and the most transmit time ever waiting below.
func sharedRun(ready []uint32, arrive map[int64][2]uint32, d time.Duration) (sent []int, last []int64, peak int64) {
	const rate, size = 10_000, 1500
	link := newTestLink(len(ready))
	ps := make([]*Pacer, len(ready))
	left := make([]uint32, len(ready))
	for i, r := range ready {
		ps[i] = New(Config{RateMbps: rate, Link: &testShare{l: link, k: i}})
		if r > 0 {
			ps[i].Ready(ID(i+1), r, 1)
			left[i] = r
		}
	}
	sent, last = make([]int, len(ps)), make([]int64, len(ps))
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
				sent[i]++
				last[i] = now
				peak = max(peak, link.busy-now)
				if left[i] = left[i] - min(left[i], 1400); left[i] == 0 {
					p.Idle(ID(i + 1))
				} else {
					p.Update(ID(i+1), left[i])
				}
			}
		}
	}
	return sent, last, peak
}

// TestSharedLinkSRPT: a short message of one sharer goes ahead of a
// long one another sharer is sending, as soon as the queue below has
// room, though the other pumps first; what waits below stays within
// MaxQueue and a packet.
func TestSharedLinkSRPT(t *testing.T) {
	const at = 200_000 // ns: the short message arrives
	sent, last, peak := sharedRun([]uint32{1 << 30, 0}, map[int64][2]uint32{at: {1, 14_000}}, time.Millisecond)
	// Ten packets: the queue below (20 µs) drains 1.2 µs a packet
	// before the first, then one more packet time each.
	if took := time.Duration(last[1] - at); sent[1] != 10 || took > DefaultMaxQueue+12*1200*time.Nanosecond {
		t.Errorf("the short message sent %d packets, the last %v after it arrived", sent[1], took)
	}
	if max := DefaultMaxQueue.Nanoseconds() + 1200; peak > max {
		t.Errorf("%v waited below, more than MaxQueue and a packet", time.Duration(peak))
	}
	if full := int(time.Millisecond / (1200 * time.Nanosecond)); sent[0]+sent[1] < full*95/100 {
		t.Errorf("the link carried %d packets of %d", sent[0]+sent[1], full)
	}
}

// TestSharedLinkNoStarvation: two sharers with equally long messages,
// the lower-numbered one winning every tie: the other still sends a
// packet about every MaxQueue.
func TestSharedLinkNoStarvation(t *testing.T) {
	const d = 2 * time.Millisecond
	sent, _, _ := sharedRun([]uint32{1 << 30, 1 << 30}, nil, d)
	floor := int(d / (DefaultMaxQueue + 2400*time.Nanosecond))
	t.Logf("sent %v", sent)
	if sent[1] < floor {
		t.Errorf("the beaten sharer sent %d packets in %v, fewer than one per MaxQueue (%d)", sent[1], d, floor)
	}
}

// TestSharedLinkAlone: a Pacer whose sharers have nothing to send uses
// the whole link and the whole MaxQueue; one that waited and ran out of
// packets stops holding the others back.
func TestSharedLinkAlone(t *testing.T) {
	const d = time.Millisecond
	sent, _, peak := sharedRun([]uint32{0, 1 << 30, 0}, nil, d)
	full := int(d.Nanoseconds() / 1200)
	if sent[1] < full*95/100 || peak < DefaultMaxQueue.Nanoseconds()-1200 {
		t.Errorf("alone on the link: sent %d of %d, at most %v below", sent[1], full, time.Duration(peak))
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

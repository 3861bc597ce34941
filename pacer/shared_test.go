package pacer

import (
	"testing"
	"time"
)

// testLink is a Link shared by n Pacers, one view per sharer.
type testLink struct {
	busy    int64
	waiting int
	n       int
}

type testShare struct {
	l       *testLink
	waiting bool
}

func (s *testShare) Busy() int64 { return s.l.busy }

func (s *testShare) Add(now, tx int64) int64 {
	s.l.busy = max(s.l.busy, now) + tx
	return s.l.busy
}

func (s *testShare) Wait(w bool) {
	if s.waiting != w {
		s.waiting = w
		if w {
			s.l.waiting++
		} else {
			s.l.waiting--
		}
	}
}

func (s *testShare) Contended() bool {
	others := s.l.waiting
	if s.waiting {
		others--
	}
	return others > 0
}

func (s *testShare) Sharers() int { return s.l.n }

// sharedRun drives pacers that share one link of 10 Gbit/s for d: every
// 100 ns, in a fixed order (the first always first, which without the
// fair share starved the others), each pumps what its Admit lets
// through, 1,500-byte packets. backlog says which have a message to
// send. It returns the packets each sent and the most transmit time
// ever waiting below.
func sharedRun(t *testing.T, backlog []bool, d time.Duration) (sent []int, peak int64) {
	t.Helper()
	const rate, size = 10_000, 1500
	link := &testLink{n: len(backlog)}
	ps := make([]*Pacer, len(backlog))
	for i, b := range backlog {
		ps[i] = New(Config{RateMbps: rate, Link: &testShare{l: link}})
		if b {
			ps[i].Ready(1, 1<<30, 1)
		}
	}
	sent = make([]int, len(ps))
	for now := int64(0); now < d.Nanoseconds(); now += 100 {
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
				peak = max(peak, link.busy-now)
			}
		}
	}
	return sent, peak
}

// TestSharedLinkFair: two Pacers that both have packets to send share a
// link about evenly, and keep what waits below within one MaxQueue (and
// a packet); the link stays busy.
func TestSharedLinkFair(t *testing.T) {
	const d = 2 * time.Millisecond
	sent, peak := sharedRun(t, []bool{true, true}, d)
	full := int(d.Nanoseconds() / 1200) // 1,500 bytes at 10 Gbit/s: 1.2 µs
	t.Logf("sent %v of %d that fit, peak %v below", sent, full, time.Duration(peak))
	if sent[0]+sent[1] < full*95/100 {
		t.Errorf("the link carried %d packets of %d", sent[0]+sent[1], full)
	}
	if sent[0] < full*40/100 || sent[1] < full*40/100 {
		t.Errorf("sharers sent %v of %d: not about even", sent, full)
	}
	if max := DefaultMaxQueue.Nanoseconds() + 1200; peak > max {
		t.Errorf("%v waited below, more than MaxQueue and a packet", time.Duration(peak))
	}
}

// TestSharedLinkAlone: a Pacer whose sharers have nothing to send uses
// the whole link and the whole MaxQueue, and one that waited and ran out
// of packets stops holding the others to their share.
func TestSharedLinkAlone(t *testing.T) {
	const d = time.Millisecond
	sent, peak := sharedRun(t, []bool{false, true, false}, d)
	full := int(d.Nanoseconds() / 1200)
	if sent[1] < full*95/100 || peak < DefaultMaxQueue.Nanoseconds()-1200 {
		t.Errorf("alone on the link: sent %d of %d, at most %v below", sent[1], full, time.Duration(peak))
	}
	link := &testLink{n: 2}
	a, b := New(Config{RateMbps: 10_000, Link: &testShare{l: link}}), New(Config{RateMbps: 10_000, Link: &testShare{l: link}})
	a.Ready(1, 1<<30, 1)
	b.Ready(2, 1500, 1)
	for a.Next(); ; a.Sent(1500, 0) { // a fills the link
		if ok, _ := a.Admit(1500, 0); !ok {
			break
		}
	}
	if ok, _ := b.Admit(1500, 0); ok {
		t.Fatal("b admitted onto a full link")
	}
	if link.waiting != 2 {
		t.Fatalf("%d sharers waiting, want both", link.waiting)
	}
	b.Idle(2)
	if _, ok := b.Next(); ok || link.waiting != 1 {
		t.Fatalf("b, with nothing left to send, still counts as waiting (%d waiting)", link.waiting)
	}
}

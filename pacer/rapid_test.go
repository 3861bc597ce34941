package pacer

import (
	"testing"
	"time"

	"pgregory.net/rapid"
)

// model is a plain re-statement of the queue and the FIFO share rule.
type model struct {
	msgs    map[ID]entry
	fifo    int64 // per mille in effect
	pending pick
	c, f    int64 // contested bytes, and those that went to the oldest
	maxPkt  int64
	queued  uint64
}

// heads returns the message with the fewest bytes left and the oldest.
func (m *model) heads() (head, old ID) {
	first := true
	var h, o entry
	for _, e := range m.msgs {
		if first || e.remaining < h.remaining || e.remaining == h.remaining && (e.seq < h.seq || e.seq == h.seq && e.id < h.id) {
			h = e
		}
		if first || e.seq < o.seq || e.seq == o.seq && e.id < o.id {
			o = e
		}
		first = false
	}
	return h.id, o.id
}

// next returns what Next must answer, and records the pick.
func (m *model) next() (ID, bool) {
	if len(m.msgs) == 0 {
		m.pending = pickNone
		return 0, false
	}
	head, old := m.heads()
	switch {
	case head == old:
		m.pending = pickUncontested
	case m.fifo > 0 && (1000*(m.f+m.maxPkt) < m.fifo*m.c || m.fifo == 1000):
		m.pending = pickFIFO
		return old, true
	default:
		m.pending = pickSRPT
	}
	return head, true
}

// sent charges a packet to the pending pick.
func (m *model) sent(n int64) {
	if m.pending == pickSRPT || m.pending == pickFIFO {
		m.c += n
		m.maxPkt = max(m.maxPkt, n)
	}
	if m.pending == pickFIFO {
		m.f += n
	}
	m.pending = pickNone
}

// TestRapidQueue drives a Pacer and the model with random Ready, Update,
// Idle, Next and Sent calls, checking every answer of Next, the counters,
// and that the oldest message's bytes stay within about a packet of the
// share: -(1000+FIFOPerMille)*max <= 1000*F - FIFOPerMille*C <=
// (1000-FIFOPerMille)*max.
func TestRapidQueue(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := New(Config{FIFOPerMille: rapid.SampledFrom([]int{-1, 0, 1, 50, 500, 999, 1000}).Draw(t, "fifo")})
		m := &model{msgs: map[ID]entry{}, fifo: int64(p.Config().FIFOPerMille)}
		maxID := rapid.Uint64Range(1, 60).Draw(t, "ids")
		maxRem := rapid.SampledFrom([]uint32{3, 100, 1<<32 - 1}).Draw(t, "remaining")
		for range rapid.IntRange(1, 400).Draw(t, "ops") {
			id := ID(rapid.Uint64Range(0, maxID).Draw(t, "id"))
			switch op := rapid.IntRange(0, 5).Draw(t, "op"); op {
			case 0, 1:
				rem, seq := rapid.Uint32Range(0, maxRem).Draw(t, "rem"), rapid.Uint64Range(0, 20).Draw(t, "seq")
				p.Ready(id, rem, seq)
				m.queued = m.queued - uint64(m.msgs[id].remaining) + uint64(rem)
				m.msgs[id] = entry{id: id, remaining: rem, seq: seq}
			case 2:
				rem := rapid.Uint32Range(0, maxRem).Draw(t, "rem")
				p.Update(id, rem)
				if e, ok := m.msgs[id]; ok {
					m.queued = m.queued - uint64(e.remaining) + uint64(rem)
					e.remaining = rem
					m.msgs[id] = e
				}
			case 3:
				p.Idle(id)
				m.queued -= uint64(m.msgs[id].remaining)
				delete(m.msgs, id)
			case 4, 5:
				got, ok := p.Next()
				want, wantOK := m.next()
				if got != want || ok != wantOK {
					t.Fatalf("Next = %d, %v; want %d, %v", got, ok, want, wantOK)
				}
				if op == 5 && rapid.Bool().Draw(t, "admit refused") {
					continue // the pick is not sent
				}
				n := rapid.IntRange(1, 9000).Draw(t, "bytes")
				p.Sent(n, 0)
				m.sent(int64(n))
			}
			if s := p.Stats(); p.Len() != len(m.msgs) || s.QueuedBytes != m.queued {
				t.Fatalf("Len %d, %d bytes; want %d, %d", p.Len(), s.QueuedBytes, len(m.msgs), m.queued)
			}
			if d := 1000*m.f - m.fifo*m.c; d < -(1000+m.fifo)*m.maxPkt || d > (1000-m.fifo)*m.maxPkt {
				t.Fatalf("oldest got %d of %d contested bytes: off the %d per mille share by more than a packet of %d",
					m.f, m.c, m.fifo, m.maxPkt)
			}
		}
	})
}

// TestRapidRate hands random packets at random times to Admit and, when
// admitted, to Sent, and checks the rate bound: the outstanding time never
// exceeds MaxQueue, or one packet's transmit time for a longer packet;
// whenever Admit says wait, it says yes after exactly that long and not a
// nanosecond earlier; and the packets admitted since any moment a take no
// longer to transmit than the time from a to the end plus what is still
// outstanding then, so never more than MaxQueue (or a packet) ahead of
// the rate.
func TestRapidRate(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rate := rapid.IntRange(1, 100_000).Draw(t, "Mbps")
		maxQueue := rapid.Int64Range(1, 100_000).Draw(t, "MaxQueue")
		p := New(Config{RateMbps: rate, MaxQueue: time.Duration(maxQueue)})
		now := rapid.Int64Range(0, 1<<50).Draw(t, "start")
		type admitted struct{ at, units int64 }
		var log []admitted
		var bound int64 // max(MaxQueue, the longest admitted packet), ns
		for range rapid.IntRange(1, 200).Draw(t, "packets") {
			now += rapid.Int64Range(0, 30_000).Draw(t, "gap")
			n := rapid.IntRange(0, 65_000).Draw(t, "bytes")
			tx := (int64(n)*8000 + int64(rate) - 1) / int64(rate)
			ok, wait := p.Admit(n, now)
			if !ok {
				if wait <= 0 {
					t.Fatalf("refused with wait %v", wait)
				}
				if ok, _ := p.Admit(n, now+int64(wait)-1); ok {
					t.Fatalf("admitted 1 ns before the wait of %v", wait)
				}
				if ok, _ := p.Admit(n, now+int64(wait)); !ok {
					t.Fatalf("refused after the wait of %v", wait)
				}
				if rapid.Bool().Draw(t, "sleep") {
					now += int64(wait)
					ok = true
				}
			}
			if !ok {
				continue
			}
			p.Sent(n, now)
			log = append(log, admitted{now, int64(n) * 8000})
			bound = max(bound, maxQueue, tx)
			if out := p.Outstanding(now).Nanoseconds(); out > bound {
				t.Fatalf("%d ns outstanding after a %d-byte packet, bound %d", out, n, bound)
			}
		}
		end := now + p.Outstanding(now).Nanoseconds()
		var units int64
		for i := len(log) - 1; i >= 0; i-- {
			units += log[i].units
			if units > (end-log[i].at)*int64(rate) {
				t.Fatalf("%d bytes admitted from %d ns take longer than the %d ns until the link is idle",
					units/8000, log[i].at, end-log[i].at)
			}
		}
	})
}

// TestRapidSharedLink drives 1-4 Pacers sharing one Link with random
// messages, packets and times, each taking the link's time in slices of
// a random size or a packet at a time, and checks what sharing promises:
// no packet leaves without its time on the link's account (the time
// added, less what was given back, covers every packet sent), and the
// NIC's queue (the packets handed down, sent one after the other at the
// rate) stays within MaxQueue and two packets: one longer than the room
// left below, and one sent from the end of a slice just before the link
// would have drained it. (A bound of one packet failed once in some
// 45,000 runs, by 3 ns.)
func TestRapidSharedLink(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rate := rapid.IntRange(1_000, 100_000).Draw(t, "Mbps")
		maxQueue := time.Duration(rapid.Int64Range(1_000, 50_000).Draw(t, "MaxQueue"))
		slice := time.Duration(rapid.Int64Range(-1, int64(maxQueue)).Draw(t, "LinkSlice"))
		n := rapid.IntRange(1, 4).Draw(t, "sharers")
		link := newTestLink(n)
		ps := make([]*Pacer, n)
		for k := range ps {
			ps[k] = New(Config{RateMbps: rate, MaxQueue: maxQueue, LinkSlice: slice, Link: &countingShare{testShare{l: link, k: k}}})
		}
		txOf := func(b int) int64 { return (int64(b)*8000 + int64(rate) - 1) / int64(rate) }
		var now, nic, sent, maxTx int64
		for range rapid.IntRange(1, 300).Draw(t, "steps") {
			now += rapid.Int64Range(0, 5_000).Draw(t, "gap")
			k := rapid.IntRange(0, n-1).Draw(t, "sharer")
			p := ps[k]
			id := ID(rapid.Uint64Range(1, 3).Draw(t, "id"))
			switch rapid.IntRange(0, 4).Draw(t, "op") {
			case 0:
				p.Ready(id, rapid.Uint32Range(1, 1<<20).Draw(t, "remaining"), rapid.Uint64Range(0, 9).Draw(t, "seq"))
			case 1:
				p.Idle(id)
			default:
				if _, ok := p.Next(); !ok {
					continue
				}
				b := rapid.IntRange(64, 9000).Draw(t, "bytes")
				if ok, _ := p.Admit(b, now); !ok {
					continue
				}
				p.Sent(b, now)
				tx := txOf(b)
				nic = max(nic, now) + tx
				sent += tx
				maxTx = max(maxTx, tx)
			}
			if sent > link.added {
				t.Fatalf("%d ns of packets sent, %d ns on the link's account", sent, link.added)
			}
			if q, bound := nic-now, maxQueue.Nanoseconds()+2*maxTx; q > bound {
				t.Fatalf("%d ns wait in the NIC, more than MaxQueue %v and two packets of %d ns", q, maxQueue, maxTx)
			}
		}
	})
}

// countingShare keeps the net time a testShare added to its link.
type countingShare struct{ testShare }

func (s *countingShare) Add(now, tx int64) int64 { s.l.added += tx; return s.testShare.Add(now, tx) }

func (s *countingShare) Return(end, tx int64) {
	if s.l.busy == end {
		s.l.added -= tx
	}
	s.testShare.Return(end, tx)
}

package grant_test

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/homa-go/homa/grant"
)

// loaded is a scheduler with a constant number of long messages whose
// senders send what they are granted; a message that completes is
// replaced by a new one from the same peer.
type loaded struct {
	s       *grant.Scheduler
	msgs    map[grant.ID]benchMsg
	pending []grant.ID // messages with granted bytes not yet delivered
	grants  []grant.Grant
	nextID  grant.ID
	done    int
}

type benchMsg struct {
	peer             netip.Addr
	length, received uint32
	pending          bool // in loaded.pending
}

// newLoaded returns a loaded with n messages, from n distinct peers or all
// from one, after one Decide.
func newLoaded(n int, onePeer bool) *loaded {
	l := &loaded{
		s:       grant.New(grant.Config{}),
		msgs:    make(map[grant.ID]benchMsg, n),
		pending: make([]grant.ID, 0, n),
		grants:  make([]grant.Grant, 0, 64),
	}
	for i := range n {
		p := host(i)
		if onePeer {
			p = host(0)
		}
		l.add(p)
	}
	l.decide()
	return l
}

// add registers one more message from peer, its unscheduled bytes in.
func (l *loaded) add(peer netip.Addr) {
	l.nextID++
	// 0.5 to 2.4 MB, spread so that ranks keep changing as data arrives.
	m := benchMsg{peer: peer, length: 500_000 + uint32(l.nextID%97)*20_000, received: 40_000}
	l.s.Add(l.nextID, peer, m.length, 40_000, m.received)
	l.msgs[l.nextID] = m
}

// decide runs Decide and notes which senders now have bytes to send.
func (l *loaded) decide() {
	l.grants = l.s.Decide(l.grants[:0])
	for _, g := range l.grants {
		if m := l.msgs[g.ID]; !m.pending {
			m.pending = true
			l.msgs[g.ID] = m
			l.pending = append(l.pending, g.ID)
		}
	}
}

// step delivers one 1,500-byte packet of every message with granted bytes
// outstanding, replaces the messages that complete, then runs Decide: what
// the engine does after a batch of packets.
func (l *loaded) step() {
	for i := 0; i < len(l.pending); {
		id := l.pending[i]
		m := l.msgs[id]
		m.received += min(1_500, l.s.Granted(id)-m.received)
		l.s.Received(id, m.received)
		switch {
		case m.received == m.length:
			l.s.Remove(id)
			delete(l.msgs, id)
			l.done++
			l.add(m.peer)
		case m.received == l.s.Granted(id):
			m.pending = false
			l.msgs[id] = m
		default:
			l.msgs[id] = m
			i++
			continue
		}
		last := len(l.pending) - 1
		l.pending[i] = l.pending[last]
		l.pending = l.pending[:last]
	}
	l.decide()
}

func TestAllocsSteadyState(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("coverage instrumentation allocates")
	}
	l := newLoaded(100, false)
	for range 3000 { // let the FIFO share fire and messages complete
		l.step()
	}
	if st := l.s.Stats(); st.FIFOGrants < 2 || st.Granting != 8 || l.done == 0 {
		t.Fatalf("warm-up did not exercise the policy: %+v, %d done", st, l.done)
	}
	done := l.done
	if a := testing.AllocsPerRun(1000, l.step); a != 0 {
		t.Errorf("Received+Remove+Add+Decide: %v allocations per run, want 0", a)
	}
	if l.done == done {
		t.Errorf("no message completed while measuring")
	}
	if a := testing.AllocsPerRun(1000, func() { l.grants = l.s.Decide(l.grants[:0]) }); a != 0 {
		t.Errorf("idle Decide: %v allocations per run, want 0", a)
	}
}

// BenchmarkDecide measures one engine batch: a packet delivered to every
// granted message, then Decide.
func BenchmarkDecide(b *testing.B) {
	run := func(n int, onePeer bool) func(*testing.B) {
		return func(b *testing.B) {
			l := newLoaded(n, onePeer)
			b.ReportAllocs()
			for b.Loop() {
				l.step()
			}
			st := l.s.Stats()
			b.ReportMetric(float64(st.Grants)/float64(b.N), "grants/op")
			b.ReportMetric(float64(l.done)/float64(b.N), "completions/op")
		}
	}
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("active=%d", n), run(n, false))
	}
	// Every message from one host: Decide walks past all of them.
	b.Run("active=100/one-peer", run(100, true))
	b.Run("active=100/idle", func(b *testing.B) {
		l := newLoaded(100, false)
		b.ReportAllocs()
		for b.Loop() {
			l.grants = l.s.Decide(l.grants[:0])
		}
	})
}

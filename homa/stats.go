package homa

import (
	"io"
	"sync/atomic"

	"github.com/homa-go/homa/contract"
	"github.com/homa-go/homa/homa/core"
	"github.com/homa-go/homa/homa/netio"
	"github.com/homa-go/homa/homa/wire"
)

// ioCounters are the shell's statistics: packets the Conn accepted, by
// type and priority, and I/O errors. They are atomics, bumped outside the
// endpoint's mutex.
type ioCounters struct {
	txPackets   [core.NumTypes]atomic.Uint64
	txBytes     [core.NumTypes]atomic.Uint64
	txPriority  [wire.NumPriorities]atomic.Uint64
	readErrors  atomic.Uint64
	writeErrors atomic.Uint64
	writes      atomic.Uint64 // WriteBatch calls
	wakeups     atomic.Uint64 // the timer fired
	vain        atomic.Uint64 // the timer fired with nothing due
	parks       atomic.Uint64 // a reader parked on the socket
	steals      atomic.Uint64 // a goroutine in Recv woke the background reader for rxTok
	handoffs    atomic.Uint64 // a message went to a goroutine other than its reader
	timerArms   atomic.Uint64 // a runtime timer set: the core's, or the grace
}

// countTx counts a packet to be written (k = 1), or takes back one the
// Conn refused (k = -1).
func (c *ioCounters) countTx(p *netio.Packet, k int) {
	pkt := p.Bytes()
	t, err := wire.PeekType(pkt)
	if err != nil {
		return
	}
	if i, ok := core.TypeIndex(t); ok {
		c.txPackets[i].Add(uint64(k))
		c.txBytes[i].Add(uint64(k * p.Len()))
		c.txPriority[p.Priority%wire.NumPriorities].Add(uint64(k))
	}
}

// Describe writes what the endpoint's protocol state holds for each of
// its RPCs, one line each, at most limit lines (see core.AppendDescription): for
// finding out why an RPC neither completes nor fails. It holds the
// endpoint's lock while it gathers the lines, not while w writes them.
func (e *Endpoint) Describe(w io.Writer, limit int) {
	e.mu.Lock()
	b := e.core.AppendDescription(nil, e.now(), limit)
	e.mu.Unlock()
	_, _ = w.Write(b)
}

// Stats returns a snapshot of the endpoint's counters.
func (e *Endpoint) Stats() contract.Stats {
	e.mu.Lock()
	s := e.core.Stats()
	e.mu.Unlock()
	c := &e.io
	for i := range c.txPackets {
		if v := c.txPackets[i].Load(); v > 0 {
			t := wire.TypeData + wire.Type(i)
			s.TxPackets[t] = v
			s.TxBytes[t] = c.txBytes[i].Load()
		}
	}
	for i := range c.txPriority {
		s.TxPriority[i] = c.txPriority[i].Load()
	}
	s.ReadErrors = c.readErrors.Load()
	s.TimerWakeups = c.wakeups.Load()
	s.TimerWakeupsVain = c.vain.Load()
	s.ReaderParks = c.parks.Load()
	s.ReaderSteals = c.steals.Load()
	s.Handoffs = c.handoffs.Load()
	s.TimerArms = c.timerArms.Load()
	s.WriteErrors = c.writeErrors.Load()
	s.Writes = c.writes.Load()
	if sc, ok := e.conn.(netio.StatsConn); ok {
		cs := sc.Stats()
		if cs.Discarded > 0 {
			s.Drops[contract.DropSocket] = cs.Discarded
		}
		if cs.QueueDrops > 0 {
			s.Drops[contract.DropQueue] = cs.QueueDrops
		}
	}
	return s
}

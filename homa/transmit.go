package homa

import (
	"github.com/homa-go/homa/homa/core"
	"github.com/homa-go/homa/homa/netio"
)

// txBatch collects the packets a core call produced, to be written after
// the endpoint's mutex is released. Packet buffers come from the buffer
// pool and go back after the write; payloads point into messages, which
// the holds keep alive until then.
type txBatch struct {
	pkts  []netio.Packet
	holds []*core.Hold
	rearm bool // settle noted a timer deadline: flush resets the timer
	grace bool // settle found the socket left alone: flush arms the grace
}

// take moves out's packets and holds into b, keeping their order: the
// core puts each call's packets in SRPT order (control first, then DATA
// of the message with the fewest bytes to go first), and flush writes
// them so.
func (b *txBatch) take(out *core.Output) {
	for _, p := range out.Packets {
		b.pkts = append(b.pkts, netio.Packet{Buf: p.Buf, N: len(p.Buf), Payload: p.Payload, Addr: p.Addr, Priority: p.Priority})
	}
	b.holds = append(b.holds, out.Holds...)
}

// release recycles the batch's packet buffers and lets go of its holds,
// emptying it.
func (b *txBatch) release() {
	for i := range b.pkts {
		putBuf(b.pkts[i].Buf)
		b.pkts[i] = netio.Packet{}
	}
	b.pkts = b.pkts[:0]
	for i, h := range b.holds {
		h.Release()
		b.holds[i] = nil
	}
	b.holds = b.holds[:0]
}

// getBatch and putBatch recycle batches.
func (e *Endpoint) getBatch() *txBatch {
	if b := e.batches.get(); b != nil {
		return b
	}
	return &txBatch{}
}

func (e *Endpoint) putBatch(b *txBatch) { e.batches.put(b) }

// sendBatch writes a batch from getBatch and returns it to the pool.
func (e *Endpoint) sendBatch(b *txBatch) {
	e.flush(b)
	e.putBatch(b)
}

// flush writes the batch, recycles its buffers and empties it. Packets
// the Conn refuses are counted and dropped: loss recovery resends what
// matters.
func (e *Endpoint) flush(b *txBatch) {
	pkts := b.pkts
	// Counted before they are written, so that a packet a peer has
	// received is counted here already; one the Conn refuses is taken
	// back.
	for i := range pkts {
		e.io.countTx(&pkts[i], 1)
	}
	for len(pkts) > 0 {
		n, err := e.conn.WriteBatch(pkts)
		e.io.writes.Add(1)
		if err != nil {
			e.io.writeErrors.Add(1)
			if n < len(pkts) {
				e.io.countTx(&pkts[n], -1)
			}
			n++ // skip the packet that failed
		}
		pkts = pkts[min(n, len(pkts)):]
	}
	b.release()
	if b.rearm {
		b.rearm = false
		e.applyTimer()
	}
	if b.grace {
		b.grace = false
		e.graceAfterFlush()
	}
}

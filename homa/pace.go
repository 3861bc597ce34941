package homa

import (
	"time"

	"github.com/homa-go/homa/homa/wire"
)

// pace puts r's outgoing message in the pacer's queue: it has granted
// bytes to send. Its age (for the FIFO share) is its handle's order.
func (e *Endpoint) pace(r *rpc) {
	if r.pid == 0 {
		e.lastPID++
		r.pid = e.lastPID
		e.pacing[r.pid] = r
	}
	e.pacer.Ready(r.pid, r.out.length-r.out.next, uint64(r.pid))
}

// unpace takes r's outgoing message out of the pacer.
func (e *Endpoint) unpace(r *rpc) {
	if r.pid == 0 {
		return
	}
	e.pacer.Idle(r.pid)
	delete(e.pacing, r.pid)
	r.pid = 0
}

// ipOverhead is the IP header in front of every packet, counted in the
// pacer's budget like the bytes on the wire.
func (e *Endpoint) ipOverhead() int {
	if e.is4 {
		return 20
	}
	return 40
}

// account charges a packet that bypasses the pacer's queue (control,
// retransmission) to its budget.
func (e *Endpoint) account(n int) {
	if e.pacer != nil {
		e.pacer.Sent(n+e.ipOverhead(), time.Now().UnixNano())
	}
}

// pump sends DATA packets from the pacer's queue, one at a time in its
// order, while its budget admits them, and returns how long until it
// admits the next (0: nothing waits).
func (e *Endpoint) pump(b *txBatch) time.Duration {
	now := time.Now().UnixNano()
	for {
		id, ok := e.pacer.Next()
		if !ok {
			return 0
		}
		r := e.pacing[id]
		m := &r.out
		n := min(uint32(r.peer.maxPayload), m.granted-m.next)
		size := int(n) + wire.DataLen + e.ipOverhead()
		if ok, wait := e.pacer.Admit(size, now); !ok {
			return max(wait, time.Microsecond)
		}
		e.queueData(r, b, m.next, m.next+n, false)
		m.next += n
		e.pacer.Sent(size, now)
		if m.next < m.granted {
			e.pacer.Update(id, m.length-m.next)
		} else {
			e.pacer.Idle(id)
			e.sentAll(r)
		}
	}
}

// wakePacer makes the pacer goroutine pump and arm its timer.
func (e *Endpoint) wakePacer() {
	select {
	case e.pacerWake <- struct{}{}:
	default:
	}
}

// pacerLoop sends what the pacer's budget held back, when it allows.
func (e *Endpoint) pacerLoop() {
	defer e.wg.Done()
	t := time.NewTimer(time.Hour)
	t.Stop()
	for {
		select {
		case <-e.pacerWake:
		case <-t.C:
		case <-e.done:
			t.Stop()
			return
		}
		b := e.getBatch()
		e.mu.Lock()
		wait := time.Duration(0)
		if !e.closed {
			wait = e.pump(b)
		}
		e.mu.Unlock()
		e.sendBatch(b)
		if wait > 0 {
			t.Reset(wait)
		}
	}
}

package dcsim

// The event queue: a binary min-heap of small values ordered by time, then
// by the order they were scheduled in, so that a run is deterministic.

type evKind uint8

const (
	evPortDone evKind = iota // a port finished sending its packet
	evArrive                 // a packet's head is ready at a switch
	evDeliver                // a packet is ready for a host's transport
	evTx                     // a host's packet reaches its NIC
	evTimer                  // a host's transport timer
	evApp                    // a host's application starts a message
	evFlow                   // a baseline flow's retransmission timer
)

type event struct {
	at   int64 // ns
	seq  uint64
	kind evKind
	idx  int32 // port, node or host, by kind
	gen  uint32
	pkt  *Packet
}

type eventQueue struct {
	h   []event
	seq uint64
}

func (q *eventQueue) len() int { return len(q.h) }

func less(a, b *event) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return a.seq < b.seq
}

func (q *eventQueue) push(e event) {
	q.seq++
	e.seq = q.seq
	q.h = append(q.h, e)
	i := len(q.h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !less(&q.h[i], &q.h[p]) {
			break
		}
		q.h[i], q.h[p] = q.h[p], q.h[i]
		i = p
	}
}

func (q *eventQueue) peek() *event { return &q.h[0] }

func (q *eventQueue) pop() event {
	top := q.h[0]
	n := len(q.h) - 1
	q.h[0] = q.h[n]
	q.h[n] = event{}
	q.h = q.h[:n]
	i := 0
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && less(&q.h[r], &q.h[l]) {
			m = r
		}
		if !less(&q.h[m], &q.h[i]) {
			break
		}
		q.h[i], q.h[m] = q.h[m], q.h[i]
		i = m
	}
	return top
}

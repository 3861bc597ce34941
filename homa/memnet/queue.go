package memnet

// flightHeap orders copies in flight by due time, then scheduling order,
// except that at equal times a downlink finishes its packet first: a
// packet reaching the port at that instant (after a delay, or straight
// off an uplink) joins the queue after the link has picked its next
// packet, as one written at that instant does.
type flightHeap []*packet

func (h flightHeap) Len() int { return len(h) }
func (h flightHeap) Less(i, j int) bool {
	if !h[i].due.Equal(h[j].due) {
		return h[i].due.Before(h[j].due)
	}
	if di, dj := h[i].leavingDownlink(), h[j].leavingDownlink(); di != dj {
		return di
	}
	return h[i].seq < h[j].seq
}
func (h flightHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *flightHeap) Push(x any) {
	m := x.(*packet)
	m.idx = len(*h)
	*h = append(*h, m)
}
func (h *flightHeap) Pop() any {
	old := *h
	m := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	m.idx = -1
	return m
}

// queue is a bounded FIFO of copies: a Conn's receive queue, or one
// priority level of a downlink's queue.
type queue struct {
	buf   []*packet
	head  int
	limit int
}

func (q *queue) len() int { return len(q.buf) - q.head }

func (q *queue) push(m *packet) bool {
	if q.len() >= q.limit {
		return false
	}
	if q.head > 0 && len(q.buf) == cap(q.buf) {
		k := copy(q.buf, q.buf[q.head:])
		clear(q.buf[k:])
		q.buf, q.head = q.buf[:k], 0
	}
	q.buf = append(q.buf, m)
	return true
}

func (q *queue) pop() *packet {
	if q.head == len(q.buf) {
		return nil
	}
	m := q.buf[q.head]
	q.buf[q.head] = nil
	q.head++
	if q.head == len(q.buf) {
		q.buf, q.head = q.buf[:0], 0
	}
	return m
}

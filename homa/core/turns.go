package core

// Turns. The RESEND and NEED_ACK budgets (resendq.go, ackq.go) make an RPC
// whose control packet is due wait when its peer's or the core's budget
// for the tick is spent. It waits in its peer's queue, with no timer
// set again for it; peers with waiting RPCs wait in a list of their own;
// and one pump timer serves them in turn from the next tick.

// turns are the RPCs waiting for turns of one budget, the peers they
// wait in, and the pump that serves them.
type turns struct {
	peers list[peer]
	pump  timer
	queue func(*peer) *list[rpc] // a peer's queue of waiting RPCs
}

func newTurns(peerLinks func(*peer) *links[peer], queue func(*peer) *list[rpc]) turns {
	return turns{peers: newList(peerLinks), pump: timer{idx: -1}, queue: queue}
}

// wait queues r for its turn, and arms the pump for the next tick. It
// reports false when r waits already.
func (t *turns) wait(c *Core, r *rpc) bool {
	q := t.queue(r.peer)
	if q.Contains(r) {
		return false
	}
	q.PushBack(r)
	if !t.peers.Contains(r.peer) {
		t.peers.PushBack(r.peer)
	}
	c.timers.arm(&t.pump, c.at(c.tick+1))
	return true
}

// leave takes r out of its peer's queue, and the peer out of the
// waiting peers when that empties its queue.
func (t *turns) leave(r *rpc) {
	q := t.queue(r.peer)
	if !q.Contains(r) {
		return
	}
	q.Remove(r)
	if q.Len() == 0 {
		t.peers.Remove(r.peer)
	}
}

// again keeps the pump going while peers wait.
func (t *turns) again(c *Core) {
	if t.peers.Len() > 0 {
		c.timers.arm(&t.pump, c.at(c.tick+1))
	}
}

package homa

import (
	"net/netip"

	"github.com/homa-go/homa/contract"
)

// SendBatch is Send for several requests at once: their packets leave
// together (one system call where the Conn can), which saves a system
// call per request when many are ready at once, as when a client starts
// the next RPCs of the responses one read brought. It fills ids with the
// RPC ids in order and returns the first error; the requests before it
// were sent, none after it.
func (e *Endpoint) SendBatch(reqs []contract.BatchRequest, ids []uint64) error {
	b := e.getBatch()
	defer e.sendBatch(b)
	for i := range reqs {
		id, err := e.sendInto(b, reqs[i].Dst, reqs[i].Data, reqs[i].Cookie, false)
		if err != nil {
			return err
		}
		ids[i] = id
	}
	return nil
}

// ReplyBatch is Reply for several responses at once: their packets leave
// together, as SendBatch's. It returns the first error; every response
// is tried.
func (e *Endpoint) ReplyBatch(rs []contract.BatchResponse) error {
	b := e.getBatch()
	defer e.sendBatch(b)
	var first error
	for i := range rs {
		if err := e.replyInto(b, rs[i].Peer, rs[i].ID, rs[i].Data, false); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Batch gathers requests and responses whose packets leave together, at
// Flush: Send and Reply do their protocol work at once (the RPC exists,
// its id is known) but send nothing; Flush sends everything gathered
// since the last Flush, in one system call where the Conn can. An event
// loop that answers and starts many RPCs per turn flushes once a turn,
// as eRPC's does. Nothing is sent, and no timer set for what was
// gathered, until Flush: call it soon. A Batch is for one goroutine at a
// time.
type Batch struct {
	e *Endpoint
	b txBatch
}

// NewBatch returns an empty batch of e's.
func (e *Endpoint) NewBatch() *Batch { return &Batch{e: e} }

// Send is Endpoint.Send, its packets left for Flush.
func (b *Batch) Send(dst netip.AddrPort, data []byte, cookie uint64) (uint64, error) {
	return b.e.sendInto(&b.b, dst, data, cookie, false)
}

// Reply is Endpoint.Reply, its packets left for Flush.
func (b *Batch) Reply(peer netip.Addr, id uint64, data []byte) error {
	return b.e.replyInto(&b.b, peer, id, data, false)
}

// Flush sends what the batch gathered.
func (b *Batch) Flush() { b.e.flush(&b.b) }

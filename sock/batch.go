package sock

import (
	"fmt"
	"net/netip"

	"github.com/homa-go/homa/contract"
	"github.com/homa-go/homa/homa"
)

// BatchRequest is one request of SendBatch: Send's arguments.
type BatchRequest = contract.BatchRequest

// BatchResponse is one response of ReplyBatch: Reply's arguments.
type BatchResponse struct {
	Req  *Message // the request answered
	Data []byte
}

// SendBatch sends each request as Send does, all at once: on the
// engine their packets leave together (one system call where the
// transport allows), which saves a system call per request when many
// are ready at once, as when a client starts the next RPCs of the
// responses one Recv after another returned without waiting. It returns
// the RPC ids in order. On an error, the requests before the failed one
// were sent (their ids are set) and none after it.
func (s *Socket) SendBatch(reqs []BatchRequest) ([]uint64, error) {
	ids := make([]uint64, len(reqs))
	for i := range reqs {
		if err := checkServer(reqs[i].Dst); err != nil {
			return ids, err
		}
	}
	if b, ok := s.b.(batcher); ok {
		return ids, b.SendBatch(reqs, ids)
	}
	for i := range reqs {
		id, err := s.b.Send(reqs[i].Dst, reqs[i].Data, reqs[i].Cookie)
		if err != nil {
			return ids, err
		}
		ids[i] = id
	}
	return ids, nil
}

// ReplyBatch answers each request as Reply does, all at once (see
// SendBatch). Every response is tried; it returns the first error.
func (s *Socket) ReplyBatch(rs []BatchResponse) error {
	var first error
	note := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	b, ok := s.b.(batcher)
	var out []contract.BatchResponse
	for _, r := range rs {
		if !r.Req.IsRequest() {
			note(fmt.Errorf("%w: message %d is a response, not a request", ErrUnknownRPC, r.Req.ID))
			continue
		}
		if !ok {
			note(s.b.Reply(r.Req.Peer, r.Req.ID, r.Data))
			continue
		}
		out = append(out, contract.BatchResponse{Peer: r.Req.Peer.Addr(), ID: r.Req.ID, Data: r.Data})
	}
	if ok && len(out) > 0 {
		note(b.ReplyBatch(out))
	}
	return first
}

// Batch gathers requests and responses whose packets leave together at
// Flush (see the package doc, "Batches"): Send and Reply do their work
// at once (Send returns the RPC's id) but the engine sends nothing
// until Flush, which sends everything gathered since the last one. Call
// Flush soon: nothing gathered leaves, and no timer runs for it, before.
// On the kernel backend, and on a socket of several shards, Send and
// Reply send at once and Flush does nothing. A Batch is for one
// goroutine at a time.
type Batch struct {
	s  *Socket
	eb *homa.Batch // nil: send at once
}

// NewBatch returns an empty batch of s's.
func (s *Socket) NewBatch() *Batch {
	b := &Batch{s: s}
	if e, ok := s.b.(engine); ok {
		b.eb = e.NewBatch()
	}
	return b
}

// Send is Socket.Send, its packets left for Flush.
func (b *Batch) Send(dst netip.AddrPort, req []byte, cookie uint64) (uint64, error) {
	if b.eb == nil {
		return b.s.Send(dst, req, cookie)
	}
	if err := checkServer(dst); err != nil {
		return 0, err
	}
	return b.eb.Send(dst, req, cookie)
}

// Reply is Socket.Reply, its packets left for Flush.
func (b *Batch) Reply(req *Message, resp []byte) error {
	if b.eb == nil {
		return b.s.Reply(req, resp)
	}
	if !req.IsRequest() {
		return fmt.Errorf("%w: message %d is a response, not a request", ErrUnknownRPC, req.ID)
	}
	return b.eb.Reply(req.Peer.Addr(), req.ID, resp)
}

// Flush sends what the batch gathered.
func (b *Batch) Flush() {
	if b.eb != nil {
		b.eb.Flush()
	}
}

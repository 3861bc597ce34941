package erpc

import (
	"net/netip"
	"time"
)

// stream is the client side of a lease: what one client Rpc holds at one
// server Nexus. Its client id names the lease and the exactly-once
// requests of every session the Rpc opens to that Nexus, so a record at
// the server outlives the session its request went on. Sequence numbers
// are the stream's, and so is the ack floor.
type stream struct {
	nexus    netip.AddrPort
	id       uint64    // client id, random
	ref      *leaseRef // heartbeated by the Nexus once a connect succeeded; nil before
	nextSeq  uint64
	open     dlist[seqHold] // sequences of requests sent and not complete, and of tickets, in order
	tickets  int            // tickets among them
	sessions int            // sessions using the stream
	retired  bool           // no new sessions: its lease is, or may be, gone
}

// floor is the lowest sequence not complete at the client.
func (st *stream) floor() uint64 {
	if h, _ := st.open.front(); h != nil {
		return h.seq
	}
	return st.nextSeq
}

// streamTo returns the stream for new sessions to the Nexus at addr.
func (r *Rpc) streamTo(addr netip.AddrPort) *stream {
	if st := r.streams[addr]; st != nil {
		return st
	}
	st := &stream{nexus: addr, id: newClientID(), nextSeq: 1}
	st.open = newDlist(func(h *seqHold) *dlink[seqHold] { return &h.link })
	if r.streams == nil {
		r.streams = make(map[netip.AddrPort]*stream)
		r.allStreams = make(map[*stream]struct{})
	}
	r.streams[addr] = st
	r.allStreams[st] = struct{}{}
	return st
}

// connected records that a connect under st succeeded: from now on the
// Nexus heartbeats its lease, whose duration at the server is lease.
func (r *Rpc) connected(st *stream, lease time.Duration) {
	if st.ref == nil {
		st.ref = r.nx.register(st.nexus, st.id, lease)
	}
}

// retire keeps new sessions off st: they get a new stream, with a new
// client id.
func (r *Rpc) retire(st *stream) {
	st.retired = true
	if r.streams[st.nexus] == st {
		delete(r.streams, st.nexus)
	}
}

// leaveStream drops a session from st.
func (r *Rpc) leaveStream(st *stream) {
	st.sessions--
	r.endStreamIfIdle(st)
}

// endStreamIfIdle ends st once it has no session and no sequence open
// (no request in flight, no ticket): its lease is no longer heartbeated.
func (r *Rpc) endStreamIfIdle(st *stream) {
	if st.sessions > 0 || st.open.len() > 0 {
		return
	}
	r.retire(st)
	r.endStream(st)
}

// endStream stops heartbeating the lease of st.
func (r *Rpc) endStream(st *stream) {
	delete(r.allStreams, st)
	if st.ref != nil {
		r.nx.unregister(st.ref)
		st.ref = nil
	}
}

// touch marks the lease of st as renewed by a request sent now.
func (r *Rpc) touch(st *stream) {
	if st.ref != nil {
		if ep := r.nx.hb.epoch.Load(); st.ref.sent.Load() != ep {
			st.ref.sent.Store(ep)
		}
	}
}

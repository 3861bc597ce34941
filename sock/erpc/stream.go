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
	open     dlist[request] // exactly-once requests sent and not complete, by sequence
	sessions int            // sessions using the stream
	retired  bool           // no new sessions: its lease is, or may be, gone
}

// floor is the lowest sequence not complete at the client.
func (st *stream) floor() uint64 {
	if q, _ := st.open.front(); q != nil {
		return q.seq
	}
	return st.nextSeq
}

// streamTo returns the stream for new sessions to the Nexus at addr.
func (r *Rpc) streamTo(addr netip.AddrPort) *stream {
	if st := r.streams[addr]; st != nil {
		return st
	}
	st := &stream{nexus: addr, id: newClientID(), nextSeq: 1}
	st.open = newDlist(func(q *request) *dlink[request] { return &q.openLink })
	if r.streams == nil {
		r.streams = make(map[netip.AddrPort]*stream)
	}
	r.streams[addr] = st
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

// leaveStream drops a session from st; the stream ends with its last
// session, once no exactly-once request of it is open.
func (r *Rpc) leaveStream(st *stream) {
	st.sessions--
	if st.sessions > 0 || st.open.len() > 0 {
		return
	}
	r.retire(st)
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

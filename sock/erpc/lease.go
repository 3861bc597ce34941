package erpc

import (
	"context"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/homa-go/homa/sock"
)

// Leases. A client Rpc talks to a server Nexus under a client id, random,
// chosen by the client (a stream, see stream); every session it opens to
// that Nexus carries it, and it names the client's exactly-once requests
// there. The server holds a lease per client id: the sessions made under
// it and the exactly-once records of its requests live while the lease
// does, and go when the server has heard nothing under the lease for
// Config.LeaseTimeout.
//
// Nothing runs per session or per lease. The server's Nexus keeps an
// epoch that its goroutine advances every LeaseTimeout/4 while it holds
// leases; every request, acknowledgment or heartbeat under a lease stores
// the epoch in it (one atomic load and, at most once per epoch, a store).
// At each tick the Nexus forgets the leases not stamped for more than four
// epochs: silent for at least LeaseTimeout, at most 5/4 of it. A client
// Nexus likewise advances an epoch every quarter of the shortest lease of
// the servers it talks to; its Rpcs stamp a stream's lease reference on
// every request they send, and at each tick the Nexus sends each server
// host at most one heartbeat, naming the streams with no request in the
// epoch that ended. The reply says which leases the server no longer
// knows; a session whose requests then meet a server that forgot it fails
// them with ErrLeaseExpired.
//
// A client id is new (fresh) until a connect under it succeeds; only a
// fresh connect may create a lease. A connect under a known id whose lease
// is gone is refused with statusLeaseExpired, so a request of an expired
// lease can never be taken for a new one and run again.

// lease is the server side of a client id.
type lease struct {
	id   uint64
	host netip.Addr    // the client's host: only it renews the lease
	seen atomic.Uint32 // the epoch it was last heard in
	dead atomic.Bool   // expired: its sessions and records go
}

// touch renews l in epoch ep.
func (l *lease) touch(ep uint32) {
	if l.seen.Load() != ep {
		l.seen.Store(ep)
	}
}

// leaseEpochs is how many whole epochs (of LeaseTimeout/4) a lease may
// go unheard.
const leaseEpochs = 4

// hostCount counts things by client host, holding no entry for a host
// with none. Its owner guards it.
type hostCount map[netip.Addr]int

func (c hostCount) of(host netip.Addr) int { return c[host] }

// add counts one more thing of host; c is made if need be.
func (c *hostCount) add(host netip.Addr) {
	if *c == nil {
		*c = make(hostCount)
	}
	(*c)[host]++
}

// remove counts one thing of host fewer.
func (c hostCount) remove(host netip.Addr) {
	if c[host]--; c[host] <= 0 {
		delete(c, host)
	}
}

// leaseTable holds the leases of a server Nexus.
type leaseTable struct {
	mu     sync.Mutex
	byID   map[uint64]*lease
	byHost hostCount // how many leases each client host holds
	epoch  atomic.Uint32
	next   time.Time // the next tick; the Nexus goroutine's
}

// attach finds or makes (made true) the lease of a connect from host
// under id, within maxLeases in all and perHost for host (share says
// that the host's share refused it).
func (t *leaseTable) attach(host netip.Addr, id uint64, fresh bool, maxLeases, perHost int) (l *lease, made bool, st status, share bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ep := t.epoch.Load()
	if l := t.byID[id]; l != nil {
		if l.host != host {
			return nil, false, statusBadRequest, false // another host's id
		}
		l.touch(ep)
		return l, false, statusOK, false
	}
	if !fresh {
		return nil, false, statusLeaseExpired, false
	}
	if len(t.byID) >= maxLeases {
		return nil, false, statusTooManySessions, false
	}
	if t.byHost.of(host) >= perHost {
		return nil, false, statusTooManySessions, true
	}
	l = &lease{id: id, host: host}
	l.seen.Store(ep)
	t.byID[id] = l
	t.byHost.add(host)
	return l, true, statusOK, false
}

// drop forgets a lease just made for a connect that was then refused.
func (t *leaseTable) drop(l *lease) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byID[l.id] == l {
		t.deleteLocked(l)
	}
}

// deleteLocked forgets l, which is in the table. The caller holds mu.
func (t *leaseTable) deleteLocked(l *lease) {
	delete(t.byID, l.id)
	l.dead.Store(true)
	t.byHost.remove(l.host)
}

// renew renews the lease of id for host, reporting whether it exists.
func (t *leaseTable) renew(host netip.Addr, id uint64) bool {
	t.mu.Lock()
	l := t.byID[id]
	t.mu.Unlock()
	if l == nil || l.host != host {
		return false
	}
	l.touch(t.epoch.Load())
	return true
}

// tick advances the epoch and forgets the leases silent for too long,
// reporting whether it forgot any.
func (t *leaseTable) tick() (expired int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ep := t.epoch.Add(1)
	for _, l := range t.byID {
		if ep-l.seen.Load() > leaseEpochs {
			t.deleteLocked(l)
			expired++
		}
	}
	return expired
}

// hosts is how many client hosts hold leases.
func (t *leaseTable) hosts() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byHost)
}

func (t *leaseTable) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byID)
}

// leaseRef is a client stream's lease, as its Nexus heartbeats it.
type leaseRef struct {
	id      uint64
	peer    *hbPeer
	sent    atomic.Uint32 // the client epoch of the last request sent under it
	expired atomic.Bool   // the server said it does not know the lease
}

// hbPeer is a server Nexus the client Nexus holds leases at.
type hbPeer struct {
	addr   netip.AddrPort
	cookie uint64
	lease  time.Duration          // the server's LeaseTimeout
	refs   map[*leaseRef]struct{} // guarded by hbTable.mu
	// The heartbeat in flight: the Nexus goroutine's.
	inflight uint64
	sentRefs []*leaseRef
}

// hbTable is the client side: the leases this Nexus's Rpcs hold, by
// server Nexus.
type hbTable struct {
	mu       sync.Mutex
	byAddr   map[netip.AddrPort]*hbPeer
	byCookie map[uint64]*hbPeer
	cookies  uint64
	epoch    atomic.Uint32
	next     time.Time // the next tick; the Nexus goroutine's
}

// register adds the lease id at the server Nexus addr (whose
// LeaseTimeout is lease) to the heartbeats, and wakes the Nexus
// goroutine if it had none.
func (n *Nexus) register(addr netip.AddrPort, id uint64, lease time.Duration) *leaseRef {
	t := &n.hb
	t.mu.Lock()
	p := t.byAddr[addr]
	if p == nil {
		t.cookies++
		p = &hbPeer{addr: addr, cookie: t.cookies, lease: lease, refs: map[*leaseRef]struct{}{}}
		t.byAddr[addr] = p
		t.byCookie[p.cookie] = p
	}
	p.lease = min(p.lease, lease)
	ref := &leaseRef{id: id, peer: p}
	ref.sent.Store(t.epoch.Load())
	p.refs[ref] = struct{}{}
	t.mu.Unlock()
	n.kick()
	return ref
}

// unregister stops heartbeating ref.
func (n *Nexus) unregister(ref *leaseRef) {
	t := &n.hb
	t.mu.Lock()
	defer t.mu.Unlock()
	p := ref.peer
	delete(p.refs, ref)
	if len(p.refs) == 0 && t.byAddr[p.addr] == p {
		delete(t.byAddr, p.addr)
		delete(t.byCookie, p.cookie)
	}
}

// kick wakes the Nexus goroutine, so that it sees new work for its
// timers.
func (n *Nexus) kick() {
	n.wakeMu.Lock()
	wake := n.wake
	n.wake = nil
	n.wakeMu.Unlock()
	if wake != nil {
		wake()
	}
}

// armWake returns the context the Nexus goroutine waits with, ended by
// kick; prev is kept unless it has ended.
func (n *Nexus) armWake(prev context.Context) context.Context {
	if prev != nil && prev.Err() == nil {
		return prev
	}
	ctx, cancel := context.WithCancel(context.Background())
	n.wakeMu.Lock()
	n.wake = cancel
	n.wakeMu.Unlock()
	return ctx
}

// nextTick returns when the Nexus goroutine next has lease work: the
// server's epoch, if it holds leases; the client's, if its Rpcs do.
func (n *Nexus) nextTick() (time.Time, bool) {
	var at time.Time
	if n.leases.len() > 0 {
		if n.leases.next.IsZero() {
			n.leases.next = time.Now().Add(n.cfg.LeaseTimeout / leaseEpochs)
		}
		at = n.leases.next
	} else {
		n.leases.next = time.Time{}
	}
	n.hb.mu.Lock()
	peers := len(n.hb.byAddr)
	n.hb.mu.Unlock()
	if peers > 0 {
		if n.hb.next.IsZero() {
			n.hb.next = time.Now().Add(n.hbPeriod())
		}
		if at.IsZero() || n.hb.next.Before(at) {
			at = n.hb.next
		}
	} else {
		n.hb.next = time.Time{}
	}
	return at, !at.IsZero()
}

// hbPeriod is the client's epoch: a quarter of the shortest lease among
// its own and its servers'.
func (n *Nexus) hbPeriod() time.Duration {
	d := n.cfg.LeaseTimeout
	n.hb.mu.Lock()
	for _, p := range n.hb.byAddr {
		d = min(d, p.lease)
	}
	n.hb.mu.Unlock()
	return max(d/leaseEpochs, time.Millisecond)
}

// tick runs the lease work due by now.
func (n *Nexus) tick(now time.Time) {
	if t := n.leases.next; !t.IsZero() && !now.Before(t) {
		n.leases.next = now.Add(n.cfg.LeaseTimeout / leaseEpochs)
		if k := n.leases.tick(); k > 0 {
			n.leasesExpired.Add(uint64(k))
			n.mu.Lock()
			rpcs := n.rpcs
			n.mu.Unlock()
			for _, r := range rpcs {
				if r != nil {
					r.expireLeases()
				}
			}
		}
	}
	if t := n.hb.next; !t.IsZero() && !now.Before(t) {
		n.hb.next = now.Add(n.hbPeriod())
		n.heartbeat()
	}
}

// heartbeat advances the client epoch and sends every server at most one
// heartbeat, for the leases with no request in the epoch that ended.
func (n *Nexus) heartbeat() {
	t := &n.hb
	ended := t.epoch.Add(1) - 1
	type out struct {
		p    *hbPeer
		refs []*leaseRef
	}
	var outs []out
	t.mu.Lock()
	for _, p := range t.byAddr {
		if p.inflight != 0 {
			continue // the last one is unanswered: one at a time
		}
		var refs []*leaseRef
		for ref := range p.refs {
			if int32(ref.sent.Load()-ended) < 0 && len(refs) < maxHeartbeatIDs {
				refs = append(refs, ref)
			}
		}
		if len(refs) > 0 {
			outs = append(outs, out{p, refs})
		}
	}
	t.mu.Unlock()
	for _, o := range outs {
		body := heartbeatBody{ids: make([]uint64, len(o.refs))}
		for i, ref := range o.refs {
			body.ids[i] = ref.id
		}
		h := header{kind: kindHeartbeat}
		msg := body.Append(h.Append(make([]byte, 0, offHbIDs+8*len(o.refs))))
		id, err := n.sock.Send(o.p.addr, msg, o.p.cookie)
		if err != nil {
			continue
		}
		t.mu.Lock()
		o.p.inflight, o.p.sentRefs = id, o.refs
		t.mu.Unlock()
		n.heartbeats.Add(1)
	}
}

// heartbeatReply takes the answer to a heartbeat: the leases the server
// does not know are marked expired.
func (n *Nexus) heartbeatReply(m *sock.Message) {
	defer m.Release()
	t := &n.hb
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.byCookie[m.Cookie]
	if p == nil || p.inflight != m.ID {
		return
	}
	refs := p.sentRefs
	p.inflight, p.sentRefs = 0, nil
	if m.Err != nil {
		return // the server's death shows in the sessions' own requests
	}
	var h header
	var body heartbeatReplyBody
	if _, err := h.Parse(m.Data); err != nil || h.kind != kindHeartbeatReply || h.status != statusOK {
		n.bad.Add(1)
		return
	}
	if _, err := body.Parse(m.Data); err != nil || len(body.unknown) != len(refs) {
		n.bad.Add(1)
		return
	}
	for i, u := range body.unknown {
		if u {
			refs[i].expired.Store(true)
		}
	}
}

// serveHeartbeat renews the leases a heartbeat names, and appends the
// reply to out.
func (n *Nexus) serveHeartbeat(m *sock.Message, out []byte) []byte {
	reply := header{kind: kindHeartbeatReply}
	var body heartbeatBody
	if _, err := body.Parse(m.Data); err != nil {
		n.bad.Add(1)
		reply.status = statusBadRequest
		return reply.Append(out)
	}
	rb := heartbeatReplyBody{unknown: make([]bool, len(body.ids))}
	for i, id := range body.ids {
		rb.unknown[i] = !n.leases.renew(m.Peer.Addr(), id)
	}
	return rb.Append(reply.Append(out))
}

// newClientID returns a random client id, never zero.
func newClientID() uint64 { return rand.Uint64() | 1 }

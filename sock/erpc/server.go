package erpc

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/homa-go/homa/sock"
)

// srvSession is the server side of a session: created by the Nexus
// goroutine when a connect arrives, read by the event loop for every
// request, removed on disconnect or when its lease expires. Its fields
// never change.
type srvSession struct {
	num, token uint32
	client     netip.AddrPort // the client Rpc's socket: requests must come from it
	clientRpc  uint8
	clientID   uint64 // the client's lease and exactly-once identity
	lease      *lease
}

// acceptSession makes a server session for a connect from the client Rpc
// at peer (share says that its host's share refused it). The Nexus
// goroutine calls it.
func (r *Rpc) acceptSession(peer netip.AddrPort, c *connectBody, l *lease) (num, token uint32, st status, share bool) {
	r.srvMu.Lock()
	defer r.srvMu.Unlock()
	if r.closed.Load() {
		return 0, 0, statusNoSuchRpc, false
	}
	host := peer.Addr()
	if r.srvLive >= r.cfg.MaxServerSessions {
		return 0, 0, statusTooManySessions, false
	}
	if r.srvHosts.of(host) >= r.cfg.MaxServerSessionsPerHost {
		return 0, 0, statusTooManySessions, true
	}
	tab := append([]*srvSession(nil), *r.srvTab.Load()...) // readers keep the old one
	if k := len(r.srvFree); k > 0 {
		num = r.srvFree[k-1]
		r.srvFree = r.srvFree[:k-1]
	} else {
		num = uint32(len(tab))
		tab = append(tab, nil)
	}
	r.srvToken++
	if r.srvToken == 0 {
		r.srvToken = 1
	}
	ss := &srvSession{num: num, token: r.srvToken, client: peer, clientRpc: c.srcRpc, clientID: c.clientID, lease: l}
	tab[num] = ss
	r.srvTab.Store(&tab)
	r.srvLive++
	r.srvHosts.add(host)
	return num, ss.token, statusOK, false
}

// dropSession removes the server session a disconnect from peer names.
// Its client's completion records stay, with the client's lease. The
// Nexus goroutine calls it.
func (r *Rpc) dropSession(num, token uint32, peer netip.AddrPort) status {
	r.srvMu.Lock()
	old := *r.srvTab.Load()
	if int(num) >= len(old) || old[num] == nil || old[num].token != token || old[num].client != peer {
		r.srvMu.Unlock()
		return statusNoSession
	}
	tab := make([]*srvSession, len(old))
	copy(tab, old)
	tab[num] = nil
	r.srvTab.Store(&tab)
	r.srvFree = append(r.srvFree, num)
	r.srvLive--
	r.srvHosts.remove(peer.Addr())
	r.srvMu.Unlock()
	return statusOK
}

// expireLeases removes the server sessions whose leases expired, and
// their clients' completion records. The Nexus goroutine calls it.
func (r *Rpc) expireLeases() {
	r.srvMu.Lock()
	old := *r.srvTab.Load()
	var tab []*srvSession
	for i, ss := range old {
		if ss == nil || !ss.lease.dead.Load() {
			continue
		}
		if tab == nil {
			tab = make([]*srvSession, len(old))
			copy(tab, old)
		}
		tab[i] = nil
		r.srvFree = append(r.srvFree, uint32(i))
		r.srvLive--
		r.srvHosts.remove(ss.client.Addr())
	}
	if tab != nil {
		r.srvTab.Store(&tab)
	}
	r.srvMu.Unlock()
	for _, m := range r.eo.dropDead() {
		r.replyStatus(m, &header{kind: kindResponse}, statusNoSession)
	}
}

// lookupSrv finds the server session a request names, if it came from
// the session's client.
func (r *Rpc) lookupSrv(num, token uint32, peer netip.AddrPort) *srvSession {
	tab := *r.srvTab.Load()
	if int(num) >= len(tab) {
		return nil
	}
	ss := tab[num]
	if ss == nil || ss.token != token || ss.client != peer {
		return nil
	}
	return ss
}

// serveRequest handles a request that arrived on the Rpc's socket: it
// checks it, answers duplicates of exactly-once requests, and runs the
// handler (dispatch) or queues it for a worker (background). Every
// request gets a reply, so that the transport frees its state.
func (r *Rpc) serveRequest(m *sock.Message) {
	var h header
	n, err := h.Parse(m.Data)
	if err != nil || (h.kind != kindRequest && h.kind != kindAck && h.kind != kindPull) {
		r.stats.bad.Add(1)
		r.replyStatus(m, &header{kind: kindResponse}, statusBadRequest)
		return
	}
	ss := r.lookupSrv(h.session, h.token, m.Peer)
	if ss != nil {
		ss.lease.touch(r.nx.leases.epoch.Load())
	}
	if h.kind == kindAck {
		if ss != nil && h.clientID == ss.clientID {
			r.eo.ack(ss, &h)
		}
		r.replyStatus(m, &header{kind: kindAckReply}, statusOK)
		return
	}
	if h.kind == kindPull {
		if ss == nil {
			r.stats.bad.Add(1)
			r.replyStatus(m, &header{kind: kindResponse, flags: flagFragment, msgID: h.msgID}, statusNoSession)
			return
		}
		r.servePull(m, &h, ss)
		return
	}
	rh := header{kind: kindResponse, reqType: h.reqType}
	if h.flags&flagExactlyOnce != 0 {
		rh.flags, rh.clientID, rh.seq = flagExactlyOnce, h.clientID, h.seq
	}
	if ss == nil {
		r.stats.bad.Add(1)
		r.replyStatus(m, &rh, statusNoSession)
		return
	}
	hd := &r.nx.handlers[h.reqType]
	if hd.fn == nil {
		r.stats.bad.Add(1)
		r.replyStatus(m, &rh, statusNoSuchType)
		return
	}
	if h.flags&flagFragment != 0 {
		r.serveFragment(m, &h, n, ss, hd)
		return
	}
	var rec *eoRecord
	if h.flags&flagExactlyOnce != 0 {
		if h.clientID != ss.clientID {
			r.stats.bad.Add(1)
			r.replyStatus(m, &rh, statusBadRequest)
			return
		}
		var v eoVerdict
		var frame []byte
		var old *sock.Message
		v, rec, frame, old = r.eo.admit(ss, &h, m, true, true, &r.scratch)
		if r.answerEO(v, m, &rh, frame, old) {
			return
		}
	}
	r.dispatch(m, m.Data[n:], hd, rec, &rh, ss, largeReq{})
}

// answerEO answers the exactly-once request m (response header rh) as
// admit's verdict v says, unless v is eoNew: then it reports false, and
// the request is to run.
func (r *Rpc) answerEO(v eoVerdict, m *sock.Message, rh *header, frame []byte, old *sock.Message) bool {
	switch v {
	case eoNew:
		return false
	case eoCompleted:
		_ = r.sock.Reply(m, frame)
		m.Release()
	case eoInProgress:
		if old != nil {
			r.replyStatus(old, rh, statusInProgress)
		}
		// m is parked: answered when the original completes.
	case eoStale:
		r.replyStatus(m, rh, statusStale)
	case eoLost:
		r.replyStatus(m, rh, statusResponseLost)
	case eoFull:
		r.replyStatus(m, rh, statusRecordsFull)
	default:
		r.replyStatus(m, rh, statusNoSession)
	}
	return true
}

// dispatch runs the handler hd of the request m, whose data is req, or
// queues it for a worker. large is what a reassembled request holds
// (req is in its storage), given back when it is answered.
func (r *Rpc) dispatch(m *sock.Message, req []byte, hd *handlerEntry, rec *eoRecord, rh *header, ss *srvSession, large largeReq) {
	var hdl *ReqHandle
	if k := len(r.hfree); k > 0 {
		hdl = r.hfree[k-1]
		r.hfree = r.hfree[:k-1]
	} else {
		hdl = r.handles.get()
	}
	hdl.rpc, hdl.msg, hdl.req, hdl.fn, hdl.rec, hdl.rh, hdl.live = r, m, req, hd.fn, rec, *rh, true
	hdl.token, hdl.large = ss.token, large
	r.stats.served.Add(1)
	if hd.mode == Dispatch {
		hdl.phase.Store(phaseInCall)
		hd.fn(hdl)
		if !hdl.phase.CompareAndSwap(phaseInCall, phaseOther) {
			// Answered within the call: the loop recycles the handle,
			// with no lock.
			hdl.reset()
			if len(r.hfree) < maxFreeHandles {
				r.hfree = append(r.hfree, hdl)
			}
		}
		return
	}
	select {
	case r.nx.bgq <- hdl:
	default:
		r.stats.busy.Add(1)
		r.stats.served.Add(^uint64(0))
		if rec != nil {
			r.eo.abandon(rec)
		}
		r.large.release(large)
		r.replyStatus(m, rh, statusServerBusy)
		hdl.reset()
		r.handles.put(hdl)
	}
}

// replyStatus answers m with a header alone, carrying st.
func (r *Rpc) replyStatus(m *sock.Message, h *header, st status) {
	h.status = st
	var b [eoHeaderLen]byte
	_ = r.sock.Reply(m, h.Append(b[:0]))
	m.Release()
}

// PreRespSize is the data size of a handle's preallocated response
// buffer (PreResp).
const PreRespSize = 1024

// ReqHandle is a request being served. A handler answers it with
// EnqueueResponse, at once or later (after nested requests, say); until
// then the request's data stays valid. After EnqueueResponse the handle
// must not be used.
type ReqHandle struct {
	rpc *Rpc
	msg *sock.Message
	req []byte
	fn  Handler
	rec *eoRecord // exactly-once record, if the request is one
	rh  header    // the response header: kind, request type, exactly-once echo
	// token is the server session's; large, what a reassembled request
	// holds until the answer.
	token uint32
	large largeReq
	pre   MsgBuffer
	live  bool
	// phase tells who recycles a dispatch handle: the event loop, if
	// EnqueueResponse ran during the handler's call, else EnqueueResponse
	// (which may run on any goroutine, later).
	phase atomic.Int32
}

// Phases of a handle.
const (
	phaseOther    = 0 // a background handle, or a dispatch handler has returned
	phaseInCall   = 1 // the dispatch handler is running
	phaseAnswered = 2 // answered during the dispatch call
)

// Request returns the request's data.
func (h *ReqHandle) Request() []byte { return h.req }

// ReqType is the request's type.
func (h *ReqHandle) ReqType() uint8 { return h.rh.reqType }

// ExactlyOnce reports whether the request is exactly-once.
func (h *ReqHandle) ExactlyOnce() bool { return h.rec != nil }

// Rpc is the Rpc the request arrived at: a dispatch handler issues its
// nested requests there.
func (h *ReqHandle) Rpc() *Rpc { return h.rpc }

// PreResp returns a response buffer that comes with the handle, of
// PreRespSize bytes (resize it to the response's length), so that short
// responses need no allocation. It is valid until EnqueueResponse and is
// not to be freed.
func (h *ReqHandle) PreResp() *MsgBuffer {
	if h.pre.buf == nil {
		h.pre.buf = make([]byte, maxHeaderLen+PreRespSize)
	}
	h.pre.n, h.pre.max, h.pre.state = PreRespSize, PreRespSize, bufApp
	return &h.pre
}

// EnqueueResponse sends resp as the response to the request of h; the
// handle ends, and with it the request's data. resp is the application's
// again at once: a response of up to MaxMsgSize bytes is copied; a larger
// one is not: its storage goes with it (to be pulled by the client, then
// reused by the Rpc's pool) and resp is left empty, Len and MaxLen 0;
// free it as usual. For an exactly-once request the response is also
// kept in the completion record, to answer duplicates, if it fits in
// what MaxRecordBytes leaves; a response larger than
// ExactlyOnceConfig.MaxResponse is replaced by an error status (and
// ErrMessageTooLarge returned). Background handlers call it from their
// worker goroutine.
func (r *Rpc) EnqueueResponse(h *ReqHandle, resp *MsgBuffer) error {
	if h == nil || h.rpc != r || !h.live {
		return ErrBadHandle
	}
	if resp == nil || resp.state != bufApp {
		return ErrBufferInUse
	}
	h.live = false
	rh := h.rh
	var frame, reply []byte
	var err, rerr error
	var parked *sock.Message
	var sending *eoRecord // whose storage the replies are sent from
	r.large.release(h.large)
	replied := false // by storeResponse
	switch {
	case h.rec == nil && resp.n > MaxMsgSize:
		rerr, err = r.large.storeResponse(r, h, resp, &rh, nil)
		replied = true
	case h.rec != nil && resp.n > r.cfg.ExactlyOnce.MaxResponse:
		rh.status = statusTooLarge
		frame = rh.Append(make([]byte, 0, eoHeaderLen))
		err = ErrMessageTooLarge
	case h.rec != nil && resp.n > MaxMsgSize:
		// The record keeps it all, taking resp's storage over, and
		// duplicates and pulls are answered from there; one the record
		// has no room for is kept for the pulls of this reply only, as
		// a large response that is not exactly-once.
		rh.flags |= flagFragment
		rh.fragOff, rh.total = 0, uint32(resp.n)
		frame = resp.frame(&rh)
		var kept bool
		if parked, kept = r.eo.complete(h.rec, frame, resp.buf, time.Now()); kept {
			resp.take()
			reply, sending = frame[:eoHeaderLen+fragChunk], h.rec
		} else {
			rh.flags &^= flagFragment
			rerr, err = r.large.storeResponse(r, h, resp, &rh, parked)
			replied, parked = true, nil
		}
	default:
		frame = resp.frame(&rh)
	}
	if reply == nil && !replied {
		reply = frame
		if h.rec != nil {
			parked, _ = r.eo.complete(h.rec, frame, nil, time.Now())
		}
	}
	if !replied {
		rerr = r.reply(h.msg, reply)
	}
	if rerr != nil && err == nil {
		if e := closedError(rerr); e == ErrClosed {
			err = e
		}
	}
	if parked != nil {
		_ = r.reply(parked, reply)
	}
	if sending != nil {
		r.eo.sent(sending)
	}
	r.stats.responsesSent.Add(1)
	h.msg.Release()
	if h.phase.CompareAndSwap(phaseInCall, phaseAnswered) {
		return err // the event loop recycles h once the handler returns
	}
	h.reset()
	r.handles.put(h)
	return err
}

// reset clears a handle for reuse, keeping its response buffer.
func (h *ReqHandle) reset() {
	pre := h.pre.buf
	*h = ReqHandle{}
	h.pre.buf = pre
}

// handlePool recycles request handles. Safe for concurrent use: workers
// return handles.
type handlePool struct {
	mu   sync.Mutex
	free []*ReqHandle
}

// maxFreeHandles bounds the handles kept for reuse per Rpc.
const maxFreeHandles = 4096

func (p *handlePool) get() *ReqHandle {
	p.mu.Lock()
	if k := len(p.free); k > 0 {
		h := p.free[k-1]
		p.free = p.free[:k-1]
		p.mu.Unlock()
		return h
	}
	p.mu.Unlock()
	return &ReqHandle{}
}

// put takes back a handle already reset.
func (p *handlePool) put(h *ReqHandle) {
	p.mu.Lock()
	if len(p.free) < maxFreeHandles {
		p.free = append(p.free, h)
	}
	p.mu.Unlock()
}

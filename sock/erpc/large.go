package erpc

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/homa-go/homa/sock"
)

// Messages larger than one Homa message (MaxMsgSize) travel in fragments
// of fragChunk bytes, each a Homa message of its own, named by the
// fragment extension of the header (message id, offset, total) or, for an
// exactly-once message, by its exactly-once identity with the fragment's
// index and the total.
//
// A large request goes as a series of transport RPCs, one fragment each:
// the client keeps up to its FragmentWindow of them in flight, sending
// the next as each is acknowledged. The server answers every fragment
// with an empty acknowledgment, except the one that completes the
// message, which it answers with the response, as for a small request. A
// large response comes back as eRPC fetches a multi-packet response with
// requests-for-response: the reply to the request carries the first
// fragment and the total, and the client pulls the others, up to its
// window at once. The server keeps the response until every fragment has
// been pulled (an exactly-once response: in its completion record, until
// acknowledged).
//
// The receiver trusts no total: a server checks it against MaxMessage and
// holds only the fragments that have arrived, charged to
// LargeMessageBytes with the memory they take as they come (the storage
// of those in order, which grows by doubling, and those ahead). Fragments may arrive in any order within
// MaxFragmentWindow fragments of the first one missing; each must sit on
// a fragment boundary, be full (the last one: the rest), carry the same
// total, and arrive once. Anything else drops the message, but for a
// fragment of an exactly-once request held already: an attempt sent
// again carries the same bytes, so its fragments are acknowledged, not
// kept, and a newer attempt takes over what older ones left (see
// serveResume for how its client learns where to start). A client pulls
// only what it asked for and grows its response buffer with the bytes
// that arrived, never beyond the total it accepted. Messages that make no
// progress for MessageTimeout are dropped, with their memory.

// MaxFragmentWindow is the most fragments of one large message a server
// takes ahead of the first one it misses, and so the largest
// Config.FragmentWindow.
const MaxFragmentWindow = 16

// largeKind says what a large message at a server Rpc is, and what names
// it.
type largeKind uint8

const (
	lkRequest    largeKind = iota + 1 // a request being reassembled: (session token, client's message id)
	lkResponse                        // a response being pulled: (session token, server's message id)
	lkEORequest                       // an exactly-once request being reassembled: (client id, sequence)
	lkEOResponse                      // an exactly-once response its record could not keep: (client id, sequence)
)

// largeKey names a large message at a server Rpc.
type largeKey struct {
	kind largeKind
	a, b uint64
}

// largeMsg is a request being reassembled or a response being pulled.
// Either lives in one storage, maxHeaderLen bytes of room and then the
// data. A request's fragments are written there at their places as they
// come in order, the storage growing to hold them; a fragment that comes
// ahead of one missing waits in a chunk of its own until those before it
// are in place. A response is the storage of the handler's buffer, taken
// over.
type largeMsg struct {
	key     largeKey
	host    netip.Addr // the client's host, whose share it is charged to
	reqType uint8
	total   int
	nfrag   int
	retry   uint16 // an exactly-once request: the attempt whose fragments these are
	have    int    // fragments held (request) or pulled (response, not counting the first)
	first   int    // request: index of the first fragment missing; those before are in store
	// A request's charge to LargeMessageBytes: room, the storage its
	// fragments in order have called for (growing by doubling, up to
	// total), and aheadBytes, those of the fragments waiting ahead.
	room, aheadBytes int
	charged          int      // room + aheadBytes, as last charged
	store            []byte   // the storage
	ahead            [][]byte // request: fragments come ahead of first, by index; nil for the others
	data             []byte   // response: all of it, in store; nil for a request
	pulled           []bool   // response: the fragments pulled at least once
	link             dlink[largeMsg]
}

// maxFreeChunks bounds the chunks a server Rpc keeps for fragments that
// come out of order.
const maxFreeChunks = 4

// fragments is how many fragments a message of total bytes takes.
func fragments(total int) int { return (total + fragChunk - 1) / fragChunk }

// maxLargeMsgs bounds the large messages a server Rpc holds at once,
// maxLargeMsgsPerHost those of one client host.
const (
	maxLargeMsgs        = 1024
	maxLargeMsgsPerHost = maxLargeMsgs / 5
)

// largeHost is what the large messages of one client host hold of a
// server Rpc's: the bytes charged, within LargeMessageBytesPerHost, and
// the messages, within maxLargeMsgsPerHost. So one host that keeps large
// messages alive (a fragment now and then) cannot take the room of the
// others.
type largeHost struct{ bytes, msgs int }

// largeTable holds the large messages of a server Rpc. The event loop
// reassembles requests and serves pulls; EnqueueResponse (any goroutine)
// stores responses.
type largeTable struct {
	pool   *bufPool // the Rpc's, for the storages of messages
	mu     sync.Mutex
	bytes  int // charged to LargeMessageBytes: fragments held, responses, requests being handled
	msgs   map[largeKey]*largeMsg
	hosts  map[netip.Addr]*largeHost // what each client host holds of bytes and msgs
	idle   dlist[largeMsg]           // by last progress
	nextID uint32
	ahead  int      // fragments taken ahead of one missing (for tests)
	chunks [][]byte // free chunks for fragments that come ahead
	// next is the Unix time in nanoseconds at which the oldest message
	// times out, or 0: the event loop reads it without the lock.
	next atomic.Int64
}

func (t *largeTable) init(pool *bufPool) {
	t.pool = pool
	t.msgs = make(map[largeKey]*largeMsg)
	t.hosts = make(map[netip.Addr]*largeHost)
	t.idle = newDlist(func(x *largeMsg) *dlink[largeMsg] { return &x.link })
}

// largeReq is what a reassembled request holds until it is answered:
// bytes charged to LargeMessageBytes (and to its client host's share)
// and its storage.
type largeReq struct {
	bytes int
	store []byte
	host  netip.Addr
}

// release gives back what a reassembled request held: its bytes of
// LargeMessageBytes, and its storage, no longer read, to the pool.
func (t *largeTable) release(q largeReq) {
	t.pool.putBig(q.store)
	if q.bytes == 0 {
		return
	}
	t.mu.Lock()
	t.bytes -= q.bytes
	t.chargeHostLocked(q.host, -q.bytes, 0)
	t.mu.Unlock()
}

// hostLocked returns the share of host, made if need be.
func (t *largeTable) hostLocked(host netip.Addr) *largeHost {
	hb := t.hosts[host]
	if hb == nil {
		hb = &largeHost{}
		t.hosts[host] = hb
	}
	return hb
}

// chargeHostLocked adds bytes and msgs to host's share, forgetting it
// once it holds nothing.
func (t *largeTable) chargeHostLocked(host netip.Addr, bytes, msgs int) {
	hb := t.hostLocked(host)
	hb.bytes += bytes
	hb.msgs += msgs
	if hb.bytes == 0 && hb.msgs == 0 {
		delete(t.hosts, host)
	}
}

// hostFullLocked reports whether host's share has no room for n more
// bytes, and, when msg is set, for another message.
func (t *largeTable) hostFullLocked(r *Rpc, host netip.Addr, n int, msg bool) bool {
	hb := t.hosts[host]
	if hb == nil {
		return n > r.cfg.LargeMessageBytesPerHost
	}
	return hb.bytes+n > r.cfg.LargeMessageBytesPerHost || msg && hb.msgs >= maxLargeMsgsPerHost
}

// dropLocked forgets x and its memory.
func (t *largeTable) dropLocked(x *largeMsg) {
	if t.msgs[x.key] != x {
		return
	}
	delete(t.msgs, x.key)
	t.idle.remove(x)
	n := x.charged
	if x.data != nil {
		n = len(x.data)
	}
	t.bytes -= n
	t.chargeHostLocked(x.host, -n, -1)
	t.pool.putBig(x.store)
	for _, c := range x.ahead {
		t.freeChunkLocked(c)
	}
	x.store, x.data, x.ahead, x.pulled = nil, nil, nil, nil
}

// chunkLocked returns an empty chunk for a fragment.
func (t *largeTable) chunkLocked() []byte {
	if k := len(t.chunks); k > 0 {
		c := t.chunks[k-1]
		t.chunks[k-1] = nil
		t.chunks = t.chunks[:k-1]
		return c[:0]
	}
	return make([]byte, 0, fragChunk)
}

// freeChunkLocked keeps c, if not nil, for another fragment.
func (t *largeTable) freeChunkLocked(c []byte) {
	if c != nil && len(t.chunks) < maxFreeChunks {
		t.chunks = append(t.chunks, c)
	}
}

// roomFor is the storage a request's fragments in order up to end call
// for, when they have called for room so far: doubling, so that the
// bytes in place are copied a few times at most as it grows, within
// total.
func roomFor(room, end, total int) int {
	if end <= room {
		return room
	}
	return min(total, max(end, 2*room))
}

// runRoom is the room x (nil: a new message of total bytes) calls for
// once the fragment of n bytes at index idx, the next in order, and the
// fragments waiting right after it are in place, and the bytes of those
// waiting fragments (their chunks are let go).
func runRoom(x *largeMsg, idx, n, total int) (room, waiting int) {
	end := idx*fragChunk + n
	if x == nil {
		return roomFor(0, end, total), 0
	}
	for j := idx + 1; j < x.nfrag && x.ahead[j] != nil; j++ {
		waiting += len(x.ahead[j])
	}
	return roomFor(x.room, end+waiting, total), waiting
}

// chargeFor is what taking the fragment of n bytes at index idx adds to
// the charge of x (nil: a new message of total bytes): its bytes when it
// waits ahead, else the room its run calls for less the chunks let go.
func chargeFor(x *largeMsg, idx, n, total int) int {
	if x != nil && idx != x.first || x == nil && idx != 0 {
		return n
	}
	room, waiting := runRoom(x, idx, n, total)
	if x != nil {
		room -= x.room
	}
	return room - waiting
}

// placeLocked writes the fragment data at off of the request x, which
// holds its data in order up to off, into its storage, growing it if need
// be (to a free large storage of the pool, else by doubling, never
// beyond the total).
func (t *largeTable) placeLocked(x *largeMsg, off int, data []byte) {
	end := off + len(data)
	if have := len(x.store) - maxHeaderLen; end > have {
		nb := t.pool.grown(max(have, 0), end, x.total)
		if off > 0 {
			copy(nb[maxHeaderLen:], x.store[maxHeaderLen:maxHeaderLen+off])
		}
		t.pool.putBig(x.store)
		x.store = nb
	}
	copy(x.store[maxHeaderLen+off:], data)
}

// touchLocked marks progress on x.
func (t *largeTable) touchLocked(x *largeMsg, now time.Time, timeout time.Duration) {
	t.idle.repush(x, now)
	t.updateNextLocked(timeout)
}

func (t *largeTable) updateNextLocked(timeout time.Duration) {
	if x, at := t.idle.front(); x != nil {
		t.next.Store(at.Add(timeout).UnixNano())
		return
	}
	t.next.Store(0)
}

// expire drops the messages idle for timeout by now.
func (t *largeTable) expire(now time.Time, timeout time.Duration, st *counters) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for x, at := t.idle.front(); x != nil && !now.Before(at.Add(timeout)); x, at = t.idle.front() {
		st.largeExpired.Add(1)
		t.dropLocked(x)
	}
	t.updateNextLocked(timeout)
}

// fragVerdict is what the reassembly made of a fragment.
type fragVerdict uint8

const (
	fragHeld     fragVerdict = iota // kept; the message is not complete
	fragComplete                    // the message is complete: the request is returned
	fragOld                         // a fragment of an exactly-once attempt already superseded
	fragRefused                     // refused; the status says why
)

// addFragment takes the fragment data at off of the message key (total
// bytes; for an exactly-once request, attempt retry). The message is
// charged to LargeMessageBytes with the memory it takes as bytes
// arrive: the storage its fragments in order call for (which grows by
// doubling, so up to twice the bytes in place) and the fragments that
// wait ahead. When this fragment
// completes the request, it returns the request and its storage, which
// the caller owns from then on, with its charge. The fragments of an
// exactly-once request are gathered across its attempts: a newer attempt
// keeps what the older ones left, and a fragment held already is
// acknowledged again (fragHeld) without being kept.
func (r *Rpc) addFragment(key largeKey, host netip.Addr, reqType uint8, retry uint16, off, total int, data []byte) (v fragVerdict, st status, req, store []byte) {
	t := &r.large
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	defer t.updateNextLocked(r.cfg.MessageTimeout)
	x := t.msgs[key]
	if x != nil {
		host = x.host // the message's, which its session and lease tie to one host
	}
	eo := key.kind == lkEORequest
	if x != nil && eo && retry != x.retry {
		if retry < x.retry {
			return fragOld, statusInProgress, nil, nil
		}
		// A newer attempt of the same request, whose bytes are the
		// same: it takes over what the older ones left.
		x.retry = retry
	}
	idx := off / fragChunk
	charge := chargeFor(x, idx, len(data), total)
	st = statusOK
	switch {
	case total > r.cfg.MaxMessage || total <= MaxMsgSize:
		st = statusTooLarge // or small enough to have come whole: not a fragment
	case off%fragChunk != 0 || len(data) != min(fragChunk, total-off):
		st = statusBadRequest // off a fragment boundary, or not full
	case x != nil && (x.total != total || x.reqType != reqType):
		st = statusBadRequest // inconsistent
	case x != nil && (idx < x.first || x.ahead[idx] != nil):
		if eo {
			// Held already: sent again by a newer attempt (one that
			// did not ask where to resume). Acknowledged, not kept:
			// no bytes, no progress.
			r.stats.fragAgain.Add(1)
			return fragHeld, statusOK, nil, nil
		}
		st = statusBadRequest // repeated or overlapping
	case x != nil && idx >= x.first+MaxFragmentWindow:
		st = statusBadRequest // beyond the window
	case x == nil && idx >= MaxFragmentWindow:
		st = statusBadRequest // beyond the window
		if eo {
			// Perhaps an attempt resumed where the server was, since
			// when its fragments went (MessageTimeout): refused
			// retryably, its next attempt asks again.
			st = statusInProgress
		}
	case t.bytes+charge > r.cfg.LargeMessageBytes || x == nil && len(t.msgs) >= maxLargeMsgs:
		st = statusServerBusy
	case t.hostFullLocked(r, host, charge, x == nil):
		st = statusServerBusy
		r.stats.largeRefusedPerHost.Add(1)
	}
	if st != statusOK {
		if x != nil {
			t.dropLocked(x)
		}
		r.stats.largeRefused.Add(1)
		return fragRefused, st, nil, nil
	}
	if x == nil {
		x = &largeMsg{key: key, host: host, reqType: reqType, total: total, nfrag: fragments(total), retry: retry}
		x.ahead = make([][]byte, x.nfrag)
		t.msgs[key] = x
		t.chargeHostLocked(host, 0, 1)
	}
	x.have++
	if idx != x.first {
		t.ahead++
		x.ahead[idx] = append(t.chunkLocked(), data...)
		x.aheadBytes += len(data)
	} else {
		x.room, _ = runRoom(x, idx, len(data), total)
		t.placeLocked(x, off, data)
		for x.first++; x.first < x.nfrag && x.ahead[x.first] != nil; x.first++ {
			c := x.ahead[x.first]
			x.ahead[x.first] = nil
			x.aheadBytes -= len(c)
			t.placeLocked(x, x.first*fragChunk, c)
			t.freeChunkLocked(c)
		}
	}
	t.bytes += x.room + x.aheadBytes - x.charged
	t.chargeHostLocked(host, x.room+x.aheadBytes-x.charged, 0)
	x.charged = x.room + x.aheadBytes
	if x.have < x.nfrag {
		t.touchLocked(x, now, r.cfg.MessageTimeout)
		return fragHeld, statusOK, nil, nil
	}
	// Complete: the request keeps its bytes charged until it is answered
	// (largeReq), and is no longer one of its host's messages.
	delete(t.msgs, key)
	t.idle.remove(x)
	t.chargeHostLocked(host, 0, -1)
	return fragComplete, statusOK, x.store[maxHeaderLen : maxHeaderLen+total], x.store
}

// serveFragment takes a fragment of a large request (header h, data
// after n bytes) on session ss. Every fragment but the one that completes
// the request is answered at once; that one dispatches it. A fragment of
// an exactly-once request is first checked against its record: a
// duplicate of a request that ran is answered from the record, one of a
// request running is parked, whatever fragment it is.
func (r *Rpc) serveFragment(m *sock.Message, h *header, n int, ss *srvSession, hd *handlerEntry) {
	eo := h.flags&flagExactlyOnce != 0
	sh := header{kind: kindResponse, reqType: h.reqType} // for a status
	key := largeKey{lkRequest, uint64(ss.token), uint64(h.msgID)}
	if eo {
		if h.clientID != ss.clientID {
			r.stats.bad.Add(1)
			r.replyStatus(m, &sh, statusBadRequest)
			return
		}
		sh.flags, sh.clientID, sh.seq = flagExactlyOnce, h.clientID, h.seq
		key = largeKey{lkEORequest, h.clientID, h.seq}
		v, _, frame, old := r.eo.admit(ss, h, m, false, h.fragOff == 0, &r.scratch)
		if v != eoNew && r.answerEO(v, m, &sh, frame, old) {
			return
		}
	}
	host := m.Peer.Addr()
	v, st, req, store := r.addFragment(key, host, h.reqType, h.retry, int(h.fragOff), int(h.total), m.Data[n:])
	switch v {
	case fragRefused, fragOld:
		r.replyStatus(m, &sh, st)
		return
	case fragHeld:
		ah := header{kind: kindResponse, reqType: h.reqType, flags: h.flags &^ flagAck, msgID: h.msgID,
			fragOff: h.fragOff, total: h.total, clientID: h.clientID, seq: h.seq}
		r.replyStatus(m, &ah, statusOK)
		return
	}
	var rec *eoRecord
	if eo {
		var frame []byte
		var old *sock.Message
		var ev eoVerdict
		ev, rec, frame, old = r.eo.admit(ss, h, m, true, false, &r.scratch)
		if ev != eoNew {
			r.large.release(largeReq{len(req), store, host})
			r.answerEO(ev, m, &sh, frame, old)
			return
		}
	}
	r.dispatch(m, req, hd, rec, &sh, ss, largeReq{len(req), store, host})
}

// storeResponse keeps a response larger than one Homa message to be
// pulled, taking over resp's storage (resp is left empty), and answers
// the request of h, and parked if not nil, with its first fragment; it
// returns the error of that reply. If the response cannot be kept, the
// reply is an error status, and err says why.
//
// The first fragment goes from the storage itself, its header in the
// room before the data, as pulls do; both send under the lock, so that
// nothing recycles the storage while the transport copies from it.
func (t *largeTable) storeResponse(r *Rpc, h *ReqHandle, resp *MsgBuffer, rh *header, parked *sock.Message) (rerr, err error) {
	n := resp.n
	host := h.msg.Peer.Addr()
	t.mu.Lock()
	overAll := n > r.cfg.MaxMessage || t.bytes+n > r.cfg.LargeMessageBytes || len(t.msgs) >= maxLargeMsgs
	overHost := !overAll && t.hostFullLocked(r, host, n, true)
	if overAll || overHost {
		if overHost {
			r.stats.largeRefusedPerHost.Add(1)
		}
		t.mu.Unlock()
		r.stats.largeRefused.Add(1)
		rh.status = statusTooLarge
		if h.rec != nil {
			rh.status = statusResponseLost // it ran; nothing can carry its response
		}
		rh.flags &^= flagFragment
		var b [eoHeaderLen]byte
		frame := rh.Append(b[:0])
		rerr = r.sock.Reply(h.msg, frame)
		if parked != nil {
			_ = r.sock.Reply(parked, frame)
		}
		return rerr, ErrMessageTooLarge
	}
	defer t.mu.Unlock()
	key := largeKey{lkResponse, uint64(h.token), 0}
	if h.rec != nil {
		key = largeKey{lkEOResponse, h.rec.key.client, h.rec.key.seq}
	} else {
		t.nextID++
		rh.msgID = t.nextID
		key.b = uint64(t.nextID)
	}
	rh.flags |= flagFragment
	rh.fragOff, rh.total = 0, uint32(n)
	x := &largeMsg{key: key, host: host, reqType: rh.reqType, total: n, nfrag: fragments(n)}
	x.store, x.data = resp.take()
	x.pulled = make([]bool, x.nfrag)
	if old := t.msgs[key]; old != nil {
		t.dropLocked(old)
	}
	t.msgs[key] = x
	t.bytes += n
	t.chargeHostLocked(host, n, 1)
	t.touchLocked(x, time.Now(), r.cfg.MessageTimeout)
	rerr = t.replyFragment(r, h.msg, x, rh, 0)
	if parked != nil {
		_ = t.replyFragment(r, parked, x, rh, 0)
	}
	return rerr, nil
}

// replyFragment answers m with the fragment of x at off, header rh,
// straight from x's storage: the header goes in the bytes before the
// fragment, which are put back once the transport has copied the frame.
// t.mu is held.
func (t *largeTable) replyFragment(r *Rpc, m *sock.Message, x *largeMsg, rh *header, off int) error {
	at := maxHeaderLen + off
	start := at - rh.Len()
	var save [maxHeaderLen]byte
	copy(save[:], x.store[start:at])
	rh.put(x.store[start:at])
	err := r.sock.Reply(m, x.store[start:maxHeaderLen+min(off+fragChunk, x.total)])
	copy(x.store[start:at], save[:])
	return err
}

// servePull answers a pull with the fragment of a stored response it
// names: from the completion record for an exactly-once response, else
// from the large table. A response in the table goes once every fragment
// has been pulled.
func (r *Rpc) servePull(m *sock.Message, h *header, ss *srvSession) {
	off := int(h.fragOff)
	eo := h.flags&flagExactlyOnce != 0
	rh := header{kind: kindResponse, flags: h.flags, msgID: h.msgID, clientID: h.clientID, seq: h.seq}
	key := largeKey{lkResponse, uint64(ss.token), uint64(h.msgID)}
	if eo {
		if h.clientID != ss.clientID {
			r.stats.bad.Add(1)
			r.replyStatus(m, &header{kind: kindResponse}, statusBadRequest)
			return
		}
		if off == 0 {
			r.serveResume(m, h)
			return
		}
		if frame, st := r.eo.pullFrame(h.clientID, h.seq, off, r.scratch[:0]); frame != nil || st != statusOK {
			if st != statusOK {
				r.stats.bad.Add(1)
				r.replyStatus(m, &rh, st)
				return
			}
			r.scratch = frame[:0]
			_ = r.sock.Reply(m, frame)
			m.Release()
			return
		}
		key = largeKey{lkEOResponse, h.clientID, h.seq}
	}
	t := &r.large
	t.mu.Lock()
	x := t.msgs[key]
	if x == nil || x.data == nil || off <= 0 || off >= x.total || off%fragChunk != 0 {
		t.mu.Unlock()
		r.stats.bad.Add(1)
		st := statusStale // expired, done, or never there
		if eo && x == nil {
			st = statusResponseLost // it ran; neither its record nor the table has the response
		}
		r.replyStatus(m, &rh, st)
		return
	}
	rh.reqType, rh.fragOff, rh.total = x.reqType, uint32(off), uint32(x.total)
	_ = t.replyFragment(r, m, x, &rh, off)
	if i := off / fragChunk; !x.pulled[i] {
		x.pulled[i] = true
		x.have++
	}
	if x.have == x.nfrag-1 {
		t.dropLocked(x) // every fragment pulled
		t.updateNextLocked(r.cfg.MessageTimeout)
	} else {
		t.touchLocked(x, time.Now(), r.cfg.MessageTimeout)
	}
	t.mu.Unlock()
	m.Release()
}

// serveResume answers a resume query: an exactly-once pull at offset 0,
// which no pull of a response is (a response's first fragment comes with
// the reply). The client of an attempt sent again asks where the server
// is with the request: the answer names the first fragment it misses
// (every one before it is held) and the total, or offset and total zero
// when it gathers nothing of the request (which may also have run: the
// attempt's first fragment then learns that from the record). A server
// of an older version answers the query stale, and the client starts
// from the first fragment.
func (r *Rpc) serveResume(m *sock.Message, h *header) {
	rh := header{kind: kindResponse, flags: flagExactlyOnce | flagFragment, clientID: h.clientID, seq: h.seq}
	t := &r.large
	t.mu.Lock()
	if x := t.msgs[largeKey{lkEORequest, h.clientID, h.seq}]; x != nil {
		rh.reqType, rh.fragOff, rh.total = x.reqType, uint32(x.first*fragChunk), uint32(x.total)
	}
	t.mu.Unlock()
	r.replyStatus(m, &rh, statusOK)
}

package erpc

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/homa-go/homa/sock"
)

// Messages larger than one Homa message (MaxMsgSize) travel in fragments
// of fragChunk bytes, each a Homa message of its own with the fragment
// extension of the header (message id, offset, total).
//
// A large request goes as a series of transport RPCs, one fragment each,
// in order, one at a time: the server answers every fragment but the last
// with an empty acknowledgment, and the last with the response, as for a
// small request. A large response comes back as eRPC fetches a
// multi-packet response with requests-for-response: the reply to the
// request carries the first fragment and the total, and the client pulls
// each next fragment with a pull request, one at a time. The server keeps
// the response until its last fragment has been pulled.
//
// The receiver trusts no total: a server checks it against MaxMessage and
// holds only the fragments that have arrived, each one charged to
// LargeMessageBytes as it comes; fragments must come in order, every one
// but the last full, with the same total; anything else drops the
// message. A client pulls only what it asked for and grows its response
// buffer with the bytes that arrived, never beyond the total it accepted.
// Messages that make no progress for MessageTimeout are dropped, with
// their memory. Large requests are not exactly-once: an exactly-once
// request must fit one Homa message.

// largeKey names a large message at a server Rpc: the session's token and
// the message id (the client's for a request, the server's for a
// response).
type largeKey struct {
	token, id uint32
}

// largeMsg is a request being reassembled or a response being pulled.
type largeMsg struct {
	key     largeKey
	resp    bool
	reqType uint8
	total   int
	got     int      // request: bytes arrived
	chunks  [][]byte // request: the fragments' data
	data    []byte   // response: all of it
	link    dlink[largeMsg]
}

// maxLargeMsgs bounds the large messages a server Rpc holds at once.
const maxLargeMsgs = 1024

// largeTable holds the large messages of a server Rpc. The event loop
// reassembles requests and serves pulls; EnqueueResponse (any goroutine)
// stores responses.
type largeTable struct {
	mu     sync.Mutex
	bytes  int // charged to LargeMessageBytes: fragments held, responses, requests being handled
	msgs   map[largeKey]*largeMsg
	idle   dlist[largeMsg] // by last progress
	nextID uint32
	// next is the Unix time in nanoseconds at which the oldest message
	// times out, or 0: the event loop reads it without the lock.
	next atomic.Int64
}

func (t *largeTable) init() {
	t.msgs = make(map[largeKey]*largeMsg)
	t.idle = newDlist(func(x *largeMsg) *dlink[largeMsg] { return &x.link })
}

// release gives back n bytes of LargeMessageBytes.
func (t *largeTable) release(n int) {
	if n == 0 {
		return
	}
	t.mu.Lock()
	t.bytes -= n
	t.mu.Unlock()
}

// dropLocked forgets x and its memory.
func (t *largeTable) dropLocked(x *largeMsg) {
	if t.msgs[x.key] != x {
		return
	}
	delete(t.msgs, x.key)
	t.idle.remove(x)
	if x.resp {
		t.bytes -= len(x.data)
	} else {
		t.bytes -= x.got
	}
	x.chunks, x.data = nil, nil
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

// serveFragment takes a fragment of a large request (header h, data
// after n bytes) on session ss. Every fragment but the last is answered
// at once; the last one dispatches the reassembled request.
func (r *Rpc) serveFragment(m *sock.Message, h *header, n int, ss *srvSession, hd *handlerEntry) {
	t := &r.large
	rh := header{kind: kindResponse, reqType: h.reqType, flags: flagFragment, msgID: h.msgID, total: h.total}
	data := m.Data[n:]
	total, off := int(h.total), int(h.fragOff)
	final := off+len(data) == total
	key := largeKey{ss.token, h.msgID}
	now := time.Now()

	t.mu.Lock()
	x := t.msgs[key]
	st := statusOK
	switch {
	case total > r.cfg.MaxMessage || total <= MaxMsgSize:
		st = statusTooLarge // or small enough to have come whole: not a fragment
	case !final && len(data) != fragChunk:
		st = statusBadRequest // every fragment but the last is full
	case off == 0 && x != nil:
		t.dropLocked(x) // sent again from the start
		x = nil
	case off != 0 && (x == nil || x.got != off || x.total != total):
		st = statusBadRequest // missing, repeated, overlapping or inconsistent
	}
	if st == statusOK && (t.bytes+len(data) > r.cfg.LargeMessageBytes || x == nil && len(t.msgs) >= maxLargeMsgs) {
		st = statusServerBusy
	}
	if st != statusOK {
		if x != nil {
			t.dropLocked(x)
		}
		t.updateNextLocked(r.cfg.MessageTimeout)
		t.mu.Unlock()
		r.stats.largeRefused.Add(1)
		r.replyStatus(m, &rh, st)
		return
	}
	if x == nil {
		x = &largeMsg{key: key, reqType: h.reqType, total: total}
		t.msgs[key] = x
	}
	x.chunks = append(x.chunks, append([]byte(nil), data...))
	x.got += len(data)
	t.bytes += len(data)
	if !final {
		t.touchLocked(x, now, r.cfg.MessageTimeout)
		t.mu.Unlock()
		rh.fragOff = uint32(x.got)
		r.replyStatus(m, &rh, statusOK)
		return
	}
	// Complete: the request keeps its bytes charged until it is answered.
	delete(t.msgs, key)
	t.idle.remove(x)
	t.updateNextLocked(r.cfg.MessageTimeout)
	t.mu.Unlock()
	req := make([]byte, 0, total)
	for _, c := range x.chunks {
		req = append(req, c...)
	}
	r.dispatch(m, req, hd, nil, &header{kind: kindResponse, reqType: h.reqType}, ss, total)
}

// storeResponse keeps a response larger than one Homa message to be
// pulled, and returns the reply that carries its first fragment. If it
// cannot be kept, the reply is an error status, and the error says why.
func (t *largeTable) storeResponse(r *Rpc, h *ReqHandle, resp *MsgBuffer, rh *header) ([]byte, error) {
	n := resp.n
	t.mu.Lock()
	if n > r.cfg.MaxMessage || t.bytes+n > r.cfg.LargeMessageBytes || len(t.msgs) >= maxLargeMsgs {
		t.mu.Unlock()
		r.stats.largeRefused.Add(1)
		rh.status = statusTooLarge
		return rh.Append(nil), ErrMessageTooLarge
	}
	t.nextID++
	rh.flags |= flagFragment
	rh.msgID, rh.fragOff, rh.total = t.nextID, 0, uint32(n)
	if n <= fragChunk {
		// One fragment carries it all: nothing to keep for pulls.
		t.mu.Unlock()
		return append(rh.Append(make([]byte, 0, fragHeaderLen+n)), resp.Data()...), nil
	}
	x := &largeMsg{key: largeKey{h.token, t.nextID}, resp: true, reqType: rh.reqType, total: n,
		data: append([]byte(nil), resp.Data()...)}
	t.msgs[x.key] = x
	t.bytes += n
	t.touchLocked(x, time.Now(), r.cfg.MessageTimeout)
	t.mu.Unlock()
	return append(rh.Append(make([]byte, 0, fragHeaderLen+fragChunk)), x.data[:fragChunk]...), nil
}

// servePull answers a pull with the next fragment of a stored response.
func (r *Rpc) servePull(m *sock.Message, h *header, ss *srvSession) {
	t := &r.large
	rh := header{kind: kindResponse, flags: flagFragment, msgID: h.msgID}
	t.mu.Lock()
	x := t.msgs[largeKey{ss.token, h.msgID}]
	off := int(h.fragOff)
	if x == nil || !x.resp || off <= 0 || off >= x.total || off%fragChunk != 0 {
		t.mu.Unlock()
		r.stats.bad.Add(1)
		r.replyStatus(m, &rh, statusStale) // expired, done, or never there
		return
	}
	end := min(off+fragChunk, x.total)
	rh.reqType, rh.fragOff, rh.total = x.reqType, uint32(off), uint32(x.total)
	frame := append(rh.Append(make([]byte, 0, fragHeaderLen+end-off)), x.data[off:end]...)
	if end == x.total {
		t.dropLocked(x) // pulled to the end
		t.updateNextLocked(r.cfg.MessageTimeout)
	} else {
		t.touchLocked(x, time.Now(), r.cfg.MessageTimeout)
	}
	t.mu.Unlock()
	_ = r.sock.Reply(m, frame)
	m.Release()
}

package homagrpc

import (
	"net/netip"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/homa-go/homa/sock"
)

// Pull sets. A stream's pull is held at the server until the stream has
// something to say, so a client that pulled each stream with a Homa RPC
// of its own would keep one RPC held per open stream: the server's
// socket bounds a host's pending replies (sock.Limits.PendingReplies,
// 2,000 per client host by default), and each held RPC costs its two
// sockets the RESENDs with which the client asks about it and the BUSYs
// that answer them, about 8 a second, plus an empty answer and a new
// pull each keepalive interval. So a ClientConn pulls all its streams to
// a server with one RPC, a pull set, which lists the streams it pulls
// anew (each until its answer comes) and names the ClientConn (the
// puller: a socket may serve several); the server keeps the set of
// pulled streams per puller (pullSet), holds the one RPC until
// any of them has something to say, and answers it with the answer of
// every stream that has, as many as one message holds. The client sends
// the next pull set as that answer arrives. A pull set that comes while
// another is held makes the server answer the held one with what it has
// (possibly nothing): that is how a client adds a stream to the set
// while its pull set is held. Keepalive and abandonment count per
// puller: an idle client costs one small RPC per keepalive interval and
// its RESENDs, however many streams it has open. A socket has at most
// maxPullers pull sets at a listener, all sockets together at most
// MaxConcurrentCalls.

// pullSet is the set of streams a puller of a client socket (a
// ClientConn, for this server) pulls through pull sets, and its pull set
// held, if any.
type pullSet struct {
	l   *listener
	key streamKey // the client's socket, and the puller's id

	mu     sync.Mutex
	held   *sock.Message // the pull set held; nil: none
	heldAt time.Time
	heard  time.Time    // the client's last pull set
	ready  []pullAnswer // answers waiting for a pull set
	// stale counts the answers in ready to pulls of streams the server
	// does not know: at most as many as the server runs at once.
	stale int
	// gone: the listener forgot the pull set (forgetPullSet); a pull
	// set that finds it so takes a new one.
	gone bool
}

// pullAnswer is a stream's answer to its pull, waiting to go in the
// answer to a pull set.
type pullAnswer struct {
	id    uint64
	frame []byte // from sock.NewBuffer
	stale bool   // the end of a stream the server does not know
}

// pullAnswerLimit is the longest stream answer a pull set's answer
// takes: what one message holds, less the framing.
const pullAnswerLimit = maxFrame - pullAnswersHdrLen - pullAnswerEntryLen

// maxPullers bounds the pull sets a listener keeps per client socket:
// one per ClientConn using the socket for this server. All the client
// sockets together have at most as many as the streams the listener
// runs at once (MaxConcurrentCalls): a client has a pull set only to
// pull streams, so many more are a peer making them up, one per port
// and puller, each a little memory until the sweep forgets it.
const maxPullers = 64

// pullSetOf returns the pull set key names, or nil when its client
// socket has maxPullers already, or the listener as many as it runs
// streams.
func (l *listener) pullSetOf(key streamKey) *pullSet {
	l.smu.Lock()
	defer l.smu.Unlock()
	ps := l.pulls[key]
	if ps == nil {
		if l.pullers[key.peer] >= maxPullers || len(l.pulls) >= l.srv.opts.maxHandlers {
			return nil
		}
		if l.pulls == nil {
			l.pulls = make(map[streamKey]*pullSet)
			l.pullers = make(map[netip.AddrPort]int)
		}
		ps = &pullSet{l: l, key: key}
		l.pulls[key] = ps
		l.pullers[key.peer]++
		l.startSweep()
	}
	return ps
}

// forgetPullSet forgets ps. The caller holds smu and ps.mu.
func (l *listener) forgetPullSet(ps *pullSet) {
	if l.pulls[ps.key] != ps {
		return
	}
	ps.gone = true
	delete(l.pulls, ps.key)
	if l.pullers[ps.key.peer]--; l.pullers[ps.key.peer] == 0 {
		delete(l.pullers, ps.key.peer)
	}
}

// handlePulls takes a pull set: the held one is answered with what is
// ready, each stream listed is pulled (one the server does not know is
// answered with its end), and the new one is held, or answered at once
// when something is ready. It owns m.
//
// What a client lists costs the server work and memory: a pull set that
// lists more streams than the server runs at once on the socket is
// refused, and the ends of streams it does not know wait in the answers
// only up to that many (a client lists a stream it opened, and once
// more at most after its end: more is hostile, and not answered).
func (l *listener) handlePulls(m *sock.Message, req streamReq) {
	s := l.srv
	n := len(req.pulls) / pullEntryLen
	now := time.Now()
	var ps *pullSet
	for n <= s.opts.maxHandlers {
		if ps = l.pullSetOf(streamKey{m.Peer, req.id}); ps == nil {
			break
		}
		ps.mu.Lock()
		if !ps.gone { // the sweep forgets only pull sets not heard of lately
			ps.heard = now
			break
		}
		ps.mu.Unlock()
	}
	if ps == nil {
		s.stats.malformed.Add(1)
		s.stats.badPullSets.Add(1)
		l.endFrame(m, status.Newf(codes.ResourceExhausted, "homagrpc: a pull set of %d streams (at most %d), or beyond %d pull sets of a socket or %d of all sockets", n, s.opts.maxHandlers, maxPullers, s.opts.maxHandlers))
		return
	}
	s.stats.pullSets.Add(1)
	s.stats.pulls.Add(uint64(n))
	prev, resp := ps.takeLocked(true)
	ps.mu.Unlock()
	ps.reply(prev, resp)
	for i := range n {
		id, credit := pullEntry(req.pulls, i)
		key := streamKey{m.Peer, id}
		ss := l.stream(key)
		if ss == nil {
			s.stats.stalePulls.Add(1)
			st := l.endedStatus(key)
			if st == nil {
				st = status.Newf(codes.Canceled, "homagrpc: stream %d is not open at the server", id)
			}
			ps.putStale(id, endFrameBytes(st), s.opts.maxHandlers)
			continue
		}
		ss.frame(slot{ps: ps, id: id}, nil, streamReq{op: opPull, credit: credit})
	}
	ps.mu.Lock()
	prev, resp = ps.takeLocked(true) // another pull set came meanwhile
	ps.held, ps.heldAt = m, now
	m2, resp2 := ps.takeLocked(false)
	ps.mu.Unlock()
	ps.reply(prev, resp)
	ps.reply(m2, resp2)
}

// put adds a stream's answer, and answers the held pull set with it and
// whatever else is ready.
func (ps *pullSet) put(id uint64, frame []byte) {
	ps.mu.Lock()
	ps.ready = append(ps.ready, pullAnswer{id, frame, false})
	m, resp := ps.takeLocked(false)
	ps.mu.Unlock()
	ps.reply(m, resp)
}

// putStale adds the end of a stream the server does not know, unless
// limit such answers wait already.
func (ps *pullSet) putStale(id uint64, frame []byte, limit int) {
	ps.mu.Lock()
	if ps.stale >= limit {
		ps.mu.Unlock()
		sock.FreeBuffer(frame)
		return
	}
	ps.stale++
	ps.ready = append(ps.ready, pullAnswer{id, frame, true})
	m, resp := ps.takeLocked(false)
	ps.mu.Unlock()
	ps.reply(m, resp)
}

// takeLocked builds the answer to the held pull set from the answers
// ready, as many as one message holds, when there are any (or, with
// force, in any case), and returns it with the pull set it answers. The
// caller holds mu and sends it (reply) once mu is released.
func (ps *pullSet) takeLocked(force bool) (*sock.Message, []byte) {
	if ps.held == nil || !force && len(ps.ready) == 0 {
		return nil, nil
	}
	n, size := 0, pullAnswersHdrLen
	for n < len(ps.ready) {
		next := size + pullAnswerEntryLen + len(ps.ready[n].frame)
		if next > maxFrame && n > 0 {
			break
		}
		size, n = next, n+1
	}
	b := appendPullAnswersHeader(sock.NewBuffer(min(size, maxFrame))[:0], n)
	for _, a := range ps.ready[:n] {
		frame := a.frame
		if len(frame) > pullAnswerLimit {
			// Metadata beyond what one message holds: the stream ends.
			frame = endFrameBytes(status.New(codes.ResourceExhausted, "homagrpc: a stream's answer does not fit in one message"))
		}
		b = appendPullAnswer(b, a.id, frame)
		sock.FreeBuffer(a.frame)
		if a.stale {
			ps.stale--
		}
	}
	rest := copy(ps.ready, ps.ready[n:])
	clear(ps.ready[rest:])
	ps.ready = ps.ready[:rest]
	m := ps.held
	ps.held = nil
	return m, b
}

// reply sends the answer takeLocked built, if any.
func (ps *pullSet) reply(m *sock.Message, resp []byte) {
	if m == nil {
		return
	}
	_ = ps.l.s.ReplyOwned(m, resp)
	m.Release()
}

// sweepPulls answers the pull sets held for the keepalive interval, so
// that the clients' next ones show they are alive, and forgets those of
// clients silent for four intervals that hold nothing. It reports
// whether any pull set is left.
func (l *listener) sweepPulls(now time.Time, ka time.Duration) bool {
	l.smu.Lock()
	sets := make([]*pullSet, 0, len(l.pulls))
	for _, ps := range l.pulls {
		sets = append(sets, ps)
	}
	l.smu.Unlock()
	left := false
	for _, ps := range sets {
		ps.mu.Lock()
		var m *sock.Message
		var resp []byte
		if ps.held != nil && now.Sub(ps.heldAt) >= ka {
			m, resp = ps.takeLocked(true)
		}
		ps.mu.Unlock()
		ps.reply(m, resp)
		// Forgotten under both locks, so that a pull set that comes
		// meanwhile finds it either heard of or gone (handlePulls).
		l.smu.Lock()
		ps.mu.Lock()
		forget := ps.held == nil && now.Sub(ps.heard) >= 4*ka
		if forget {
			l.forgetPullSet(ps)
		}
		ps.mu.Unlock()
		l.smu.Unlock()
		if forget {
			ps.drop()
		} else {
			left = true
		}
	}
	return left
}

// silent reports whether the client has sent no pull set for four
// keepalive intervals.
func (ps *pullSet) silent(now time.Time, ka time.Duration) bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return now.Sub(ps.heard) >= 4*ka
}

// drop lets go of what the pull set holds, answering the one held
// empty: the listener stops, or the client went silent.
func (ps *pullSet) drop() {
	ps.mu.Lock()
	m := ps.held
	ps.held = nil
	for _, a := range ps.ready {
		sock.FreeBuffer(a.frame)
	}
	ps.ready, ps.stale = nil, 0
	ps.mu.Unlock()
	ps.reply(m, appendPullAnswersHeader(nil, 0))
}

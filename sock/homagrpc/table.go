package homagrpc

import (
	"context"
	"net/netip"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The listener's table of its streams, of the unary calls a cancel frame
// may end, and of how its last streams ended; and the sweep that keeps
// the streams alive or abandons them.

// addStream registers a new stream, within the bound on calls.
func (l *listener) addStream(ss *sstream) *status.Status {
	l.smu.Lock()
	defer l.smu.Unlock()
	if l.draining {
		return status.New(codes.Unavailable, "homagrpc: the server is stopping")
	}
	if _, dup := l.streams[ss.key]; dup {
		return status.Newf(codes.Internal, "homagrpc: stream id %d is in use", ss.key.id)
	}
	if len(l.streams) >= l.srv.opts.maxHandlers {
		l.srv.stats.refused.Add(1)
		return status.Newf(codes.ResourceExhausted, "homagrpc: %d streams are open, the server's bound (MaxConcurrentCalls)", len(l.streams))
	}
	addr := ss.key.peer.Addr()
	h := l.hosts[addr]
	if h == nil {
		h = &hostShare{mem: memBudget{limit: l.srv.opts.hostMemLimit(), parent: &l.srv.streamMem,
			what: "MaxStreamMemoryPerHost", full: &l.srv.stats.overMemoryPerHost}}
	}
	if h.streams >= l.srv.opts.hostStreamsLimit() {
		l.srv.stats.refusedPerHost.Add(1)
		return status.Newf(codes.ResourceExhausted, "homagrpc: this client host has %d streams open, its share of the server's (MaxStreamsPerHost)", h.streams)
	}
	if l.streams == nil {
		l.streams = make(map[streamKey]*sstream)
		l.hosts = make(map[netip.Addr]*hostShare)
	}
	h.streams++
	l.hosts[addr] = h
	ss.host = h
	ss.in.budget = &h.mem
	if ss.out.budget != nil {
		ss.out.budget = &h.mem
	}
	l.streams[ss.key] = ss
	l.startSweep()
	return nil
}

// hostShare is what the streams of one client host hold on a listener:
// their number, within MaxStreamsPerHost, and their memory, within
// MaxStreamMemoryPerHost (and, through its parent, MaxStreamMemory). So
// one host that opens streams and keeps them alive, or fills them,
// leaves room for the others; its ports share its share, and it gains
// nothing by opening more. The entry goes with the host's last stream.
type hostShare struct {
	streams int // guarded by the listener's smu
	mem     memBudget
}

// startSweep starts sweep unless it runs. The caller holds smu.
func (l *listener) startSweep() {
	if !l.sweeping {
		l.sweeping = true
		l.wg.Add(1)
		go l.sweep()
	}
}

func (l *listener) stream(key streamKey) *sstream {
	l.smu.Lock()
	defer l.smu.Unlock()
	return l.streams[key]
}

// removeStream forgets a stream; a held pull is answered.
func (l *listener) removeStream(ss *sstream) {
	ss.mu.Lock()
	end := ss.end
	ss.mu.Unlock()
	l.smu.Lock()
	if l.streams[ss.key] == ss {
		delete(l.streams, ss.key)
		if end != nil {
			l.remember(ss.key, end)
		}
		if ss.host != nil {
			ss.host.streams--
		}
	}
	if l.draining && len(l.streams) == 0 {
		l.stopRecv()
	}
	l.smu.Unlock()
	ss.cancel(nil)
	ss.mu.Lock()
	ss.gone = true
	ss.in.drop()
	ss.out.drop()
	as := [2]answer{ss.flushHeld(), ss.flushPull(true)}
	ss.mu.Unlock()
	for _, a := range as {
		a.reply(l)
	}
	l.forgetHost(ss)
}

// forgetHost drops the entry of ss's client host once it has no stream
// and holds nothing (what a stream held goes back to its share after
// the stream has left the table).
func (l *listener) forgetHost(ss *sstream) {
	l.smu.Lock()
	defer l.smu.Unlock()
	addr := ss.key.peer.Addr()
	if h := ss.host; h != nil && h.streams == 0 && h.mem.used.Load() == 0 && l.hosts[addr] == h {
		delete(l.hosts, addr)
	}
}

// endedMemory is how many ended streams a listener remembers the status
// of, for the pulls that cross their end (a client whose answer with the
// end is still on its way may pull once more).
const endedMemory = 1024

// remember records how a stream ended. The caller holds smu.
func (l *listener) remember(key streamKey, st *status.Status) {
	if l.ended == nil {
		l.ended = make(map[streamKey]*status.Status, endedMemory)
		l.endedOrder = make([]streamKey, endedMemory)
	}
	slot := &l.endedOrder[l.endedNext%endedMemory]
	if l.endedNext >= endedMemory {
		delete(l.ended, *slot) // the oldest
	}
	*slot = key
	l.endedNext++
	l.ended[key] = st
}

// endedStatus is how the stream key ended, if it is remembered.
func (l *listener) endedStatus(key streamKey) *status.Status {
	l.smu.Lock()
	defer l.smu.Unlock()
	return l.ended[key]
}

// addCall registers a unary call that a cancel frame may end.
func (l *listener) addCall(key streamKey, cancel context.CancelCauseFunc) {
	l.smu.Lock()
	defer l.smu.Unlock()
	if l.calls == nil {
		l.calls = make(map[streamKey]context.CancelCauseFunc)
	}
	l.calls[key] = cancel
}

func (l *listener) removeCall(key streamKey) {
	l.smu.Lock()
	defer l.smu.Unlock()
	delete(l.calls, key)
}

// errCanceledByClient is the cause of a handler's context that a cancel
// frame ended.
var errCanceledByClient = status.Error(codes.Canceled, "homagrpc: the client canceled the call")

// cancelCall ends the handler's context of the call or stream key.
func (l *listener) cancelCall(key streamKey) {
	l.smu.Lock()
	cancel := l.calls[key]
	ss := l.streams[key]
	l.smu.Unlock()
	if cancel != nil {
		cancel(errCanceledByClient)
	}
	if ss != nil {
		ss.cancel(errCanceledByClient)
		l.removeStream(ss)
	}
}

func (l *listener) isDraining() bool {
	l.smu.Lock()
	defer l.smu.Unlock()
	return l.draining
}

// drain stops new calls; receiving stops once the last stream is gone.
func (l *listener) drain() {
	l.smu.Lock()
	defer l.smu.Unlock()
	l.draining = true
	if len(l.streams) == 0 {
		l.stopRecv()
	}
}

// sweep runs while the listener has streams or pull sets: it answers
// pulls and pull sets held for the keepalive interval, so that the
// clients' next pulls show they are alive, and abandons the streams
// whose clients went silent.
func (l *listener) sweep() {
	defer l.wg.Done()
	ka := l.srv.opts.keepalive
	t := time.NewTicker(ka / 2)
	defer t.Stop()
	var ss []*sstream
	for {
		select {
		case <-t.C:
		case <-l.recvCtx.Done():
		}
		l.smu.Lock()
		if len(l.streams) == 0 && len(l.pulls) == 0 || l.recvCtx.Err() != nil {
			l.sweeping = false
			pulls := l.pulls
			l.pulls, l.pullers = nil, nil
			l.smu.Unlock()
			for _, ps := range pulls {
				ps.drop() // the listener stops: nobody will answer
			}
			return
		}
		ss = ss[:0]
		for _, s := range l.streams {
			ss = append(ss, s)
		}
		l.smu.Unlock()
		now := time.Now()
		for _, s := range ss {
			s.mu.Lock()
			var as [2]answer
			if s.held.ok() && now.Sub(s.heldAt) >= ka {
				as[0] = s.flushHeld()
			}
			if s.pull.ok() && s.pull.ps == nil && now.Sub(s.pullAt) >= ka {
				as[1] = s.flushPull(true)
			}
			// A stream pulled through a pull set is alive while its
			// client sends pull sets.
			pulled := s.pull.ok() && (s.pull.ps == nil || !s.pull.ps.silent(now, ka))
			silent := now.Sub(s.heard) >= 4*ka && !pulled && !s.held.ok()
			s.mu.Unlock()
			s.send(as[0])
			s.send(as[1])
			if silent {
				l.srv.stats.abandoned.Add(1)
				s.cancel(status.Error(codes.Unavailable, "homagrpc: the client went silent"))
				l.removeStream(s)
			}
		}
		l.sweepPulls(now, ka)
	}
}

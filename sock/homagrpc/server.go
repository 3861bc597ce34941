package homagrpc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"reflect"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/homa-go/homa/sock"
)

// Server serves gRPC services registered with RegisterService (as
// protoc-generated Register functions do) on Homa server sockets. It
// implements grpc.ServiceRegistrar. Unary and streaming methods are
// served.
//
// Each socket given to Serve is read by a small pool of goroutines: the
// one that receives a unary request runs its handler and replies, so a
// call costs no hand-off between goroutines, and another starts reading
// whenever none is left waiting, up to MaxConcurrentCalls. A stream's
// handler runs in a goroutine of its own, which the frames the pool
// receives feed; MaxConcurrentCalls bounds the open streams of a socket
// too.
type Server struct {
	opts serverOptions

	regMu    sync.Mutex               // serializes RegisterService
	registry atomic.Pointer[registry] // replaced whole on each registration

	// handlerCtx is the parent of every handler's context; Stop ends it.
	handlerCtx  context.Context
	endHandlers context.CancelFunc
	// recvCtx ends the receiving: Stop and GracefulStop end it.
	recvCtx context.Context
	endRecv context.CancelFunc

	mu        sync.Mutex
	listeners map[*listener]struct{}
	stopped   bool

	stats serverCounters
	// streamMem bounds what the streams hold received and unread.
	streamMem memBudget
}

var _ grpc.ServiceRegistrar = (*Server)(nil)

// NewServer returns a server with no services.
func NewServer(opts ...ServerOption) *Server {
	s := &Server{opts: defaultServerOptions(), listeners: make(map[*listener]struct{})}
	for _, o := range opts {
		o(&s.opts)
	}
	s.streamMem.limit, s.streamMem.what, s.streamMem.full = s.opts.streamMem, "MaxStreamMemory", &s.stats.overMemory
	s.handlerCtx, s.endHandlers = context.WithCancel(context.Background())
	s.recvCtx, s.endRecv = context.WithCancel(context.Background())
	s.registry.Store(&registry{methods: map[string]*method{}, services: map[string]*service{}})
	return s
}

// registry is the registered services, never changed once published.
type registry struct {
	methods  map[string]*method // by full name, "/service/method"
	services map[string]*service
}

type service struct {
	impl any
	desc *grpc.ServiceDesc
}

type method struct {
	svc           *service
	name          string // full name
	handler       grpc.MethodHandler
	stream        bool
	streamHandler grpc.StreamHandler
	clientStreams bool
	serverStreams bool
}

// RegisterService registers a service and its implementation, as
// grpc.Server does; it may be called before or after Serve. It panics if
// impl does not implement desc.HandlerType or the service is registered
// twice, the mistakes grpc-go treats as fatal.
func (s *Server) RegisterService(desc *grpc.ServiceDesc, impl any) {
	if impl != nil && desc.HandlerType != nil {
		ht := reflect.TypeOf(desc.HandlerType).Elem()
		if st := reflect.TypeOf(impl); !st.Implements(ht) {
			panic(fmt.Sprintf("homagrpc: RegisterService: handler of type %v does not satisfy %v", st, ht))
		}
	}
	s.regMu.Lock()
	defer s.regMu.Unlock()
	old := s.registry.Load()
	if _, dup := old.services[desc.ServiceName]; dup {
		panic(fmt.Sprintf("homagrpc: RegisterService: service %s registered twice", desc.ServiceName))
	}
	next := &registry{methods: make(map[string]*method, len(old.methods)), services: make(map[string]*service, len(old.services)+1)}
	for k, v := range old.methods {
		next.methods[k] = v
	}
	for k, v := range old.services {
		next.services[k] = v
	}
	svc := &service{impl: impl, desc: desc}
	next.services[desc.ServiceName] = svc
	for _, m := range desc.Methods {
		name := "/" + desc.ServiceName + "/" + m.MethodName
		next.methods[name] = &method{svc: svc, name: name, handler: m.Handler}
	}
	for _, st := range desc.Streams {
		name := "/" + desc.ServiceName + "/" + st.StreamName
		next.methods[name] = &method{svc: svc, name: name, stream: true, streamHandler: st.Handler, clientStreams: st.ClientStreams, serverStreams: st.ServerStreams}
	}
	s.registry.Store(next)
}

// GetServiceInfo describes the registered services, as grpc.Server's
// method of that name does (for reflection and tools).
func (s *Server) GetServiceInfo() map[string]grpc.ServiceInfo {
	reg := s.registry.Load()
	info := make(map[string]grpc.ServiceInfo, len(reg.services))
	for name, svc := range reg.services {
		var ms []grpc.MethodInfo
		for _, m := range svc.desc.Methods {
			ms = append(ms, grpc.MethodInfo{Name: m.MethodName})
		}
		for _, st := range svc.desc.Streams {
			ms = append(ms, grpc.MethodInfo{Name: st.StreamName, IsClientStream: st.ClientStreams, IsServerStream: st.ServerStreams})
		}
		info[name] = grpc.ServiceInfo{Methods: ms, Metadata: svc.desc.Metadata}
	}
	return info
}

// Serve serves the requests arriving at socket, a Homa server socket that
// the server owns from now on, until Stop or GracefulStop (then it
// returns nil) or until the socket is closed by someone else (then it
// returns an error wrapping sock.ErrClosed). It may be called for several
// sockets at once. After Stop it closes the socket and returns
// grpc.ErrServerStopped.
func (s *Server) Serve(socket *sock.Socket) error {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		socket.Close()
		return grpc.ErrServerStopped
	}
	l := &listener{srv: s, s: socket, local: Addr(socket.LocalAddr())}
	l.recvCtx, l.stopRecv = context.WithCancel(context.Background())
	stopDrain := context.AfterFunc(s.recvCtx, l.drain)
	defer stopDrain()
	s.listeners[l] = struct{}{}
	l.wg.Add(1) // Serve's own hold, so spawning never races a zero count
	s.mu.Unlock()

	for range idleReaders {
		l.spawn()
	}
	l.wg.Done()
	l.wg.Wait()
	l.holds.stop()

	s.mu.Lock()
	delete(s.listeners, l)
	stopped := s.stopped
	s.mu.Unlock()
	if stopped {
		return nil
	}
	return l.err
}

// Stop stops the server: it stops receiving, cancels the context of every
// handler still running, closes the sockets (so the responses of those
// calls are lost and their clients' calls fail) and returns when every
// goroutine of the server has ended. A handler that ignores its context
// delays Stop until it returns. Stop is idempotent.
func (s *Server) Stop() {
	ls := s.stop()
	s.endRecv()
	s.endHandlers()
	for _, l := range ls {
		l.s.Close()
	}
	for _, l := range ls {
		l.wg.Wait()
		l.holds.stop()
	}
}

// GracefulStop stops the server gently: it stops waiting for requests,
// lets the handlers running finish and send their responses, and then
// closes the sockets. Requests still arriving when it stops waiting are
// not answered; their clients' calls fail with codes.Unavailable once the
// server's host stops answering for them. Other servers may take over
// the port as soon as it returns.
func (s *Server) GracefulStop() {
	ls := s.stop()
	s.endRecv()
	for _, l := range ls {
		l.wg.Wait()
		l.holds.stop()
	}
	for _, l := range ls {
		l.s.Close()
	}
	s.endHandlers()
}

// stop marks the server stopped and returns its listeners.
func (s *Server) stop() []*listener {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
	ls := make([]*listener, 0, len(s.listeners))
	for l := range s.listeners {
		ls = append(ls, l)
	}
	return ls
}

// ServerStats counts what a Server did.
type ServerStats struct {
	// Calls counts the calls and streams handed to a handler.
	Calls uint64
	// Malformed counts requests and stream frames that were not valid
	// frames, answered with codes.Internal.
	Malformed uint64
	// Unimplemented counts requests for unknown services or methods,
	// answered with codes.Unimplemented.
	Unimplemented uint64
	// Abandoned counts streams whose client went silent.
	Abandoned uint64
	// Dropped counts responses that arrived at the server's sockets
	// (which send no requests) and were discarded.
	Dropped uint64
	// Batches counts the batches of stream frames taken, BatchFrames
	// the frames in them.
	Batches, BatchFrames uint64
	// BadBatches counts batches refused (too many frames, a length
	// beyond the message, an entry that is not a data frame), also
	// counted in Malformed.
	BadBatches uint64
	// StaleFrames counts data frames in batches that named no open
	// stream (answered as when alone: the server takes no more
	// messages).
	StaleFrames uint64
	// PullSets counts the pull sets taken, Pulls the streams they
	// listed; StalePulls counts those that named no open stream
	// (answered with the stream's end), and BadPullSets the pull sets
	// refused (more streams than the server runs at once), also counted
	// in Malformed.
	PullSets, Pulls, StalePulls, BadPullSets uint64
	// Refused counts the streams (and unary calls continued as streams)
	// refused because a socket held MaxConcurrentCalls streams, and
	// RefusedPerHost those refused because their client host held its
	// share (MaxStreamsPerHost).
	Refused, RefusedPerHost uint64
	// OverMemory counts the streams that failed because the streams
	// held MaxStreamMemory unread, and OverMemoryPerHost those that
	// failed because the streams of their client host held its share
	// (MaxStreamMemoryPerHost); with them, the unary calls whose long
	// responses did not fit.
	OverMemory, OverMemoryPerHost uint64
}

type serverCounters struct {
	calls, malformed, unimplemented, dropped, abandoned atomic.Uint64
	batches, batchFrames, badBatches, staleFrames       atomic.Uint64
	pullSets, pulls, stalePulls, badPullSets            atomic.Uint64
	refused, refusedPerHost                             atomic.Uint64
	overMemory, overMemoryPerHost                       atomic.Uint64
}

// Stats returns the server's counters.
func (s *Server) Stats() ServerStats {
	return ServerStats{
		Calls:         s.stats.calls.Load(),
		Malformed:     s.stats.malformed.Load(),
		Unimplemented: s.stats.unimplemented.Load(),
		Dropped:       s.stats.dropped.Load(),
		Abandoned:     s.stats.abandoned.Load(),
		Batches:       s.stats.batches.Load(),
		BatchFrames:   s.stats.batchFrames.Load(),
		BadBatches:    s.stats.badBatches.Load(),
		StaleFrames:   s.stats.staleFrames.Load(),
		PullSets:      s.stats.pullSets.Load(),
		Pulls:         s.stats.pulls.Load(),
		StalePulls:    s.stats.stalePulls.Load(),
		BadPullSets:   s.stats.badPullSets.Load(),

		Refused:           s.stats.refused.Load(),
		RefusedPerHost:    s.stats.refusedPerHost.Load(),
		OverMemory:        s.stats.overMemory.Load(),
		OverMemoryPerHost: s.stats.overMemoryPerHost.Load(),
	}
}

// idleReaders is how many goroutines a listener keeps waiting for
// requests: a goroutine that finishes a call while as many are waiting
// ends.
const idleReaders = 2

// listener is one socket being served: a pool of goroutines, each of
// which receives a request, runs it and replies.
type listener struct {
	srv   *Server
	s     *sock.Socket
	local net.Addr       // the socket's address, for peer.Peer
	wg    sync.WaitGroup // the goroutines
	idle  atomic.Int32   // goroutines waiting in Recv
	total atomic.Int32   // goroutines
	once  sync.Once
	err   error // why receiving failed, unless stopped

	// recvCtx ends the receiving: once the server stops receiving and
	// the last stream is gone.
	recvCtx  context.Context
	stopRecv context.CancelFunc

	smu      sync.Mutex
	streams  map[streamKey]*sstream
	hosts    map[netip.Addr]*hostShare             // of the streams' client hosts
	calls    map[streamKey]context.CancelCauseFunc // unary calls with an id
	draining bool                                  // no new calls
	sweeping bool                                  // sweep runs
	pulls    map[streamKey]*pullSet                // by client socket and puller
	pullers  map[netip.AddrPort]int                // pull sets per client socket
	// ended remembers how the last endedMemory streams ended; endedOrder
	// is a ring of their keys, endedNext counts them.
	ended      map[streamKey]*status.Status
	endedOrder []streamKey
	endedNext  int

	holds batchHolds // batches waiting for their handlers
}

// spawn starts another goroutine unless the bound is reached.
func (l *listener) spawn() {
	if l.total.Add(1) > int32(l.srv.opts.maxHandlers) {
		l.total.Add(-1)
		return
	}
	l.wg.Add(1)
	go l.run()
}

// run receives and serves requests until receiving fails or enough other
// goroutines are waiting.
func (l *listener) run() {
	defer l.wg.Done()
	defer l.total.Add(-1)
	for {
		l.idle.Add(1)
		m, err := l.s.Recv(l.recvCtx, sock.Any)
		waiting := l.idle.Add(-1)
		if err != nil {
			l.fail(err)
			return
		}
		if waiting == 0 {
			l.spawn() // someone must read while this one works
		}
		l.srv.handle(l, m)
		if l.idle.Load() >= idleReaders {
			return
		}
	}
}

// fail records why receiving stopped. Unless the server stopped it, the
// socket is closed so that the listener's other goroutines end too.
func (l *listener) fail(err error) {
	if l.srv.recvCtx.Err() != nil {
		return // Stop or GracefulStop
	}
	l.once.Do(func() {
		l.err = fmt.Errorf("homagrpc: serve %v: %w", l.s.LocalAddr(), err)
		if !errors.Is(err, sock.ErrClosed) {
			l.s.Close()
		}
	})
}

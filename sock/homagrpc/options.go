package homagrpc

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/stats"
)

// DialOption configures a ClientConn.
type DialOption func(*dialOptions)

type dialOptions struct {
	interceptor     grpc.UnaryClientInterceptor // the chain, or nil
	chain           []grpc.UnaryClientInterceptor
	streamInt       grpc.StreamClientInterceptor // the chain, or nil
	streamChain     []grpc.StreamClientInterceptor
	callOptions     []grpc.CallOption
	accept          []string // WithAcceptCompressors
	windowSize      int
	statsHs         []stats.Handler
	balancer        Balancer
	resolver        Resolver      // WithResolver; nil: net.DefaultResolver
	resolveInterval time.Duration // WithResolveInterval; 0: the default
}

func (o *dialOptions) window() int {
	if o.windowSize > 0 {
		return o.windowSize
	}
	return defaultWindow
}

// WithInitialWindowSize sets how many bytes of messages each stream
// accepts from the server before its reader takes them (default 1 MiB).
func WithInitialWindowSize(n int) DialOption {
	return func(o *dialOptions) { o.windowSize = n }
}

// WithStatsHandler adds a stats.Handler (for example OpenTelemetry's)
// that sees every call's events, as grpc.WithStatsHandler does.
func WithStatsHandler(h stats.Handler) DialOption {
	return func(o *dialOptions) {
		if h != nil {
			o.statsHs = append(o.statsHs, h)
		}
	}
}

// WithStreamInterceptor adds a stream interceptor to the chain every
// stream goes through; the first added is the outermost. Interceptors
// receive a nil *grpc.ClientConn.
func WithStreamInterceptor(i grpc.StreamClientInterceptor) DialOption {
	return WithChainStreamInterceptor(i)
}

// WithChainStreamInterceptor adds stream interceptors in order.
func WithChainStreamInterceptor(is ...grpc.StreamClientInterceptor) DialOption {
	return func(o *dialOptions) {
		o.streamChain = append(o.streamChain, is...)
		o.streamInt = chainStreamClient(o.streamChain)
	}
}

func chainStreamClient(is []grpc.StreamClientInterceptor) grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		next := streamer
		for i := len(is) - 1; i >= 0; i-- {
			inner, in := next, is[i]
			next = func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
				return in(ctx, desc, cc, method, inner, opts...)
			}
		}
		return next(ctx, desc, cc, method, opts...)
	}
}

// WithUnaryInterceptor adds a client interceptor to the chain every call
// goes through; the first added is the outermost. Interceptors receive a
// nil *grpc.ClientConn, since there is none.
func WithUnaryInterceptor(i grpc.UnaryClientInterceptor) DialOption {
	return WithChainUnaryInterceptor(i)
}

// WithChainUnaryInterceptor adds client interceptors in order, as
// WithUnaryInterceptor does one.
func WithChainUnaryInterceptor(is ...grpc.UnaryClientInterceptor) DialOption {
	return func(o *dialOptions) {
		o.chain = append(o.chain, is...)
		o.interceptor = chainClient(o.chain)
	}
}

// WithAcceptCompressors names compressors, besides the call's own and
// gzip (when registered), that the client advertises for the server's
// responses (see SetSendCompressor). Names not registered in package
// encoding when a call starts are left out.
func WithAcceptCompressors(names ...string) DialOption {
	return func(o *dialOptions) { o.accept = append(o.accept, names...) }
}

// WithDefaultCallOptions sets call options applied before those of each
// call (for example grpc.CallContentSubtype or grpc.MaxCallRecvMsgSize).
func WithDefaultCallOptions(opts ...grpc.CallOption) DialOption {
	return func(o *dialOptions) { o.callOptions = append(o.callOptions, opts...) }
}

// chainClient makes one interceptor of several.
func chainClient(is []grpc.UnaryClientInterceptor) grpc.UnaryClientInterceptor {
	if len(is) == 1 {
		return is[0]
	}
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		return is[0](ctx, method, req, reply, cc, nextClient(is, 1, invoker), opts...)
	}
}

func nextClient(is []grpc.UnaryClientInterceptor, i int, final grpc.UnaryInvoker) grpc.UnaryInvoker {
	if i == len(is) {
		return final
	}
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
		return is[i](ctx, method, req, reply, cc, nextClient(is, i+1, final), opts...)
	}
}

// ServerOption configures a Server.
type ServerOption func(*serverOptions)

type serverOptions struct {
	interceptor grpc.UnaryServerInterceptor // the chain, or nil
	chain       []grpc.UnaryServerInterceptor
	streamInt   grpc.StreamServerInterceptor // the chain, or nil
	streamChain []grpc.StreamServerInterceptor
	maxRecv     int // -1: defaultMaxRecv
	maxSend     int
	maxHandlers int
	windowSize  int
	keepalive   time.Duration
	statsHs     []stats.Handler
	streamMem   int64
	// A client host's shares of maxHandlers (streams) and streamMem; 0:
	// the defaults (hostStreamsLimit, hostMemLimit).
	hostStreams int
	hostMem     int64
}

// hostStreamsLimit is how many streams one client host may hold open on
// a socket: MaxStreamsPerHost, or a fifth of MaxConcurrentCalls.
func (o *serverOptions) hostStreamsLimit() int {
	if o.hostStreams > 0 {
		return o.hostStreams
	}
	return max(o.maxHandlers/5, 1)
}

// hostMemLimit is what one client host's streams may hold of
// MaxStreamMemory: MaxStreamMemoryPerHost, or a quarter of it.
func (o *serverOptions) hostMemLimit() int64 {
	if o.hostMem > 0 {
		return o.hostMem
	}
	return max(o.streamMem/4, 1)
}

func defaultServerOptions() serverOptions {
	return serverOptions{maxRecv: -1, maxSend: -1, maxHandlers: defaultMaxHandlers, windowSize: defaultWindow, keepalive: defaultKeepalive, streamMem: defaultStreamMemory}
}

// defaultStreamMemory is the default of MaxStreamMemory.
const defaultStreamMemory = 256 << 20

// MaxStreamMemory bounds the bytes of messages that all the server's
// streams (and unary calls too long for one Homa message) hold received
// and not yet read by their handlers, together with the unary responses
// too long for one Homa message that wait for their clients to pull them
// (default 256 MiB). A stream whose bytes would pass it fails with
// codes.ResourceExhausted, and so does a unary call whose long response
// does not fit. Each stream holds at most its window and one message;
// this bounds them together.
func MaxStreamMemory(n int64) ServerOption {
	return func(o *serverOptions) {
		if n > 0 {
			o.streamMem = n
		}
	}
}

// MaxStreamMemoryPerHost bounds what the streams of one client host on
// a socket hold of MaxStreamMemory (default a quarter of it), so that one host
// cannot take it all: a stream of a host at its share fails with
// codes.ResourceExhausted as one past MaxStreamMemory does, while the
// other hosts' streams go on. The ports of a host share its share.
func MaxStreamMemoryPerHost(n int64) ServerOption {
	return func(o *serverOptions) {
		if n > 0 {
			o.hostMem = n
		}
	}
}

// MaxStreamsPerHost bounds the streams one client host holds open on
// each socket (default a fifth of MaxConcurrentCalls, at least one), as
// the socket bounds a host's share of the requests awaiting replies
// (sock.Limits): a stream beyond it is refused with
// codes.ResourceExhausted, so that the streams of one host (a client
// that opens streams and keeps them alive) cannot keep every other
// host's out. The ports of a host share its share.
func MaxStreamsPerHost(n int) ServerOption {
	return func(o *serverOptions) {
		if n > 0 {
			o.hostStreams = n
		}
	}
}

// defaultMaxRecv is the default bound on a received message, grpc-go's.
const defaultMaxRecv = 4 << 20

// recvLimit is the bound on a received message for a setting n
// (negative: the default).
func recvLimit(n int) int {
	if n < 0 {
		return defaultMaxRecv
	}
	return n
}

// defaultKeepalive is how long a server holds a stream's pull before it
// answers it empty, so that the client's next pull shows it is alive.
const defaultKeepalive = time.Second

// InitialWindowSize sets how many bytes of messages each stream accepts
// from its client before the handler takes them (default 1 MiB).
func InitialWindowSize(n int) ServerOption {
	return func(o *serverOptions) {
		if n > 0 {
			o.windowSize = n
		}
	}
}

// StreamKeepalive sets how long the server holds a stream's pull frame
// when it has nothing to send (default 1 s). A stream whose client has
// sent no frame for four times as long is abandoned: its handler's
// context is canceled.
func StreamKeepalive(d time.Duration) ServerOption {
	return func(o *serverOptions) {
		if d > 0 {
			o.keepalive = d
		}
	}
}

// StatsHandler adds a stats.Handler that sees every call's events on the
// server, as grpc.StatsHandler does.
func StatsHandler(h stats.Handler) ServerOption {
	return func(o *serverOptions) {
		if h != nil {
			o.statsHs = append(o.statsHs, h)
		}
	}
}

// StreamInterceptor adds a stream interceptor to the chain every stream
// goes through; the first added is the outermost.
func StreamInterceptor(i grpc.StreamServerInterceptor) ServerOption {
	return ChainStreamInterceptor(i)
}

// ChainStreamInterceptor adds stream interceptors in order.
func ChainStreamInterceptor(is ...grpc.StreamServerInterceptor) ServerOption {
	return func(o *serverOptions) {
		o.streamChain = append(o.streamChain, is...)
		chain := o.streamChain
		o.streamInt = func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
			next := handler
			for i := len(chain) - 1; i >= 0; i-- {
				inner, in := next, chain[i]
				next = func(srv any, ss grpc.ServerStream) error { return in(srv, ss, info, inner) }
			}
			return next(srv, ss)
		}
	}
}

// defaultMaxHandlers is the default bound on calls a Server runs at once
// per socket, the engine's default bound on server RPCs.
const defaultMaxHandlers = 10_000

// UnaryInterceptor adds a server interceptor to the chain every call goes
// through; the first added is the outermost.
func UnaryInterceptor(i grpc.UnaryServerInterceptor) ServerOption {
	return ChainUnaryInterceptor(i)
}

// ChainUnaryInterceptor adds server interceptors in order, as
// UnaryInterceptor does one.
func ChainUnaryInterceptor(is ...grpc.UnaryServerInterceptor) ServerOption {
	return func(o *serverOptions) {
		o.chain = append(o.chain, is...)
		o.interceptor = chainServer(o.chain)
	}
}

// MaxRecvMsgSize bounds the request messages the server accepts, in
// bytes; larger ones fail with codes.ResourceExhausted. The default is
// 4 MiB, as in grpc-go.
func MaxRecvMsgSize(n int) ServerOption { return func(o *serverOptions) { o.maxRecv = n } }

// MaxSendMsgSize bounds the response messages the server sends, in bytes;
// larger ones fail with codes.ResourceExhausted.
func MaxSendMsgSize(n int) ServerOption { return func(o *serverOptions) { o.maxSend = n } }

// MaxConcurrentCalls bounds the unary calls the server runs at once on
// each socket (default 10,000): requests beyond it wait in the socket.
// It bounds the streams open at once on each socket too: a stream
// beyond it is refused with codes.ResourceExhausted.
func MaxConcurrentCalls(n int) ServerOption {
	return func(o *serverOptions) {
		if n > 0 {
			o.maxHandlers = n
		}
	}
}

// chainServer makes one interceptor of several.
func chainServer(is []grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	if len(is) == 1 {
		return is[0]
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		return is[0](ctx, req, info, nextServer(is, 1, info, handler))
	}
}

func nextServer(is []grpc.UnaryServerInterceptor, i int, info *grpc.UnaryServerInfo, final grpc.UnaryHandler) grpc.UnaryHandler {
	if i == len(is) {
		return final
	}
	return func(ctx context.Context, req any) (any, error) {
		return is[i](ctx, req, info, nextServer(is, i+1, info, final))
	}
}

package homagrpc

import (
	"context"

	"google.golang.org/grpc"
)

// DialOption configures a ClientConn.
type DialOption func(*dialOptions)

type dialOptions struct {
	interceptor grpc.UnaryClientInterceptor // the chain, or nil
	chain       []grpc.UnaryClientInterceptor
	callOptions []grpc.CallOption
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
	maxRecv     int // -1: no limit beyond Homa's
	maxSend     int
	maxHandlers int
}

func defaultServerOptions() serverOptions {
	return serverOptions{maxRecv: -1, maxSend: -1, maxHandlers: defaultMaxHandlers}
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
// bytes; larger ones fail with codes.ResourceExhausted. Without it the
// bound is what one Homa message holds.
func MaxRecvMsgSize(n int) ServerOption { return func(o *serverOptions) { o.maxRecv = n } }

// MaxSendMsgSize bounds the response messages the server sends, in bytes;
// larger ones fail with codes.ResourceExhausted.
func MaxSendMsgSize(n int) ServerOption { return func(o *serverOptions) { o.maxSend = n } }

// MaxConcurrentCalls bounds the calls the server runs at once on each
// socket (default 10,000). Requests beyond it wait in the socket.
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

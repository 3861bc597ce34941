// Package homagrpc carries gRPC unary calls over Homa: protoc-generated
// clients and servers run unchanged, each call one Homa RPC instead of a
// stream on an HTTP/2 connection.
//
// The model: a Server accepts service registrations (it is a
// grpc.ServiceRegistrar, so the generated RegisterXxxServer functions
// take it) and serves the requests arriving at Homa server sockets; a
// ClientConn is a grpc.ClientConnInterface, so the generated NewXxxClient
// functions take it, and sends each call as a Homa request to one server.
//
//	srv := homagrpc.NewServer()
//	pb.RegisterGreeterServer(srv, &greeter{})
//	s, _ := sock.Open(netip.MustParseAddrPort("127.0.0.1:4000"), nil)
//	go srv.Serve(s) // until srv.Stop or srv.GracefulStop
//
//	cc, _ := homagrpc.Dial(s.LocalAddr(), nil)
//	defer cc.Close()
//	reply, err := pb.NewGreeterClient(cc).SayHello(ctx, &pb.HelloRequest{Name: "homa"})
//
// Here pb is the package protoc generates from the service's .proto file,
// the same stubs grpc-go uses: protoc --go_out=. --go-grpc_out=., with
// the plugins protoc-gen-go (google.golang.org/protobuf/cmd/protoc-gen-go,
// the messages) and protoc-gen-go-grpc
// (google.golang.org/grpc/cmd/protoc-gen-go-grpc, RegisterGreeterServer
// and NewGreeterClient). For Greeter, grpc-go publishes it as
// google.golang.org/grpc/examples/helloworld/helloworld; the package's
// example and the README use another generated package that ships with
// grpc-go itself, google.golang.org/grpc/interop/grpc_testing.
//
// # What is supported
//
// Unary calls, with: request metadata (the handler's incoming context,
// holding exactly what the caller sent: no :authority, content-type or
// user-agent entries are added);
// header and trailer metadata set by the handler (grpc.SetHeader,
// grpc.SendHeader, grpc.SetTrailer), returned to the caller through the
// grpc.Header and grpc.Trailer call options, on failure too; deadlines,
// propagated as gRPC does: the time remaining travels with the request
// (as grpc-timeout does) and the handler's context carries a deadline
// that far from the request's arrival; status codes, messages and
// details; grpc.Method and peer.FromContext in handlers (the peer's
// address is an Addr, network "homa"); grpc.Peer on calls; unary
// interceptors on both sides (UnaryInterceptor, WithUnaryInterceptor;
// client interceptors receive a nil *grpc.ClientConn); codecs: proto
// unless grpc.CallContentSubtype, grpc.ForceCodec or grpc.ForceCodecV2
// chooses another registered codec, whose name travels with the request
// so the server decodes and encodes with it too; the size limits
// grpc.MaxCallRecvMsgSize, grpc.MaxCallSendMsgSize, MaxRecvMsgSize and
// MaxSendMsgSize; per-RPC credentials that do not require transport
// security (their metadata is sent; those that do fail with
// Unauthenticated, since Homa has none).
//
// What is not: streaming RPCs (client, server or bidirectional): a Homa
// RPC carries one request and one response, so ClientConn.NewStream
// returns codes.Unimplemented with a message saying so, as the server
// does for a request naming a streaming method; compression (messages
// travel as the codec encodes them; grpc.UseCompressor is ignored);
// WaitForReady (there is no connection to wait for); telling the server
// that a caller gave up: a canceled call is aborted at the client, while
// the handler's context ends only at the deadline, when the handler
// returns, or at Stop; transport security.
//
// Server lifecycle: Serve(sock) blocks while serving one socket (it may
// be called for several); Stop cancels the handlers' contexts, closes the
// sockets and waits for every goroutine; GracefulStop stops receiving,
// waits for running handlers to reply, then closes the sockets. Both are
// idempotent and both leave no goroutine behind. A socket is read by a
// few goroutines at once; the one that receives a request runs its
// handler and replies (no hand-off between goroutines), and another one
// starts whenever none is left waiting, up to MaxConcurrentCalls.
//
// # Errors
//
// A status returned by a handler (status.Error, or an error with a
// GRPCStatus method) reaches the caller with its code, message and
// details; any other error becomes codes.Unknown, and a context error
// codes.DeadlineExceeded or codes.Canceled, as in grpc-go. Failures of
// the call itself are status errors that also wrap their cause, so both
// status.Code(err) and errors.Is(err, cause) work:
//
//	caller's deadline                      DeadlineExceeded  context.DeadlineExceeded
//	caller's context canceled              Canceled          context.Canceled
//	server stopped answering               Unavailable       sock.ErrPeerTimeout
//	request or response over 1,000,000 B   ResourceExhausted sock.ErrMessageTooLong (request)
//	over a size limit set by an option     ResourceExhausted
//	ClientConn or its socket closed        Canceled          sock.ErrClosed
//	RPC aborted on the socket              Canceled          sock.ErrAborted
//	response that is not a valid frame     Internal
//	unknown service or method, streaming   Unimplemented
//	any other transport error              Unavailable       the error
//
// # Wire framing
//
// Each call is one Homa RPC. The request message holds a 20-byte header
// (version, kind, codec name length, flags, method length, metadata entry
// count and length, and the timeout in nanoseconds), then the codec name
// (the content subtype, empty for proto), the method ("/package.Service/
// Method"), the metadata entries and the encoded request. The response
// holds a 28-byte header (version, kind, status code, lengths of the
// status message and details, counts and lengths of the header and
// trailer metadata), then the status message, the status details (a
// serialized google.rpc.Status, as gRPC's grpc-status-details-bin), the
// header and trailer entries and, when the status is OK, the encoded
// response. A metadata entry is a 2-byte key length, a 4-byte value
// length, the key and the value. Integers are big endian. Every length
// and count is checked against the message before use, keys and values
// against gRPC's rules, and a request that fails is answered with
// codes.Internal and counted (Server.Stats); frame.go has the exact
// layout.
package homagrpc

// Package homagrpc carries gRPC over Homa: protoc-generated clients and
// servers run unchanged, each unary call one Homa RPC instead of a
// stream on an HTTP/2 connection, and each streaming call a sequence of
// Homa RPCs (see Streams).
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
// MaxSendMsgSize (received messages default to grpc-go's 4 MiB; any
// larger limit works: a message that does not fit in one Homa message
// goes in pieces, see Large messages); per-RPC credentials that do not
// require transport security (their metadata is sent; those that do
// fail with Unauthenticated, since Homa has none).
//
// Cancellation: a call or stream whose caller cancels it ends at the
// client at once and sends the server a cancel frame naming the call's
// id, which ends the handler's context (context.Cause says the client
// canceled) within a round trip. One whose deadline passes needs no
// frame: the server's copy of the deadline, which started when the
// request arrived, ends the handler's context a one-way delay after the
// caller's. A cancel frame that is lost, or overtakes its call, leaves
// the handler to its deadline (grpc-go's RST_STREAM, on an ordered
// connection, cannot overtake).
//
// Streaming calls (client, server and bidirectional), with the same
// metadata, deadlines, status and size limits, in order, with
// half-close (CloseSend), per-stream flow control (InitialWindowSize,
// WithInitialWindowSize) and stream interceptors (StreamInterceptor,
// WithStreamInterceptor); so grpc-go's health service (Watch included)
// and server reflection work over Homa. As in grpc-go, a stream's
// goroutines end when it ends: read it to io.EOF or an error, or cancel
// its context.
//
// Compression: grpc.UseCompressor with any compressor registered in
// package encoding (gzip: import google.golang.org/grpc/encoding/gzip)
// compresses the caller's messages, and the server answers with the same
// compressor, as grpc-go's server does. An unregistered name fails the
// call with codes.Internal at the client; a server without the
// compressor answers codes.Unimplemented. Decompression stops at the
// receiver's message limit, whatever the compressed size.
//
// A handler chooses another compressor for its responses with this
// package's SetSendCompressor (grpc-go's grpc.SetSendCompressor accepts
// only grpc-go's own transport stream, so it fails here; this one calls
// it on other servers, so a handler registered through Mirror works on
// both), with grpc-go's rules: the name must be registered and among
// those the client accepts (ClientSupportedCompressors), or be
// "identity" (no compression), and the header must not have been sent.
// The client accepts its call's compressor, gzip when registered, and
// those named by WithAcceptCompressors; the list travels in the request
// frame (as grpc-accept-encoding holds it), and the server's choice, when
// it is not the request's compressor, in a header entry grpc-encoding,
// taken out before the caller sees the header.
//
// Stats handlers (stats.Handler, so OpenTelemetry's otelgrpc handlers):
// WithStatsHandler on the client, StatsHandler on the server. They see
// Begin, OutHeader, OutPayload, InHeader, InPayload, InTrailer or
// OutTrailer, and End, in grpc-go's order; there are no connection
// events (Homa has no connections), and wire lengths are message
// lengths.
//
// Several servers: DialTarget("homa:///10.0.0.1:5000,10.0.0.2:5000",
// cfg, WithBalancer(RoundRobin)) spreads calls and streams over them;
// PickFirst (the default) uses the first until a call finds it
// unavailable. A target may name hosts ("homa:///db1.internal:5000"):
// DialTarget looks them up (ResolveTarget, WithResolver), each name
// standing for all its addresses of the target's address family, and
// the ClientConn follows them as grpc-go's dns resolver does: when a
// call finds a server unavailable, the names are looked up again in the
// background, at most once per 30 s (WithResolveInterval), and the
// addresses found replace the servers (Targets); a lookup that fails
// leaves them as they were (ResolveErr says why). Nothing is looked up
// while calls succeed, and a target of IP addresses only never is.
//
// One registration on both transports: Mirror(homaServer, grpcServer)
// is a grpc.ServiceRegistrar that registers each service on both, so
// grpcurl, gateways and other languages reach over HTTP/2 what Homa
// clients reach over Homa:
//
//	hs, gs := homagrpc.NewServer(), grpc.NewServer()
//	both := homagrpc.Mirror(hs, gs)
//	pb.RegisterGreeterServer(both, &greeter{})
//	reflection.Register(both)
//	go hs.Serve(homaSocket)
//	go gs.Serve(tcpListener)
//
// grpc.WaitForReady(true): a call or stream waits for a ready server,
// until its context ends, instead of failing at once when none answers
// (a server that has not started yet, say). Homa has no connections, so
// ready means a server that answers: one that answered a call or a
// probe since a call last found it unavailable. Before a call goes to a
// server not known ready, the client probes it (a cancel frame naming
// no call, which a server answers at once), moves to the next server
// when the probe fails, and backs off between rounds of the servers
// (20 ms growing to 2 s). Once a server is ready, the call is sent and
// fails as any other. Without the option nothing changes: no probe, and
// a call to an absent server fails with Unavailable.
//
// What is not: transport security; grpc.SetSendCompressor (use this
// package's SetSendCompressor).
//
// Server lifecycle: Serve(sock) blocks while serving one socket (it may
// be called for several); Stop cancels the handlers' contexts, closes the
// sockets and waits for every goroutine; GracefulStop refuses new calls
// and streams (codes.Unavailable), lets running handlers reply and open
// streams end (it keeps receiving their frames until the last one is
// gone), then closes the sockets. Both are
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
//	over a size limit set by an option     ResourceExhausted
//	ClientConn or its socket closed        Canceled          sock.ErrClosed
//	RPC aborted on the socket              Canceled          sock.ErrAborted
//	response that is not a valid frame     Internal
//	unknown service or method              Unimplemented
//	streaming method called by Invoke      Unimplemented
//	any other transport error              Unavailable       the error
//
// # Streams
//
// Homa carries requests and responses, and only clients send requests,
// so a stream is a conversation of Homa RPCs from the client, each
// carrying one frame that names the stream by an id the client chose
// (stream_frame.go has the layout):
//
//   - open: the method, metadata, timeout and codec, as a unary request
//     has them, and the first messages. The server starts the handler
//     and answers at once with its credit. When the client has nothing
//     more to send (a server-streaming call: one message, then the
//     half-close), the open is also the first pull, and the call costs
//     one round trip to its first response, as a unary call does.
//   - data: messages, the half-close, and credit for the server. The
//     client has one data frame in flight at a time and puts in it
//     everything queued meanwhile, so frames stay in order without
//     sequence numbers and a fast sender's messages travel in batches.
//     SendMsg sends the frame itself when none is in flight, and the
//     answer is awaited by RecvMsg when it waits, else by the stream's
//     sender goroutine (or the puller, when a later answer comes
//     first). The server answers a data frame at once, unless
//     it brought messages to a handler waiting in RecvMsg: then it
//     holds it, and answers it with what the handler says next (its
//     next messages, or nothing when it asks for more messages, or
//     blocks, or returns). So a message and its answer, one at a time,
//     cost one Homa RPC, as a unary call does.
//   - pull: the client keeps the stream pulled at the server at all
//     times. The server holds the pull until it has something to say
//     (header metadata, messages, new credit, the status and trailer)
//     and no data frame is held to say it in, and then answers it; the
//     client pulls again. A ClientConn pulls all its streams to a server
//     with one Homa RPC, a pull set: it lists the streams pulled anew,
//     the server keeps the set of pulled streams per ClientConn,
//     holds the one RPC until any of them has something to say, and
//     answers it with the answers of all that have (as many as one
//     message holds); the client sends the next pull set as the answer
//     arrives, and another at once, while one is held, to list a stream
//     that wants its next answer (the server then answers the held one
//     with what it has). A server of the version before pull sets
//     answers one as a frame it does not know, and a server refuses
//     one beyond its bounds (64 pull sets a client socket, and as many
//     in all as MaxConcurrentCalls): the streams then pull each with
//     its own RPC.
//     The server numbers its answers, whichever frame they answer, and
//     the client takes them in that order; it sends no frame while an
//     answer is missing, so at most one waits out of order, and no
//     pull once an answer numbered 0 said that the server no longer
//     knows the stream (its end is in an answer still on its way).
//   - cancel: the client gave up (it canceled its context); the
//     handler's context ends. Every unary call carries an id that a
//     cancel frame can name the same way.
//
// Batches: a ClientConn keeps one Homa RPC carrying data frames in
// flight to each server, whatever the stream, and a second only while
// the first is slow. A data frame ready when none is in flight goes at
// once, alone; frames ready while one is (several streams sending at
// once) wait for it to return, and then go together in one Homa
// message, a batch (at most 64 frames, and what one Homa message holds),
// which the server answers in one response, an answer per frame. Once
// the RPC in flight has been out twice as long as the ClientConn's RPCs
// to that server lately took (at least 100 µs, at most 2 ms), the frames
// waiting go in a second one. Nothing waits for more frames to come,
// but the streams a batch's answers woke run before the mux sends again,
// so that their next frames go together (see Gathering in
// batch_client.go). Each stream's frames stay in order (a stream
// still has one data frame in flight), each keeps its own credit,
// cancellation (a stream canceled while its frame travels in a batch
// ends at once; the others take their answers) and errors. The server
// answers a batch once every frame in it is answered, and holds any data
// frame at most 2 ms for its handler's reaction: past that it answers
// with the credit, and what the handler says later goes in the answer
// to the pull. So a handler that takes a message and computes delays
// other streams' frames by twice the usual time of an RPC to that
// server, and by 2 ms at most while both RPCs in flight carry such
// frames. Open, pull and cancel frames always go
// alone. Under load this cuts the Homa messages per stream message
// several times over; Server.Stats counts the batches, the frames in
// them, the batches refused and the frames in them naming no open
// stream.
//
// Flow control counts the bytes of messages from the stream's start,
// each way: the receiver grants up to which byte it accepts (its window,
// default 1 MiB, less what its reader has not taken yet), the sender
// sends nothing beyond, and SendMsg waits while its queue holds what the
// credit lets go plus one message. A reader that stops thus bounds its
// peer's memory and its own: a stream holds at most a window and one
// message each way, on either side, and a server's streams together at
// most MaxStreamMemory (default 256 MiB) unread, those of one client
// host at most MaxStreamMemoryPerHost (default a quarter of it), past
// which a stream fails with ResourceExhausted. Credit travels in every frame and
// response; a reader that frees half its window, or an eighth while its
// peer has less than an eighth left, tells the other side at once (the
// client in a data frame, the server in its answer to the pull).
// Messages of any length up to the receiver's limit (MaxRecvMsgSize,
// grpc.MaxCallRecvMsgSize; default 4 MiB, as in grpc-go) are cut into
// chunks across frames; the receiver holds only the bytes that arrived,
// within the limit and the credit, never what a peer claims.
//
// Where this departs from gRPC over HTTP/2, and why:
//
//   - The stream's first RPC opens it; a client-streaming or
//     bidirectional call learns the server's window and may pull only
//     when that RPC's response arrives, so before it the client sends
//     at most 64 KiB (HTTP/2's initial window).
//   - The server cannot speak unasked: it answers pulls. A pull set it
//     holds for StreamKeepalive (1 s) with nothing to say is answered
//     empty, and a stream whose client sends neither one of its frames
//     nor a pull set for four times as long is taken as gone: the
//     handler's context is canceled (Stats counts Abandoned). A client
//     whose streams to a server are idle thus costs one small RPC per
//     second, and the RESENDs with which its socket asks about the pull
//     set while the server holds it, each answered BUSY, their delay
//     doubling each time: 8 a second, however many streams it has open
//     (3,000 idle streams: 10 RPCs in 10 s, against 20,000 when each
//     stream pulled with an RPC of its own; TestPullSetManyIdleStreams).
//   - Flow control is per stream, with a fixed window (grpc-go grows
//     its windows by estimating the bandwidth-delay product); there is
//     no connection window, since there is no connection: each peer's
//     sockets bound their memory (sock.Limits).
//   - One data frame in flight keeps the client's messages in order
//     without a reordering buffer, at a price: a stream's rate depends
//     on batching, and a handler that holds a data frame (it took the
//     messages and neither answers nor asks for more, computing) keeps
//     the client's next frame, with the messages queued meanwhile,
//     waiting until it does, or for 2 ms, whichever comes first.
//   - A stream's data frame may wait for an earlier frame of another
//     stream to the same server (one in flight per server, two while
//     the first is slow), where HTTP/2 would write it at once on the
//     connection.
//   - The server holds one Homa RPC per ClientConn (the pull set),
//     and one per stream whose data frame waits for its handler's
//     reaction, so the socket's limit on pending replies
//     (sock.Limits.PendingReplies, default 2,000 per client host)
//     bounds a host's streams that are sending at once, not those open;
//     the server's bound on open streams is MaxConcurrentCalls'
//     (default 10,000 per socket), and one client host's, whatever its
//     ports, MaxStreamsPerHost (default a fifth of that): grpc-go bounds
//     the streams of a connection (MaxConcurrentStreams, unbounded by
//     default), and there is no connection here, only hosts and ports,
//     so one host that opens streams and keeps them alive, or fills
//     them, leaves the other hosts room, as the engine shares its own
//     bounds among hosts (sock.Limits).
//   - A pull that crosses its stream's end (the answer with the end is
//     still on its way) is answered with the stream's status, which the
//     server remembers for its last 1,024 streams per socket.
//
// # Large messages
//
// A unary call whose request does not fit in one Homa message
// (1,000,000 bytes with the framing) is made as a stream: the open
// and data frames carry the request in chunks, and the response comes
// back through pulls. A response that does not fit is known only when
// the handler has returned: the server keeps it as a stream that has
// ended, named by the call's id (every unary request carries one), and
// answers the request as it would a pull, with the header metadata and
// the first chunks; the client pulls the rest. Until it is pulled (or
// its client is taken as gone) the response counts against the server's
// MaxStreamMemory and its client host's share of it, with what its
// streams hold unread, and is one of the host's streams: one that does
// not fit fails the call with ResourceExhausted. (It is still encoded whole
// first, within MaxSendMsgSize, as grpc-go encodes a message.) Either way the receiver
// commits memory only for bytes that arrived, within its message limit
// and the credit it gave; no length a peer announces reserves anything
// (the frames carry no message lengths at all: a message ends with the
// chunk flagged last). A message over the limit fails the call with
// ResourceExhausted once its bytes pass the limit.
//
// # Spinning
//
// The sockets spin while they wait (sock.Config.Polling, PollAdaptive by
// default): a caller spins for its response, and a server while its
// requests come close together, which is what makes a unary call one at
// a time several times faster than grpc-go's. A service whose many
// streams keep every processor busy does better parking at once: give
// Dial (or DialTarget) and the server's sock.Open
// &sock.Config{Polling: sock.PollNever}. On two processors, 1 KB
// messages on bidirectional streams went at 1.83-1.92 times grpc-go's
// rate that way against 1.59-1.80 with the default (the rounds of two
// alternated pairs of runs, docs/performance.md, 2026-11-29, 10:55),
// for 12.5-12.6 µs of CPU per message against 12.9-15.8: a spinner
// takes the processor from goroutines and threads with work to do.
//
// # Wire framing
//
// Stream frames, their answers and batches of them: stream_frame.go and
// batch_frame.go have the layouts. A batch is a Homa request of kind 5
// (version 1, kind, a 2-byte count of 2 to 64, 4 reserved bytes, then
// each frame as a 4-byte length and the frame, a data frame of kind 3),
// answered by a response of kind 6 laid out the same way, an answer (a
// kind 4 stream response) per frame in the batch's order. A server
// refuses a batch with too many frames, a length beyond the message, or
// a frame that is not a valid data frame, answering with one stream
// response ending every stream in it with codes.Internal (counted in
// Malformed and BadBatches). A frame alone is sent as before, so a
// server takes the frames of clients of the previous version; a server
// of the previous version answers a batch as an unknown request (a
// unary response, kind 2), having taken none of its frames, and the
// client sends them again, alone, and sends that server no batch again.
//
// Each unary call is one Homa RPC. The request message holds a 20-byte
// header (version, kind, codec name length, flags, method length,
// metadata entry count and length, and the timeout in nanoseconds), then,
// as its flags say, the call's id, the compressor's name and the
// compressors the caller accepts, then the
// codec name
// (the content subtype, empty for proto), the method ("/package.Service/
// Method"), the metadata entries and the encoded request. The response
// holds a 28-byte header (version, kind, flags (payload compressed),
// status code, lengths of the
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

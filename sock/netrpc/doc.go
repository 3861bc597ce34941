// Package netrpc runs net/rpc over Homa: existing net/rpc services and
// clients work unchanged, each call carried by one Homa RPC instead of a
// stream of requests on a TCP connection.
//
// The model: a server socket's requests are read by a ServerCodec and
// served by an rpc.Server; a client socket sends each call as a Homa
// request to one server, and the response completes the call.
//
//	srv := rpc.NewServer()
//	srv.Register(new(Arith))
//	s, _ := sock.Open(netip.MustParseAddrPort("127.0.0.1:4000"), nil)
//	go netrpc.Serve(srv, s) // until s is closed
//
//	client, _ := netrpc.Dial(s.LocalAddr(), nil)
//	defer client.Close()
//	err := client.Call("Arith.Multiply", &Args{7, 8}, &reply)
//
// What travels: the request is the service method and the argument, the
// response the method, the error string of the call (an rpc.ServerError
// at the client) and the reply; the framing is in frame.go, the bodies
// are gob (see below). net/rpc's sequence number never travels: the
// client codec sends each call as a Homa RPC whose completion cookie is
// the sequence number, and the server codec numbers the requests it
// reads and keeps each one's Homa RPC under its number until the
// response. Both ends work on either sock backend (the engine over raw IP
// or UDP, or the Linux kernel module).
//
// Encoding: encoding/gob as net/rpc uses it, except that each body is a
// self-contained gob stream (its type descriptions, then the value),
// since Homa RPCs complete independently and in any order. Each end
// keeps its gob encoders and decoders from call to call, so describing
// the types again costs a few dozen bytes per message and no work (see
// body.go).
//
// Large messages: a request or reply longer than one Homa message
// (1,000,000 bytes) travels as several, up to Config.MaxMessage (8 MiB
// by default; set it at both ends to go further, up to 1 GiB). The
// client sends a large request in parts of about 1 MB, each a Homa RPC
// of its own, at most eight in flight per call; the server acknowledges
// each part, and answers the call on the Homa RPC of the part that
// completes it. A large reply goes back as its first part and its
// length; the client pulls the rest, eight parts at a time (part.go has
// the layout). Each part is an independent Homa RPC, so Homa's
// shortest-first scheduling still lets small calls pass large ones.
//
// Memory for large messages is counted as their bytes arrive, never
// from the lengths their parts claim: a part claiming 8 MB costs the
// server what it brought (counted as the capacity of the buffers that
// hold it). The parts stay in the Homa messages that brought them, and
// the message is decoded from them in place, so a large message holds
// what arrived, each byte is copied once, and the buffers go back to
// the socket's pool. The server holds large requests being assembled
// and large replies waiting to be pulled within Config.LargeMemory and
// a per-host share (LargeMemoryPerPeer); a request that would exceed
// them, or MaxMessage, is refused and its call fails with an error
// naming the limit. Parts that repeat or overlap others, claim another
// length than their call's first part, or fall outside the message
// refuse their call; parts of a call are matched by client host, port
// and call number, so other calls and other clients cannot join them.
// A request missing parts, or a reply nobody pulls, is dropped after
// Config.LargeTimeout (10 s). Server.Drops counts what was refused, by
// reason. The client pulls only the parts it needs and checks each
// answer against what it asked for, so a server cannot make it hold
// more than the reply's length, within its own MaxMessage. Unlike eRPC,
// which carries a large message as one message of many packets, this
// layer builds on Homa messages of at most 1 MB: each part is reliable
// and flow-controlled by Homa, and only the assembly is the layer's.
//
// Errors: an error returned by the service reaches the caller as an
// rpc.ServerError, as over TCP. Errors of the transport are wrapped, so
// errors.Is finds them: a call longer than Config.MaxMessage fails
// alone with an error wrapping sock.ErrMessageTooLong that names the
// limit (a reply too long fails its call with a ServerError saying so).
//
// A server that is absent or stops answering fails the client the same
// way over every transport and backend: the Homa RPCs to it fail (over
// UDP at once with sock.ErrNoListener, as the network reports the
// closed port; over raw IP, when the server's host runs this engine or
// has no Homa, with sock.ErrPeerTimeout after sock.Config.PeerTimeout),
// and rpc.Client fails every call in progress with an error that names
// the server and matches both ErrServerUnavailable and that cause. The
// client then shuts down, as it does when a TCP connection breaks: its
// socket is closed, later calls return rpc.ErrShutdown, and the caller
// dials again, which succeeds at once (Homa has no connections) and
// calls the server once it is back. Close on the client or the server
// codec closes the socket and ends its goroutines.
//
// A client codec owns its socket and is its only reader (it receives
// responses of any RPC); give it a client socket of its own.
//
// Serving: Serve keeps a few goroutines waiting for requests, and the
// one that receives a request runs the call and replies itself, with no
// hand-off between goroutines; at most MaxConcurrentCalls run at once.
// NewServer does the same with a Config and a way to stop:
// Server.Shutdown refuses new calls (each fails at once with a
// ServerError saying the server is shutting down), lets the calls
// running finish and their replies go out, then closes the socket;
// Server.Close stops at once.
//
//	srv := netrpc.NewServer(rpcServer, s, nil)
//	go srv.Serve()
//	...
//	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
//	defer cancel()
//	srv.Shutdown(ctx) // or srv.Close()
//
// rpc.Server.ServeCodec(NewServerCodec(s)) works too, the way net/rpc
// serves a connection: one goroutine reads and every call runs in a new
// goroutine. Either way a request holds a server RPC in the socket until
// it is answered, so the socket's Limits.PendingReplies (default 10,000,
// 2,000 per client host) bounds the calls in progress too; beyond it
// requests are dropped and counted, and their clients retry.
package netrpc

// Package sock is the API Go programs use to speak Homa: a Socket sends
// requests, receives requests and responses, and replies, with the
// semantics of Linux Homa sockets (homa(7)) in Go idiom.
//
// A socket is either client-only (opened on port 0, it gets a client port
// from 32768 up) or bound to a server port (1..32767), in which case it
// also receives requests. Either kind may send requests.
//
//	s, err := sock.Open(netip.MustParseAddrPort("127.0.0.1:0"), nil)
//	if err != nil { ... }
//	defer s.Close()
//	resp, err := s.Call(ctx, server, []byte("hello"))
//
// Transports: raw IP protocol 146 (the real thing, interoperable with the
// Linux Homa module; needs CAP_NET_RAW), or Homa carried in UDP datagrams
// (no privileges; both ends must use it). Every method is safe for
// concurrent use by many goroutines.
//
// # Backends
//
// Config.Backend picks what runs the protocol. Engine, the default, is
// this module's user-space implementation (package homa) over the
// transport above. Kernel drives the Linux Homa kernel module instead:
// the socket is an IPPROTO_HOMA socket, the kernel does the protocol
// work, and the same methods behave the same way. Open fails with
// ErrNoKernelHoma when the running kernel lacks the module. Auto takes
// the kernel module when it is there (and Transport is Raw) and the
// engine otherwise: the two cannot both serve protocol 146 on one host,
// because the module claims every packet of that protocol for its own
// sockets. Socket.Backend says which one a socket got.
//
// On the kernel backend, Transport, Net and the engine's tuning in
// Config do not apply; LocalAddr reports the address given to Open (the module binds
// the port on every address); Stats counts RPCs and errors and leaves
// the packet-level counters zero, since the module keeps those for the
// whole host (/proc/net/homa_metrics). Messages are copied out of the
// module's receive buffer region as they arrive, so Message.Data belongs
// to the application as with the engine, and the region's pages go back
// to the kernel at once.
//
// # Many cores
//
// One engine socket does its protocol work on one CPU at a time.
// Config.Shards splits a UDP or raw IP socket into that many engines on
// one port, which as many CPUs run at once with nothing shared between
// them on the path of a packet: the kernel hands all the packets of one
// peer to one shard, and the socket sends to a peer from that shard.
// Run at least as many goroutines in Recv(Any) as there are shards. Ids
// stay unique per socket; Limits apply per shard; the shards grant from
// one budget of incoming bytes, one engine's.
//
// # Batches
//
// SendBatch and ReplyBatch send many requests or responses at once:
// on the engine their packets leave together, in one system call where
// the transport allows, and over UDP as few datagrams as segmentation
// offload makes them. A client with many RPCs in flight that starts the
// next ones from the responses Recv gave it, or a server answering the
// requests it took, saves a system call per message: take what is
// already complete without waiting (Recv with a context that has ended
// returns a ready message, or the context's error at once), then send
// the batch. A lone RPC gains nothing by waiting for others. A Batch
// (NewBatch) does the same for an event loop: its Send and Reply do
// their work at once (Send returns the id) and its Flush, before the
// loop waits, sends what the turn gathered. On the kernel backend they
// send one by one.
//
// # Buffers
//
// Send and Reply copy the message. SendOwned and ReplyOwned take the
// caller's buffer over instead, and NewBuffer hands out buffers from
// the engine's pool that those give back to it when the RPC ends: a
// program that builds each message in a buffer of its own (a protocol
// frame, an encoded response) then allocates none in steady state.
// Message.TakeData hands a received buffer over, to send it on.
//
// # Tests
//
// A socket whose Config.Network is an in-memory network (package
// memnet) sends its packets there instead of to the host: a program's
// tests can run clients and servers in one process, with the loss,
// duplication, reordering, delay and link rates they choose, and no
// privileges.
//
//	nw := memnet.New(memnet.Config{Loss: 0.01, Seed: 1})
//	cfg := &sock.Config{Network: nw}
//	srv, _ := sock.Open(netip.MustParseAddrPort("10.0.0.1:80"), cfg)
//	cli, _ := sock.Open(netip.MustParseAddrPort("10.0.0.2:0"), cfg)
package sock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"

	"github.com/homa-go/homa/homa"
	"github.com/homa-go/homa/homa/netio"
)

// Socket is a Homa socket.
type Socket struct {
	b    backend
	kind Backend // Engine or Kernel
}

// Open opens a socket on the local address addr. Port 0 makes a
// client-only socket with an assigned client port; ports 1..32767 make a
// server socket. The address family of addr (which may be unspecified,
// e.g. 0.0.0.0 or ::) decides between IPv4 and IPv6.
func Open(addr netip.AddrPort, cfg *Config) (*Socket, error) {
	if cfg == nil {
		cfg = &Config{}
	}
	if p := addr.Port(); p > MaxServerPort {
		return nil, fmt.Errorf("sock: local address %v: port %d is not a server port (1..%d; 0 assigns a client port): %w", addr, p, MaxServerPort, ErrBadAddress)
	}
	if int(cfg.Polling) >= len(enginePolling) {
		return nil, fmt.Errorf("sock: unknown polling mode %d (PollAlways, PollAdaptive or PollNever)", cfg.Polling)
	}
	if !addr.Addr().IsValid() {
		return nil, fmt.Errorf("sock: no local address (use 0.0.0.0 or :: for any): %w", ErrBadAddress)
	}
	if cfg.Network != nil {
		return openEngine(addr, cfg) // an in-memory network has no kernel module
	}
	switch cfg.Backend {
	case Engine:
		return openEngine(addr, cfg)
	case Kernel:
		if cfg.Shards > 1 {
			return nil, fmt.Errorf("sock: %d shards: sharding needs the engine backend", cfg.Shards)
		}
		return openKernel(addr)
	case Auto:
		if cfg.Transport != Raw || cfg.Shards > 1 {
			// Peers speaking Homa in UDP need the engine, and so
			// does a socket of several shards.
			return openEngine(addr, cfg)
		}
		s, err := openKernel(addr)
		if errors.Is(err, ErrNoKernelHoma) {
			return openEngine(addr, cfg)
		}
		return s, err
	}
	return nil, fmt.Errorf("sock: unknown backend %v", cfg.Backend)
}

// openEngine opens the transport's socket, or the in-memory network's,
// and an engine on it.
func openEngine(addr netip.AddrPort, cfg *Config) (*Socket, error) {
	var (
		conn netio.Conn
		err  error
	)
	opt := netOptions(cfg)
	if addr.Addr().IsLoopback() {
		// Loopback packets are already 64 KB: UDP GRO would coalesce
		// nothing and cost a copy of every packet.
		opt.DisableGRO = true
	}
	if cfg.Shards > 1 || cfg.Shards < 0 {
		if cfg.Shards < 0 || cfg.Shards > MaxShards || cfg.Network != nil {
			return nil, fmt.Errorf("sock: %d shards: sharding needs the host's network (raw IP or UDP) and 2..%d shards", cfg.Shards, MaxShards)
		}
		s, err := openShards(addr, cfg, &opt)
		if err != nil {
			return nil, fmt.Errorf("sock: open %d %s sockets on local address %v: %w", cfg.Shards, cfg.Transport, addr, err)
		}
		return s, nil
	}
	switch {
	case cfg.Network != nil:
		conn, err = cfg.Network.Open(addr.Addr(), addr.Port())
	case cfg.Transport == Raw:
		conn, err = netio.OpenRaw(addr.Addr(), addr.Port(), &opt)
	case cfg.Transport == UDP:
		conn, err = netio.OpenUDP(addr.Addr(), addr.Port(), &opt)
	default:
		return nil, fmt.Errorf("sock: unknown transport %v", cfg.Transport)
	}
	if err != nil {
		what := cfg.Transport.String()
		if cfg.Network != nil {
			what = "in-memory"
		}
		return nil, fmt.Errorf("sock: open %s socket on local address %v: %w", what, addr, err)
	}
	return &Socket{b: engine{homa.NewEndpoint(conn, engineConfig(cfg))}, kind: Engine}, nil
}

// Backend reports what runs the socket: Engine or Kernel (never Auto).
func (s *Socket) Backend() Backend { return s.kind }

// LocalAddr returns the socket's address and Homa port.
func (s *Socket) LocalAddr() netip.AddrPort { return s.b.LocalAddr() }

// Send sends a request to the server at dst and returns the new RPC's id.
// The response is delivered by Recv, carrying cookie. Send copies req.
func (s *Socket) Send(dst netip.AddrPort, req []byte, cookie uint64) (id uint64, err error) {
	if err := checkServer(dst); err != nil {
		return 0, err
	}
	return s.b.Send(dst, req, cookie)
}

// checkServer refuses a request to a port no server may have: client
// ports (MinClientPort and up) only receive responses, so a request
// there would wait for a timeout.
func checkServer(dst netip.AddrPort) error {
	if p := dst.Port(); p > MaxServerPort {
		return &OpError{Op: "send", Peer: dst, Err: fmt.Errorf("%w: port %d is a client port; Homa servers listen on 1..%d",
			ErrBadAddress, p, MaxServerPort)}
	}
	return nil
}

// SendOwned is Send without the copy, for large requests: the socket
// takes req over and the caller must not touch it after the call, unless
// the call fails. The engine sends straight from req and recycles it into
// its buffer pool when the RPC ends; the kernel backend copies it as
// Send does.
func (s *Socket) SendOwned(dst netip.AddrPort, req []byte, cookie uint64) (id uint64, err error) {
	if err := checkServer(dst); err != nil {
		return 0, err
	}
	if o, ok := s.b.(owner); ok {
		return o.SendOwned(dst, req, cookie)
	}
	return s.b.Send(dst, req, cookie)
}

// Any makes Recv return the next message of any RPC.
const Any uint64 = 0

// Recv waits for the next complete message: with id Any, the next request
// (on a server socket) or response; with an RPC id from Send, that RPC's
// response. A client RPC that failed (aborted, peer timed out) comes back
// as a Message whose Err is set. Recv returns ctx.Err() when ctx ends
// first, and ErrClosed when the socket closes.
func (s *Socket) Recv(ctx context.Context, id uint64) (*Message, error) {
	return s.b.Recv(ctx, id)
}

// Reply sends resp as the response to the request req (from Recv). Reply
// copies resp.
func (s *Socket) Reply(req *Message, resp []byte) error {
	if !req.IsRequest() {
		return fmt.Errorf("%w: message %d is a response, not a request", ErrUnknownRPC, req.ID)
	}
	return s.b.Reply(req.Peer, req.ID, resp)
}

// ReplyOwned is Reply without the copy; it takes resp over as SendOwned
// takes req.
func (s *Socket) ReplyOwned(req *Message, resp []byte) error {
	if !req.IsRequest() {
		return fmt.Errorf("%w: message %d is a response, not a request", ErrUnknownRPC, req.ID)
	}
	if o, ok := s.b.(owner); ok {
		return o.ReplyOwned(req.Peer, req.ID, resp)
	}
	return s.b.Reply(req.Peer, req.ID, resp)
}

// Call sends req to dst and waits for the response. A failed RPC returns
// its error (an *OpError). If ctx ends first the RPC is aborted and an
// *OpError wrapping ctx.Err() returned. The engine sends req without
// copying it (req must not change while Call runs, as with any call
// that takes a buffer); Call returns once nothing reads req any more.
//
// Call has no deadline of its own: a server that is alive but slow (it
// answers BUSY while its handler runs) keeps the call waiting as long
// as it takes, as with Linux Homa. Only a peer that stops answering ends
// the call (ErrPeerTimeout). Give ctx a deadline to bound the wait.
func (s *Socket) Call(ctx context.Context, dst netip.AddrPort, req []byte) (*Message, error) {
	// req stays untouched until Call returns, so the engine sends it
	// without a copy, once Call makes sure nothing reads it any more.
	if err := checkServer(dst); err != nil {
		return nil, err
	}
	var id uint64
	var err error
	if bw, ok := s.b.(borrower); ok {
		var b homa.Borrow
		id, b, err = bw.SendBorrowed(dst, req, 0)
		defer b.Wait()
	} else {
		id, err = s.b.Send(dst, req, 0)
	}
	if err != nil {
		return nil, err
	}
	m, err := s.b.Recv(ctx, id)
	if err != nil {
		_ = s.b.Abort(id)
		if ctx.Err() != nil {
			err = &OpError{Op: "call", Peer: dst, ID: id, Err: err}
		}
		return nil, err
	}
	if m.Err != nil {
		return nil, m.Err
	}
	return m, nil
}

// Abort ends the client RPC id. A Recv waiting for this id returns a
// Message with Err ErrAborted; otherwise the RPC is forgotten and no
// later Recv returns it.
func (s *Socket) Abort(id uint64) error { return s.b.Abort(id) }

// Stats returns a snapshot of the socket's counters.
// On the kernel backend only the RPC and error counts and the current
// RPCs are filled in (see the package documentation).
func (s *Socket) Stats() Stats { return s.b.Stats() }

// Describe writes, for finding out why an RPC neither completes nor
// fails, what the engine holds for each of the socket's RPCs, one line
// each, at most limit lines: its state, what of its messages has been
// sent, granted and received, and when its timer is due. It reports
// false, writing nothing, on the kernel backend.
func (s *Socket) Describe(w io.Writer, limit int) bool {
	d, ok := s.b.(describer)
	if ok {
		d.Describe(w, limit)
	}
	return ok
}

// Close closes the socket. RPCs in progress end; goroutines blocked in
// Recv return ErrClosed. Close is idempotent.
func (s *Socket) Close() error { return s.b.Close() }

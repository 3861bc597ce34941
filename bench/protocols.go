package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"github.com/homa-go/homa/internal/tools/grpcecho"
	"github.com/homa-go/homa/internal/tools/rawfloor"
	"github.com/homa-go/homa/internal/tools/tcpecho"
	"github.com/homa-go/homa/sock"
)

// A protocol is one row of the bench report: a server and a client of
// one transport, compared with the others through the interfaces below.
// To add one, write its functions and list it in protocols.
type Protocol struct {
	name string // the report's label and what --proto and --vs select
	desc string
	// maxSize is the longest message it carries.
	maxSize int
	// homa says the protocol is Homa: its server ports are 1..32767.
	homa bool
	// raw says it needs raw IP sockets (CAP_NET_RAW).
	raw bool
	// maxClients, if not 0, is the most clients one run may have.
	maxClients int
	// layer says it is an RPC layer over a transport (erpc, the gRPC
	// stub), run when named (or with the set "layers"), not by default.
	layer bool
	// clip says that requests of a workload's sizes beyond maxSize are
	// cut to it rather than the protocol skipped: an RPC layer's headers
	// take a few bytes of the largest Homa message (the distributions
	// reach it).
	clip bool
	// serve starts a server on addr (port 0: a free port), and dial
	// makes a client of the server at addr. Both are nil for a protocol
	// measured on loopback only, one RPC at a time, with loopback.
	serve func(ctx context.Context, addr netip.AddrPort, o ServerOptions) (Server, error)
	dial  func(ctx context.Context, addr netip.AddrPort, o clientOptions) (client, error)
	// loopback starts a server on host and returns a client of it;
	// closing the client stops the server. A protocol with loopback
	// takes one RPC at a time and plain echoes only.
	loopback func(ctx context.Context, host netip.Addr) (client, error)
	// rate, for a loopback protocol measured in throughput mode too,
	// starts a server on host and returns an asyncClient of it with
	// clients sockets; closing it stops the server. rateMaxSize is the
	// longest message it carries.
	rate        func(ctx context.Context, host netip.Addr, clients int) (client, error)
	rateMaxSize int
}

// Name is the protocol's name in reports and in ParseProtocols' lists.
func (p Protocol) Name() string { return p.name }

// MaxSize is the longest message the protocol carries.
func (p Protocol) MaxSize() int { return p.maxSize }

// Homa reports whether the protocol is Homa's, whose server ports are
// 1..32767.
func (p Protocol) Homa() bool { return p.homa }

// Raw reports whether the protocol needs raw IP sockets (CAP_NET_RAW).
func (p Protocol) Raw() bool { return p.raw }

// LoopbackOnly reports whether the protocol is measured on loopback in
// bench's process only, with no server of its own for Serve or a
// Target: one RPC at a time, and in throughput mode too when it has a
// rate client.
func (p Protocol) LoopbackOnly() bool { return p.loopback != nil }

// MeasuredIn reports whether the protocol can be measured in mode.
func (p Protocol) MeasuredIn(mode string) bool {
	return !p.LoopbackOnly() || mode == Latency || mode == Throughput && p.rate != nil
}

// ServerOptions configure a server (of a run, or of Serve).
type ServerOptions struct {
	ReplySize int         // >0: replies of this many bytes, else echoes
	Engine    sock.Config // Homa's engine tuning (its transport is set per protocol)
}

// clientOptions configure the clients of bench.
type clientOptions struct {
	conns       int         // TCP: connections in each client's pool
	Engine      sock.Config // Homa's engine tuning (its transport is set per protocol)
	index       int         // the client's number in the run, from 0
	outstanding int         // RPCs the client will have in flight at once
	// shared is what the run's clients share (erpc's Nexus); nil: none
	// is shared.
	shared *clientShared
}

// A Server is the server side of a protocol.
type Server interface {
	Addr() netip.AddrPort // where clients send
	Requests() uint64     // answered so far
	Close() error
}

// Serve starts a server of p on addr (port 0: a free one; of
// FreePortFirst..FreePortLast for Homa) until ctx ends or it is closed.
// A LoopbackOnly protocol has none: an error.
func Serve(ctx context.Context, p Protocol, addr netip.AddrPort, o ServerOptions) (Server, error) {
	if p.serve == nil {
		return nil, fmt.Errorf("%s has no server of its own", p.name)
	}
	return p.serve(ctx, addr, o)
}

// ServerSocket is the Homa socket of a server, for its metrics; nil for
// TCP and gRPC, and for erpc, whose Nexus keeps its sockets.
func ServerSocket(srv Server) *sock.Socket {
	switch s := srv.(type) {
	case *echoServer:
		return s.s
	case stubHomaServer:
		return s.sock
	}
	return nil
}

// client is the client side of a protocol. Unless the protocol is
// loopbackOnly, any number of goroutines may call at once, each with its
// own lane.
type client interface {
	// call sends req and returns the response, valid until the lane's
	// next call. req must not change until call returns.
	call(ctx context.Context, l *lane, req []byte) ([]byte, error)
	Close() error
}

// lane is what one goroutine keeps from call to call: the buffer a
// response is read into, or Homa's last response message, recycled on
// the next call, or the hold on a serial client whose buffer holds the
// last response.
type lane struct {
	buf  []byte
	msg  *sock.Message
	held *sync.Mutex
}

// release recycles the last response.
func (l *lane) release() {
	if l.msg != nil {
		l.msg.Release()
		l.msg = nil
	}
	if l.held != nil {
		l.held.Unlock()
		l.held = nil
	}
}

// protocols lists every protocol bench knows, in report order.
var protocols = []Protocol{
	homaProtocol("homa", sock.Raw),
	homaProtocol("homa-udp", sock.UDP),
	{
		name: "tcp", maxSize: sock.MaxMessage,
		desc:  "Go TCP: 4-byte length prefix, a pool of connections per client (one RPC at a time on each), TCP_NODELAY",
		serve: serveTCP, dial: dialTCP,
	},
	{
		name: "grpc", maxSize: sock.MaxMessage,
		desc:  "gRPC-go unary calls with a bytes codec, one HTTP/2 connection per client",
		serve: serveGRPC, dial: dialGRPC,
	},
	erpcProtocol("erpc", sock.Raw),
	erpcProtocol("erpc-udp", sock.UDP),
	stubHomaProtocol("stub-homa", sock.Raw),
	stubHomaProtocol("stub-homa-udp", sock.UDP),
	stubTCPProtocol,
	streamHomaProtocol("stream-homa", sock.Raw),
	streamHomaProtocol("stream-homa-udp", sock.UDP),
	streamTCPProtocol,
	{
		name: "udp", maxSize: udpMaxDatagram - 20,
		desc:     "Go UDP echo: one datagram each way (a floor for a datagram stack in Go)",
		loopback: openUDP,
	},
	{
		name: "floor", maxSize: rawfloor.MaxMessage, raw: true,
		desc: "raw IP protocol 253, no protocol logic, both ends busy-polling in one process (the floor for raw sockets): " +
			"one round trip at a time; in throughput mode one packet each way per RPC, up to 64 packets per system call, " +
			"one goroutine driving every client socket",
		loopback: openFloor,
		rate:     openFloorRate, rateMaxSize: rawfloor.MaxRatePayload,
	},
}

// DefaultProtocols are the protocols a run of mode measures when none
// are named: every transport it supports, the RPC layers left out.
func DefaultProtocols(mode string) []Protocol {
	var out []Protocol
	for _, p := range protocols {
		if !p.layer && p.MeasuredIn(mode) {
			out = append(out, p)
		}
	}
	return out
}

// ProtocolSet is the comma-separated list of the members of the protocol set
// name (for ParseProtocols), or "".
func ProtocolSet(name string) string { return protocolSets[name] }

// protocolSets are names --proto takes for several protocols at once.
var protocolSets = map[string]string{
	// layers compares the RPC layers with bare Homa on each transport,
	// and the gRPC stub over Homa with the same stub over gRPC-go/TCP.
	"layers": "homa,erpc,homa-udp,erpc-udp,stub-homa,stub-homa-udp,stub-tcp",
	// streams: gRPC streaming over Homa against gRPC-go/TCP.
	"streams": "stream-homa,stream-homa-udp,stream-tcp",
}

// ProtocolNames lists the names of the protocols that pass keep.
func ProtocolNames(keep func(Protocol) bool) string {
	var names []string
	for _, p := range protocols {
		if keep(p) {
			names = append(names, p.name)
		}
	}
	return strings.Join(names, ",")
}

// MaxSize is the longest message any protocol carries: the longest
// request size worth asking for (a protocol that carries less is left
// out of a run that asks for more).
func MaxSize() int {
	n := 0
	for _, p := range protocols {
		n = max(n, p.maxSize)
	}
	return n
}

// LookupProtocol finds a protocol by name.
func LookupProtocol(name string) (Protocol, bool) {
	i := slices.IndexFunc(protocols, func(p Protocol) bool { return p.name == name })
	if i < 0 {
		return Protocol{}, false
	}
	return protocols[i], true
}

// over is the engine configuration cfg with transport t.
func over(cfg sock.Config, t sock.Transport) *sock.Config {
	cfg.Transport = t
	return &cfg
}

// homaProtocol is Homa over transport t.
func homaProtocol(name string, t sock.Transport) Protocol {
	return Protocol{
		name: name, maxSize: sock.MaxMessage, homa: true, raw: t == sock.Raw,
		desc: "Homa over " + TransportName(t) + ", engine defaults",
		serve: func(ctx context.Context, addr netip.AddrPort, o ServerOptions) (Server, error) {
			s, err := openHomaServer(addr, over(o.Engine, t))
			if err != nil {
				return nil, err
			}
			return startEchoReply(ctx, s, o.ReplySize), nil
		},
		dial: func(_ context.Context, addr netip.AddrPort, o clientOptions) (client, error) {
			c, err := DialHoma(addr, over(o.Engine, t))
			if err != nil {
				return nil, err
			}
			return c, nil
		},
	}
}

// echoListener is an echo server on a TCP listener: Go TCP's, gRPC-go's
// and the gRPC stub's.
type echoListener interface {
	Addr() net.Addr
	Served() int64
	Close()
}

// listenerServer is an echoListener as a server of bench.
type listenerServer struct{ s echoListener }

func (l listenerServer) Addr() netip.AddrPort { return listenAddr(l.s.Addr()) }
func (l listenerServer) Requests() uint64     { return uint64(l.s.Served()) }
func (l listenerServer) Close() error         { l.s.Close(); return nil }

// serveOnTCP listens on addr and starts the echo server that start makes
// on the listener.
func serveOnTCP[S echoListener](addr netip.AddrPort, start func(net.Listener) S) (Server, error) {
	ln, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(addr))
	if err != nil {
		return nil, err
	}
	return listenerServer{start(ln)}, nil
}

// serveTCP starts the Go TCP server.
func serveTCP(_ context.Context, addr netip.AddrPort, o ServerOptions) (Server, error) {
	return serveOnTCP(addr, func(ln net.Listener) *tcpecho.Server {
		return tcpecho.ServeWith(ln, tcpecho.Options{ReplySize: o.ReplySize})
	})
}

// tcpClient is a pool of connections to a Go TCP server.
type tcpClient struct{ p *tcpecho.Pool }

func dialTCP(ctx context.Context, addr netip.AddrPort, o clientOptions) (client, error) {
	p, err := tcpecho.Dial(ctx, addr.String(), o.conns)
	if err != nil {
		return nil, err
	}
	return tcpClient{p}, nil
}

func (t tcpClient) call(ctx context.Context, l *lane, req []byte) ([]byte, error) {
	return t.p.Call(ctx, req, &l.buf)
}

func (t tcpClient) Close() error { return t.p.Close() }

// serveGRPC starts the gRPC server.
func serveGRPC(_ context.Context, addr netip.AddrPort, o ServerOptions) (Server, error) {
	return serveOnTCP(addr, func(ln net.Listener) *grpcecho.Server {
		return grpcecho.Serve(ln, grpcecho.Options{ReplySize: o.ReplySize})
	})
}

// grpcClient is one gRPC client connection.
type grpcClient struct{ c *grpcecho.Client }

func dialGRPC(_ context.Context, addr netip.AddrPort, _ clientOptions) (client, error) {
	c, err := grpcecho.Dial(addr.String())
	if err != nil {
		return nil, err
	}
	return grpcClient{c}, nil
}

func (g grpcClient) call(ctx context.Context, l *lane, req []byte) ([]byte, error) {
	return g.c.Call(ctx, req, &l.buf)
}

func (g grpcClient) Close() error { return g.c.Close() }

// listenAddr is the address of a TCP listener.
func listenAddr(a net.Addr) netip.AddrPort {
	ap := a.(*net.TCPAddr).AddrPort()
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// serialClient makes a pinger, which serves one goroutine, a client. The
// response is copied into the lane, since the pinger reuses its buffer.
type serialClient struct {
	mu sync.Mutex
	p  pinger
}

// call returns the response in the pinger's own buffer, valid until the
// pinger's next round trip: the lane keeps the client until its next
// call or release (a copy would add a pass over the bytes to the
// floor's time).
func (s *serialClient) call(ctx context.Context, l *lane, req []byte) ([]byte, error) {
	l.release()
	s.mu.Lock()
	resp, err := s.p.RoundTrip(ctx, req)
	if err != nil {
		s.mu.Unlock()
		return nil, err
	}
	l.held = &s.mu
	return resp, nil
}

func (s *serialClient) Close() error { return s.p.Close() }

// floorPinger is the raw-socket floor as a pinger.
type floorPinger struct{ p *rawfloor.Pair }

// openFloorPair starts the floor; DenyRaw replaces it to play a host that
// refuses raw sockets.
var openFloorPair = rawfloor.Open

func openFloor(_ context.Context, host netip.Addr) (client, error) {
	p, err := openFloorPair(host)
	if err != nil {
		return nil, err
	}
	return &serialClient{p: floorPinger{p}}, nil
}

func (f floorPinger) RoundTrip(ctx context.Context, req []byte) ([]byte, error) {
	return f.p.RoundTrip(ctx, req)
}

func (f floorPinger) Close() error { return f.p.Close() }

// notPermitted reports whether err is a refused raw socket, of Homa or
// of the floor, or a platform without them.
func notPermitted(err error) bool {
	return errors.Is(err, sock.ErrPermission) || errors.Is(err, rawfloor.ErrPermission) ||
		errors.Is(err, errors.ErrUnsupported)
}

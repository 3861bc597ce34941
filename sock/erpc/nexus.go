package erpc

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/homa-go/homa/sock"
)

// HandlerMode says where a request handler runs.
type HandlerMode uint8

const (
	// Dispatch handlers run in the event loop of the Rpc the request
	// arrived at: no hand-off between goroutines, so they suit handlers
	// of a few microseconds. They must not block.
	Dispatch HandlerMode = iota
	// Background handlers run on one of the Nexus's worker goroutines,
	// so that long work does not hold up the event loop. They call
	// EnqueueResponse from the worker.
	Background
)

// Handler serves a request. It answers, now or later, with
// h.Rpc().EnqueueResponse.
type Handler func(h *ReqHandle)

type handlerEntry struct {
	fn   Handler
	mode HandlerMode
}

// Nexus is the per-process (or per-address) part of the layer: its
// address is where other processes reach its Rpcs, it holds the table of
// request handlers by request type, answers session management
// (connects and disconnects) on its own Homa socket with one goroutine,
// and runs the worker goroutines of background handlers.
type Nexus struct {
	cfg  Config
	addr netip.AddrPort
	sock *sock.Socket

	regMu    sync.Mutex
	frozen   bool // set by the first NewRpc: handlers is read-only after
	handlers [256]handlerEntry

	mu     sync.Mutex
	rpcs   [256]*Rpc
	closed bool

	bgq       chan *ReqHandle
	done      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once

	leases leaseTable // server side: the leases of clients
	hb     hbTable    // client side: the leases our Rpcs hold, to heartbeat
	wakeMu sync.Mutex
	wake   context.CancelFunc // ends the Nexus goroutine's wait

	connects, disconnects, refused, bad atomic.Uint64
	refusedPerHost                      atomic.Uint64
	leasesExpired, heartbeats           atomic.Uint64
}

// NexusStats are the counters of a Nexus's session management.
type NexusStats struct {
	Connects    uint64 // server sessions made
	Disconnects uint64 // server sessions ended by their client
	Refused     uint64 // connects refused: no such Rpc, or its table full
	// RefusedPerHost counts the connects of Refused refused because
	// their client host held its share of the Rpc's sessions or of the
	// Nexus's leases (MaxServerSessionsPerHost, MaxLeasesPerHost).
	RefusedPerHost uint64
	BadMessages    uint64 // management messages that did not parse, or of a wrong kind
	// Leases.
	Leases        int    // client leases held now (server side)
	LeasesExpired uint64 // leases forgotten for silence, with their sessions and records
	Heartbeats    uint64 // heartbeats sent (client side)
}

// Stats returns a snapshot of the Nexus's counters.
func (n *Nexus) Stats() NexusStats {
	return NexusStats{
		Connects:       n.connects.Load(),
		Disconnects:    n.disconnects.Load(),
		Refused:        n.refused.Load(),
		RefusedPerHost: n.refusedPerHost.Load(),
		BadMessages:    n.bad.Load(),
		Leases:         n.leases.len(),
		LeasesExpired:  n.leasesExpired.Load(),
		Heartbeats:     n.heartbeats.Load(),
	}
}

// NewNexus opens a Nexus at addr, a local address with a server port
// (1..32767) on which it answers session management. It starts the
// session-management goroutine and cfg.BackgroundThreads workers.
func NewNexus(addr netip.AddrPort, cfg *Config) (*Nexus, error) {
	if cfg == nil {
		cfg = &Config{}
	}
	if addr.Port() == 0 || addr.Port() > maxServerPort {
		return nil, fmt.Errorf("erpc: Nexus port %d: must be a server port, 1..%d: %w", addr.Port(), maxServerPort, sock.ErrBadAddress)
	}
	c, err := cfg.withDefaults(addr.Port())
	if err != nil {
		return nil, err
	}
	n := &Nexus{cfg: c, addr: addr, done: make(chan struct{})}
	n.leases.byID = make(map[uint64]*lease)
	n.hb.byAddr = make(map[netip.AddrPort]*hbPeer)
	n.hb.byCookie = make(map[uint64]*hbPeer)
	n.sock, err = n.open(addr)
	if err != nil {
		return nil, fmt.Errorf("erpc: open Nexus socket: %w", err)
	}
	n.bgq = make(chan *ReqHandle, c.BackgroundQueue)
	n.wg.Add(1 + c.BackgroundThreads)
	go n.serve()
	for range c.BackgroundThreads {
		go n.work()
	}
	return n, nil
}

// open opens a Homa socket as configured.
func (n *Nexus) open(addr netip.AddrPort) (*sock.Socket, error) {
	if n.cfg.Open != nil {
		return n.cfg.Open(addr)
	}
	return sock.Open(addr, n.cfg.Socket)
}

// Addr is the Nexus's address: what CreateSession takes.
func (n *Nexus) Addr() netip.AddrPort { return n.addr }

// Register installs the handler of a request type. Every handler must be
// registered before the first Rpc is created (the table is then fixed, so
// event loops read it without locks). A Background handler needs
// Config.BackgroundThreads > 0.
func (n *Nexus) Register(reqType uint8, fn Handler, mode HandlerMode) error {
	if fn == nil {
		return errors.New("erpc: nil handler")
	}
	if mode == Background && n.cfg.BackgroundThreads == 0 {
		return &ConfigError{"BackgroundThreads", "a background handler needs at least one worker"}
	}
	if mode != Dispatch && mode != Background {
		return fmt.Errorf("erpc: unknown handler mode %d", mode)
	}
	n.regMu.Lock()
	defer n.regMu.Unlock()
	if n.frozen {
		return ErrRegisterTooLate
	}
	n.handlers[reqType] = handlerEntry{fn, mode}
	return nil
}

// NewRpc creates the Rpc with the given id, which must be unused in this
// Nexus, opening its Homa socket: port RpcPortBase+id, or 256, 512, ...
// above while those are taken. sm, if not nil, is told about the Rpc's
// client sessions. The Rpc belongs to the calling goroutine (see Rpc).
func (n *Nexus) NewRpc(id uint8, sm SMHandler) (*Rpc, error) {
	n.regMu.Lock()
	n.frozen = true
	n.regMu.Unlock()

	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, ErrClosed
	}
	if n.rpcs[id] != nil {
		return nil, fmt.Errorf("%w: %d", ErrRpcIDInUse, id)
	}
	var (
		s   *sock.Socket
		err error
	)
	for p := int(n.cfg.RpcPortBase) + int(id); p <= maxServerPort; p += 256 {
		s, err = n.open(netip.AddrPortFrom(n.addr.Addr(), uint16(p)))
		if !errors.Is(err, sock.ErrPortInUse) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("erpc: open socket of Rpc %d: %w", id, err)
	}
	if s == nil {
		return nil, fmt.Errorf("erpc: open socket of Rpc %d: no free port from %d: %w", id, n.cfg.RpcPortBase, sock.ErrPortInUse)
	}
	r := newRpc(n, id, s, sm)
	n.rpcs[id] = r
	return r, nil
}

// forget removes a closing Rpc from the table.
func (n *Nexus) forget(r *Rpc) {
	n.mu.Lock()
	if n.rpcs[r.id] == r {
		n.rpcs[r.id] = nil
	}
	n.mu.Unlock()
}

func (n *Nexus) rpc(id uint8) *Rpc {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.rpcs[id]
}

// Close closes the Nexus: its socket and the sockets of its Rpcs close
// (their event loops return ErrClosed; each Rpc's owner should still call
// Close to run the continuations of what was pending), and the goroutines
// it started end before Close returns. A background handler still running
// is waited for. Close is idempotent.
func (n *Nexus) Close() error {
	n.closeOnce.Do(func() {
		n.mu.Lock()
		n.closed = true
		rpcs := n.rpcs
		n.mu.Unlock()
		for _, r := range rpcs {
			if r != nil {
				r.shutdown()
			}
		}
		n.sock.Close()
		close(n.done)
		n.wg.Wait()
	})
	return nil
}

// work runs background handlers until the Nexus closes.
func (n *Nexus) work() {
	defer n.wg.Done()
	for {
		select {
		case h := <-n.bgq:
			h.fn(h)
		case <-n.done:
			return
		}
	}
}

// serve answers session management and heartbeats, and runs the lease
// epochs, until the Nexus closes.
func (n *Nexus) serve() {
	defer n.wg.Done()
	var w waker
	defer w.stop()
	var wake context.Context
	for {
		if w.fired() {
			w.stop()
			n.tick(time.Now())
		}
		wake = n.armWake(wake)
		ctx := wake
		if at, ok := n.nextTick(); ok {
			ctx = w.until(wake, at)
		} else {
			w.stop()
		}
		m, err := n.sock.Recv(ctx, sock.Any)
		if err != nil {
			if ctx.Err() != nil {
				continue // a tick, or a kick
			}
			return // closed
		}
		if !m.IsRequest() {
			n.heartbeatReply(m) // the Nexus sends heartbeats only
			continue
		}
		n.manage(m)
	}
}

// manage answers one connect or disconnect.
func (n *Nexus) manage(m *sock.Message) {
	var h header
	var b [connectReplyLen]byte
	reply := header{kind: kindResponse}
	out := b[:0]
	if _, err := h.Parse(m.Data); err != nil {
		n.bad.Add(1)
		reply.status = statusBadRequest
		out = reply.Append(out)
	} else {
		switch h.kind {
		case kindConnect:
			out = n.connect(m, &h, out)
		case kindDisconnect:
			out = n.disconnect(m, &h, out)
		case kindHeartbeat:
			out = n.serveHeartbeat(m, out)
		default:
			n.bad.Add(1)
			reply.status = statusBadRequest
			out = reply.Append(out)
		}
	}
	_ = n.sock.Reply(m, out)
	m.Release()
}

// connect makes a server session at the Rpc a connect asks for, and
// appends the reply to out.
func (n *Nexus) connect(m *sock.Message, h *header, out []byte) []byte {
	reply := header{kind: kindConnectReply}
	var c connectBody
	if _, err := c.Parse(m.Data); err != nil {
		n.bad.Add(1)
		reply.status = statusBadRequest
		return reply.Append(out)
	}
	r := n.rpc(c.dstRpc)
	if r == nil {
		n.refused.Add(1)
		reply.status = statusNoSuchRpc
		return reply.Append(out)
	}
	l, made, st, share := n.leases.attach(m.Peer.Addr(), c.clientID, c.fresh, n.cfg.MaxLeases, n.cfg.MaxLeasesPerHost)
	if st != statusOK {
		n.refuse(share)
		reply.status = st
		return reply.Append(out)
	}
	num, token, st, share := r.acceptSession(m.Peer, &c, l)
	reply.status, reply.session, reply.token = st, num, token
	out = reply.Append(out)
	if st != statusOK {
		if made {
			n.leases.drop(l)
		}
		n.refuse(share)
		return out
	}
	n.connects.Add(1)
	body := connectReplyBody{port: r.LocalAddr().Port(), leaseMs: uint32(n.cfg.LeaseTimeout / time.Millisecond)}
	return body.Append(out)
}

// refuse counts a connect refused; share says for its host's share.
func (n *Nexus) refuse(share bool) {
	n.refused.Add(1)
	if share {
		n.refusedPerHost.Add(1)
	}
}

// disconnect ends a server session, and appends the reply to out.
func (n *Nexus) disconnect(m *sock.Message, h *header, out []byte) []byte {
	reply := header{kind: kindDisconnectReply}
	var d disconnectBody
	if _, err := d.Parse(m.Data); err != nil {
		n.bad.Add(1)
		reply.status = statusBadRequest
		return reply.Append(out)
	}
	reply.status = statusNoSession
	if r := n.rpc(d.dstRpc); r != nil {
		reply.status = r.dropSession(h.session, h.token, m.Peer)
	}
	if reply.status == statusOK {
		n.disconnects.Add(1)
	}
	return reply.Append(out)
}

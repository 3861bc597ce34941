package core

import (
	"net/netip"
	"time"

	"github.com/homa-go/homa/contract"
	"github.com/homa-go/homa/grant"
	"github.com/homa-go/homa/homa/wire"
	"github.com/homa-go/homa/pacer"
	"github.com/homa-go/homa/priority"
)

// Local says which endpoint a Core speaks for.
type Local struct {
	// Port is the local Homa port.
	Port uint16
	// IPv6 is set for an IPv6 endpoint (peers are IPv6 addresses);
	// otherwise peers are IPv4 (IPv4-mapped addresses are unmapped).
	IPv6 bool
	// FirstID seeds the client RPC ids: they count up in steps of 2 from
	// it, in the low 48 bits, with the port in the top 16 (see NewID).
	FirstID uint64
	// Buffers supplies packet and message buffers; nil uses the Go heap.
	// Messages and Holds give theirs back to it from any goroutine.
	Buffers contract.Buffers
	// Cache, if set, stands in front of Buffers for the buffers the core
	// both takes and frees itself (packets, incoming messages' storage,
	// copies of outgoing messages). Only the core's own calls use it,
	// which the caller serializes, so it needs no lock.
	Cache contract.Buffers
	// Seed keys the hash of the server RPC table, so that peers cannot
	// choose ids that collide in it: the shell gives a random one. 0
	// means a fixed seed (tests, simulations).
	Seed uint64
}

// Core is the protocol state of one Homa endpoint. See the package
// documentation.
type Core struct {
	cfg    Config
	port   uint16
	is4    bool
	bufs   contract.Buffers // the core's own: Cache, or Buffers
	shared contract.Buffers // where Messages and Holds go back: Buffers
	nextID uint64           // the low 48 bits of the last client id

	// now is the time of the current call and tick its tick count; out
	// collects its results.
	now  time.Duration
	tick uint64
	out  *Output

	clients   map[uint64]*rpc
	servers   servers
	peers     map[netip.Addr]*peer
	idlePeers list[peer]
	// peerExpiry lets idle peers go (peer.go).
	peerExpiry timer
	freeRPCs   []*rpc
	freeLow    int     // the fewest freeRPCs held since the last Trim (trim.go)
	peaks      peaks   // the tables' peaks, for Trim
	retired    []*Hold // Holds the core is done with, for reuse (hold.go)

	// Resource accounting (see Limits): receive storage, server RPCs
	// receiving and awaiting replies, and the heaviest peers by each.
	mem        int
	incoming   int
	pending    int
	replying   int // server RPCs in stateReplying
	prompt     int // of those, the ones whose host acknowledges promptly (AwaitsAcks)
	heavyMem   heavy
	heavyRPCs  heavy
	seen       seenTable // finished ids by client port (seen.go)
	solicited  map[serverKey]solicitation
	rc         recallState // refused requests, to ask for again (recall.go)
	timers     timerWheel
	rxPkt      wire.Packet
	rx         rxPacket
	rxRanks    []rank // the order of the batch being handled (rxorder.go)
	rxMsgs     []rxMsg
	tx         txOrder // the packets of the current call (txorder.go)
	ackScratch [wire.MaxAcks]wire.AckEntry
	// Work put off the path of messages until Idle (idle.go).
	lateAcks  []lateAck
	think     thinkGap // see quiet.go
	lateFrees []*rpc
	spare     *contract.Message
	// Receiving in place (land.go): the buffer lent to the next read,
	// and the message expected to go on.
	land       landing
	landHint   landHint
	landScore  int    // packets landed in place less those moved, bounded
	landProbes uint32 // calls of Lend while landScore is negative

	// The RESEND budget (see resendq.go): peers with RPCs waiting for a
	// slot, the timer that serves them, and what is left of the budget
	// of tick budgetTick-1.
	resends turns
	// needAcks are the RPCs waiting for a NEED_ACK slot (see ackq.go).
	needAcks    turns
	budgetTick  uint64
	resendsLeft int

	// sched decides the GRANTs for incoming messages; granting maps its
	// handles back to RPCs.
	sched    *grant.Scheduler
	granting map[grant.ID]*rpc
	lastGID  grant.ID
	grants   []grant.Grant
	// incomingLoan is what Config.Budget lends the scheduler beyond
	// its floor, and incomingBest the best remaining bytes the
	// core last told it (budget.go).
	incomingLoan int
	incomingBest uint32
	// pacer orders and throttles outgoing DATA when LinkMbps is set
	// (nil otherwise); pacing maps its handles back to RPCs; pacerAt is
	// when it may send what it holds back (0: nothing waits).
	pacer   *pacer.Pacer
	pacing  map[pacer.ID]*rpc
	lastPID pacer.ID
	pacerAt time.Duration
	// est learns our unscheduled cutoffs from incoming traffic.
	est Estimator

	// loopUnsched is the unscheduled bytes of messages to loopback
	// peers (Config.UnschedBytes).
	loopUnsched int

	stats  counters
	closed bool
}

// New returns a core for the endpoint local, configured by cfg.
func New(local Local, cfg Config) *Core {
	c := &Core{
		cfg:        cfg.WithDefaults(),
		port:       local.Port,
		is4:        !local.IPv6,
		bufs:       local.Cache,
		shared:     local.Buffers,
		nextID:     local.FirstID &^ 1 & idSeqMask,
		clients:    make(map[uint64]*rpc),
		servers:    newServers(local.Seed),
		peers:      make(map[netip.Addr]*peer),
		seen:       newSeenTable(),
		solicited:  make(map[serverKey]solicitation),
		granting:   make(map[grant.ID]*rpc),
		idlePeers:  newList(func(p *peer) *links[peer] { return &p.idle }),
		rc:         recallState{peers: newList(recallLinks), timer: timer{idx: -1}},
		peerExpiry: timer{idx: -1},
		heavyMem: newHeavy(func(p *peer) *links[peer] { return &p.memLinks },
			func(p *peer) *int8 { return &p.memBucket }),
		heavyRPCs: newHeavy(func(p *peer) *links[peer] { return &p.rpcLinks },
			func(p *peer) *int8 { return &p.rpcBucket }),
	}
	c.timers.init(c.cfg.Tick)
	c.loopUnsched = c.cfg.UnschedBytes
	if cfg.UnschedBytes <= 0 {
		c.loopUnsched = loopbackUnschedBytes
	}
	c.resends = newTurns(func(p *peer) *links[peer] { return &p.rqLinks }, func(p *peer) *list[rpc] { return &p.resendQ })
	c.needAcks = newTurns(func(p *peer) *links[peer] { return &p.aqLinks }, func(p *peer) *list[rpc] { return &p.ackQ })
	if c.shared == nil {
		c.shared = heapBuffers{}
	}
	if c.bufs == nil {
		c.bufs = c.shared
	}
	c.sched = grant.New(c.cfg.Grant)
	c.incomingBest = noBest
	if c.cfg.Budget != nil {
		c.sched.SetLimit(c.cfg.Budget.Floor())
		c.sched.SetAhead(c.cfg.Budget.Ahead)
	}
	if c.cfg.LinkMbps > 0 {
		c.pacer = pacer.New(pacer.Config{RateMbps: c.cfg.LinkMbps, Link: c.cfg.Link})
		c.pacing = make(map[pacer.ID]*rpc)
	}
	c.est = c.cfg.Estimator
	if c.est == nil {
		c.est = priority.NewEstimator(c.cfg.Cutoffs)
	}
	c.stats.init()
	return c
}

// Config returns the configuration in effect (defaults filled in).
func (c *Core) Config() Config { return c.cfg }

// Port is the local Homa port.
func (c *Core) Port() uint16 { return c.port }

// Client ids: the port in the top 16 bits makes ids of different
// endpoints of a host disjoint (ports are reserved host-wide); the low 48
// bits count up in steps of 2 (client ids are even).
const (
	idPortShift = 48
	idSeqMask   = 1<<idPortShift - 1
)

// FirstID returns a FirstID for an endpoint started at the given wall
// time, in microseconds since the Unix epoch: ids keep increasing across
// processes that reuse a port, as long as each issues fewer than one RPC
// per half microsecond on average.
func FirstID(unixMicro int64) uint64 { return uint64(unixMicro) << 1 & idSeqMask }

func (c *Core) newID() uint64 {
	for {
		c.nextID = (c.nextID + 2) & idSeqMask
		if c.nextID != 0 { // id 0 means "none" on the wire (ack fields)
			return uint64(c.port)<<idPortShift | c.nextID
		}
	}
}

// begin starts a call at time now that appends to out.
func (c *Core) begin(now time.Duration, out *Output) {
	if now > c.now {
		c.now = now
		c.tick = uint64(now / c.cfg.Tick)
	}
	c.out = out
	c.txBegin()
}

// end finishes a call: the grant decisions its events called for,
// whatever the pacer may send now, and the SRPT order of the packets the
// call produced (txorder.go).
func (c *Core) end() {
	if !c.closed {
		c.decideGrants()
		if c.pacer != nil {
			c.pump()
		}
	}
	c.txEnd()
	c.out = nil
}

// at converts a tick count into a time.
func (c *Core) at(tick uint64) time.Duration { return time.Duration(tick) * c.cfg.Tick }

// canon returns addr as the core keys peers: unmapped for IPv4.
func (c *Core) canon(addr netip.Addr) netip.Addr {
	if c.is4 {
		return addr.Unmap()
	}
	return addr
}

// Send starts a client RPC that sends data to dst and returns its id.
// The core owns data from now on (it goes back to Buffers when sent and
// acknowledged); maxPacket is the largest Homa packet the path to dst
// carries. The response, or the RPC's failure, comes out as a Message
// carrying cookie.
func (c *Core) Send(dst netip.AddrPort, data []byte, cookie uint64, maxPacket int, now time.Duration, out *Output) (uint64, error) {
	id, _, err := c.send(dst, data, cookie, maxPacket, false, now, out)
	return id, err
}

// SendBorrowed is Send for data the caller keeps: the core reads data
// while the RPC lasts (and packets that point into it wait to be
// written) but never recycles it. The returned Hold is Done once nothing
// reads data any more. Below ZeroCopyMin bytes, where packets copy the
// message anyway, the core copies data at once and returns no Hold.
func (c *Core) SendBorrowed(dst netip.AddrPort, data []byte, cookie uint64, maxPacket int, now time.Duration, out *Output) (uint64, *Hold, error) {
	if len(data) < ZeroCopyMin && len(data) > 0 {
		own := c.bufs.Get(len(data))
		copy(own, data)
		id, _, err := c.send(dst, own, cookie, maxPacket, false, now, out)
		if err != nil {
			c.bufs.Put(own)
		}
		return id, nil, err
	}
	return c.send(dst, data, cookie, maxPacket, true, now, out)
}

func (c *Core) send(dst netip.AddrPort, data []byte, cookie uint64, maxPacket int, borrowed bool, now time.Duration, out *Output) (uint64, *Hold, error) {
	addr := c.canon(dst.Addr())
	switch {
	case len(data) == 0 || len(data) > contract.MaxMessage:
		return 0, nil, contract.ErrMessageTooLong
	case dst.Port() == 0 || !addr.IsValid() || addr.Is4() != c.is4:
		return 0, nil, contract.ErrBadAddress
	case c.closed:
		return 0, nil, contract.ErrClosed
	}
	c.begin(now, out)
	defer c.end()
	p := c.peerFor(addr)
	if p == nil {
		c.stats.Drops[contract.DropLimit]++
		return 0, nil, contract.ErrBusy
	}
	c.setMaxPacket(p, maxPacket)
	r := c.newRPC()
	r.id = c.newID()
	r.start = now
	r.peer = p
	r.port = dst.Port()
	r.cookie = cookie
	var h *Hold
	if borrowed {
		h = &Hold{buf: data}
		h.refs.Store(1)
	} else {
		h = c.holdFor(data)
	}
	r.out.init(data, p.unsched, p.maxPayload, h)
	c.holdPeer(p)
	if len(c.clients) == 0 {
		c.think.sent(now)
	}
	c.clients[r.id] = r
	c.stats.RPCsStarted++
	c.stats.hist.message(contract.Sent, contract.Request, len(data))
	c.sendMore(r)
	return r.id, h, nil
}

// setMaxPacket records the path's packet size to p.
func (c *Core) setMaxPacket(p *peer, maxPacket int) {
	p.maxPayload = max(maxPacket-wire.DataLen, 1)
}

// Reply sends data as the response to the request id from the client
// host peer. The core owns data from now on.
func (c *Core) Reply(peer netip.Addr, id uint64, data []byte, maxPacket int, now time.Duration, out *Output) error {
	if len(data) == 0 || len(data) > contract.MaxMessage {
		return contract.ErrMessageTooLong
	}
	if c.closed {
		return contract.ErrClosed
	}
	c.begin(now, out)
	defer c.end()
	r := c.servers.get(c.canon(peer), id)
	switch {
	case r == nil || r.state == stateActive:
		return contract.ErrUnknownRPC
	case r.state != stateServing:
		return contract.ErrAlreadyReplied
	}
	c.setMaxPacket(r.peer, maxPacket)
	c.setState(r, stateReplying)
	c.charge(r, -r.in.mem) // if the application never took the request
	r.in.mem = 0
	r.ak.Start(c.tick)
	c.armRPC(r, c.at(r.ak.Due(&r.peer.ack)))
	r.out.init(data, r.peer.unsched, r.peer.maxPayload, c.holdFor(data))
	c.stats.hist.message(contract.Sent, contract.Response, len(data))
	c.sendMore(r)
	return nil
}

// Delivered tells the core the application has taken the request id
// from peer: its storage is the application's now and no longer counts
// against the core's memory limits.
func (c *Core) Delivered(peer netip.Addr, id uint64) {
	r := c.servers.get(c.canon(peer), id)
	if r != nil && r.state == stateServing {
		c.charge(r, -r.in.mem)
		r.in.mem = 0
	}
}

// RequestLength is the length of client RPC id's request (0: no such
// RPC).
func (c *Core) RequestLength(id uint64) int {
	if r := c.clients[id]; r != nil {
		return int(r.out.length)
	}
	return 0
}

// Abort ends the client RPC id and returns the failure to hand to a
// goroutine waiting for it, if any (the core hands it to no one itself).
// The server is not told.
func (c *Core) Abort(id uint64, now time.Duration, out *Output) (*contract.Message, error) {
	if c.closed {
		return nil, contract.ErrClosed
	}
	r := c.clients[id]
	if r == nil {
		return nil, contract.ErrUnknownRPC
	}
	c.begin(now, out)
	defer c.end()
	c.stats.RPCsAborted++
	m := c.failure(r, "abort", contract.ErrAborted)
	c.freeClient(r)
	return m, nil
}

// Close ends every RPC and frees every buffer, after queuing in out an
// acknowledgment of every client RPC (so that servers free theirs at
// once). Later calls fail with ErrClosed.
func (c *Core) Close(now time.Duration, out *Output) {
	if c.closed {
		return
	}
	c.begin(now, out)
	c.runLate()
	// Acknowledge every client RPC, finished or not, so that servers free
	// them now: a server waiting for an acknowledgment otherwise asks
	// (NEED_ACK) a port nobody reads, for as long as nothing tells it
	// that the port is gone.
	for _, r := range c.clients {
		if r.peer.addAck(wireAck(r), c.tick) >= wire.MaxAcks {
			c.flushAcks(r.peer, r.port)
		}
	}
	for _, p := range c.peers {
		for len(p.acks) > 0 {
			c.flushAcks(p, p.acks[0].ServerPort)
		}
	}
	c.closed = true
	for _, r := range c.clients {
		c.freeClient(r)
	}
	for _, r := range c.servers.all() {
		c.freeServer(r, false)
	}
	c.landHint = landHint{}
	c.endLoan()
	c.returnIncoming()
}

// Next returns the earliest time the core has something to do, if any:
// the caller calls Tick then.
func (c *Core) Next() (time.Duration, bool) {
	at, ok := c.timers.next()
	if c.pacerAt > 0 && (!ok || c.pacerAt < at) {
		return c.pacerAt, true
	}
	return at, ok
}

// Tick runs every timer due at now and returns the next deadline, as
// Next does.
func (c *Core) Tick(now time.Duration, out *Output) (time.Duration, bool) {
	if c.closed {
		return 0, false
	}
	c.begin(now, out)
	c.runLate()
	for t := c.timers.popDue(c.now); t != nil; t = c.timers.popDue(c.now) {
		c.stats.TimersRun++
		switch {
		case t.rpc != nil:
			c.rpcTimer(t.rpc)
		case t.peer != nil:
			c.peerTimer(t.peer)
		case t == &c.needAcks.pump:
			c.pumpNeedAcks()
		case t == &c.seen.timer:
			c.expireSeen()
		case t == &c.peerExpiry:
			c.expirePeers()
		case t == &c.rc.timer:
			c.lapseReservations()
		default:
			c.pumpResends()
		}
	}
	if c.pacerAt > 0 && c.pacerAt <= c.now {
		c.pacerAt = 0
	}
	c.end()
	return c.Next()
}

// failure builds the Message that reports r's failure with err.
func (c *Core) failure(r *rpc, op string, err error) *contract.Message {
	pa := r.peerAddrPort()
	return &contract.Message{ID: r.id, Peer: pa, Cookie: r.cookie, Err: &contract.OpError{Op: op, Peer: pa, ID: r.id, Err: err}}
}

// fail ends the client RPC r with err, handing the failure to the
// application.
func (c *Core) fail(r *rpc, err error) {
	c.out.Messages = append(c.out.Messages, c.failure(r, "recv", err))
	c.freeClient(r)
}

// freeClient forgets a client RPC.
func (c *Core) freeClient(r *rpc) {
	c.detach(r)
	delete(c.clients, r.id)
	c.releasePeer(r.peer)
	c.recycle(r)
}

// freeServer forgets a server RPC. Once the application has seen the
// request (finished), its id is remembered so that a late duplicate of
// the request cannot start it again.
func (c *Core) freeServer(r *rpc, finished bool) {
	c.detach(r)
	if finished && r.state != stateActive {
		c.seenFor(r.peer.addr, r.port).Finish(r.id ^ 1)
	}
	c.setState(r, stateActive) // leaves the pending count
	c.leaveIncoming(r)
	c.servers.remove(r)
	c.releasePeer(r.peer)
	c.recycle(r)
}

// detach takes r out of the scheduler, the pacer, the timers and its
// peer's lists.
func (c *Core) detach(r *rpc) {
	c.unschedule(r)
	c.unpace(r)
	c.timers.disarm(&r.timer)
	c.unqueueResend(r)
	c.unqueueNeedAck(r)
	c.stopReceiving(r)
}

// armRPC makes r's timer fire no later than at.
func (c *Core) armRPC(r *rpc, at time.Duration) { c.timers.arm(&r.timer, at) }

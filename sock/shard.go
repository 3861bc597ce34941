package sock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/homa-go/homa/homa"
	"github.com/homa-go/homa/homa/netio"
)

// shards is the backend of a sharded socket (Config.Shards > 1): one
// engine per shard, each with its own core, lock, kernel socket and
// reader, all on one port. The kernel hands every packet of a peer to
// the shard netio.ShardOf names for it (netio.OpenUDPGroup), so the
// socket sends a request from the shard of its server, and replies
// from the shard of the request's client: every RPC lives in one shard
// from start to end, and nothing on its path is shared between shards.
//
// Ids: each shard's core issues its own, which on the wire are what one
// engine sends (see docs/design.md, "Sharding"). The socket's ids have
// the shard's index XOR-ed into their top 16 bits (the port's), which
// makes them unique per socket and tells Recv and Abort the shard.
type shards struct {
	eps  []*homa.Endpoint
	port uint64 // the port, where ids carry it
	// incoming is the budget of bytes granted and not yet received
	// that the shards' grant schedulers share (homa.SplitIncoming).
	incoming *homa.GrantBudget
	slots    []shardSlot
	spill    spill
	done     atomic.Bool
}

// shardSlot is what the goroutines in Recv(Any) know of one shard.
type shardSlot struct {
	// waiting counts the goroutines in Recv(Any) waiting in the shard,
	// and the helpers covering it (see recvAny).
	waiting atomic.Int32
	mu      sync.Mutex
	calls   []*anyCall // the waits here that may be moved (kick)
	helper  *helper    // the helper covering the shard, if any
	// cover runs, coverDelay after the last goroutine left the shard
	// while others wait elsewhere, and moves one of them here if the
	// shard is still empty (armed while coverArmed).
	cover      *time.Timer
	coverArmed atomic.Bool
	// How often the slow paths of Recv(Any) ran here: looks into the
	// shard, helpers, goroutines moved out.
	swept, helped, kicked atomic.Uint64
	_                     [64]byte
}

// anyCall is a Recv(Any) waiting in one shard.
type anyCall struct{ cancel context.CancelFunc }

// coverDelay is how long a shard may stay without a goroutine in
// Recv(Any) while others wait in other shards: long enough for a server
// loop to come back from its handler, so that the usual case costs no
// wake-up.
const coverDelay = 500 * time.Microsecond

// openShards opens a sharded engine socket over raw IP or UDP.
func openShards(addr netip.AddrPort, cfg *Config, opt *netio.Options) (*Socket, error) {
	var (
		conns []netio.Conn
		err   error
	)
	switch cfg.Transport {
	case Raw:
		conns, err = netio.OpenRawGroup(addr.Addr(), addr.Port(), cfg.Shards, opt)
	case UDP:
		conns, err = netio.OpenUDPGroup(addr.Addr(), addr.Port(), cfg.Shards, opt)
	default:
		err = fmt.Errorf("unknown transport %v", cfg.Transport)
	}
	if err != nil {
		return nil, err
	}
	g := &shards{port: uint64(conns[0].Port()), slots: make([]shardSlot, len(conns))}
	ecfg := engineConfig(cfg)
	budget := homa.SplitIncoming(ecfg.Grant.WithDefaults().MaxIncoming, len(conns))
	g.incoming = budget
	// The shards learn one set of priority cutoffs from all the
	// socket's traffic.
	cutoffs := homa.NewSharedCutoffs(ecfg.Cutoffs)
	var link *homa.SharedLink
	if ecfg.LinkMbps > 0 {
		// The shards send through one link: their pacers share its
		// account, in one clock.
		link, ecfg.Epoch = homa.NewSharedLink(len(conns)), time.Now()
	}
	for i, c := range conns {
		ecfg.Budget = budget.Shard(i)
		ecfg.Estimator = cutoffs.Shard()
		if link != nil {
			ecfg.Link = link.Shard(i)
		}
		g.eps = append(g.eps, homa.NewEndpoint(c, ecfg))
		g.slots[i].cover = time.AfterFunc(time.Hour, func() { g.covered(i) })
		g.slots[i].cover.Stop()
	}
	return &Socket{b: g, kind: Engine}, nil
}

// MaxShards is the most engines one socket may have (Config.Shards).
const MaxShards = netio.MaxShards

// Shards returns how many engines the socket runs (Config.Shards): 1
// for one engine and for the kernel backend.
func (s *Socket) Shards() int {
	if g, ok := s.b.(*shards); ok {
		return len(g.eps)
	}
	return 1
}

var (
	_ backend  = (*shards)(nil)
	_ owner    = (*shards)(nil)
	_ borrower = (*shards)(nil)
)

func (g *shards) LocalAddr() netip.AddrPort { return g.eps[0].LocalAddr() }

// of is the shard of peer.
func (g *shards) of(peer netip.AddrPort) int { return netio.ShardOf(peer, len(g.eps)) }

// id is the socket's id of shard k's client RPC wire.
func (g *shards) id(k int, wire uint64) uint64 { return wire ^ uint64(k)<<48 }

// wire is the shard of the socket's client RPC id and its id there.
func (g *shards) wire(id uint64) (int, uint64, bool) {
	k := id>>48 ^ g.port&0xffff
	if k >= uint64(len(g.eps)) {
		return 0, 0, false
	}
	return int(k), id ^ k<<48, true
}

// fix gives a message of shard k, and an error about one of its RPCs,
// the socket's ids.
func (g *shards) fix(k int, m *Message, err error) (*Message, error) {
	if m != nil && !m.IsRequest() {
		m.ID = g.id(k, m.ID)
		if op := (*OpError)(nil); errors.As(m.Err, &op) && op.ID != 0 && op.ID&1 == 0 {
			op.ID = g.id(k, op.ID)
		}
	}
	if op := (*OpError)(nil); errors.As(err, &op) && op.ID != 0 && op.ID&1 == 0 {
		op.ID = g.id(k, op.ID)
	}
	return m, err
}

func (g *shards) sent(k int, id uint64, err error) (uint64, error) {
	if err != nil {
		return 0, err
	}
	return g.id(k, id), nil
}

func (g *shards) Send(dst netip.AddrPort, data []byte, cookie uint64) (uint64, error) {
	k := g.of(dst)
	id, err := g.eps[k].Send(dst, data, cookie)
	return g.sent(k, id, err)
}

func (g *shards) SendOwned(dst netip.AddrPort, data []byte, cookie uint64) (uint64, error) {
	k := g.of(dst)
	id, err := g.eps[k].SendOwned(dst, data, cookie)
	return g.sent(k, id, err)
}

func (g *shards) SendBorrowed(dst netip.AddrPort, data []byte, cookie uint64) (uint64, homa.Borrow, error) {
	k := g.of(dst)
	id, b, err := g.eps[k].SendBorrowed(dst, data, cookie)
	id, err = g.sent(k, id, err)
	return id, b, err
}

func (g *shards) Reply(peer netip.AddrPort, id uint64, data []byte) error {
	return g.eps[g.of(peer)].Reply(peer.Addr(), id, data)
}

func (g *shards) ReplyOwned(peer netip.AddrPort, id uint64, data []byte) error {
	return g.eps[g.of(peer)].ReplyOwned(peer.Addr(), id, data)
}

func (g *shards) Abort(id uint64) error {
	k, wire, ok := g.wire(id)
	if !ok {
		return &OpError{Op: "abort", ID: id, Err: ErrUnknownRPC}
	}
	_, err := g.fix(k, nil, g.eps[k].Abort(wire))
	return err
}

func (g *shards) Recv(ctx context.Context, id uint64) (*Message, error) {
	if id == Any {
		return g.recvAny(ctx)
	}
	k, wire, ok := g.wire(id)
	if !ok {
		return nil, &OpError{Op: "recv", ID: id, Err: ErrUnknownRPC}
	}
	m, err := g.eps[k].Recv(ctx, wire)
	return g.fix(k, m, err)
}

// Close closes every shard, shard 0 last: its socket holds the port's
// reservation.
func (g *shards) Close() error {
	if g.done.Swap(true) {
		return nil
	}
	var errs []error
	for k := len(g.eps) - 1; k >= 0; k-- {
		g.slots[k].cover.Stop()
		errs = append(errs, g.eps[k].Close())
	}
	g.spill.close()
	return errors.Join(errs...)
}

func (g *shards) Stats() Stats {
	s := g.eps[0].Stats()
	for _, e := range g.eps[1:] {
		addStats(&s, e.Stats())
	}
	s.IncomingLent = g.incoming.Lent()
	return s
}

// cancelled is a context that has ended: Recv with it takes a message
// that is ready and never waits.
var cancelled = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// recvAny receives the next message of any shard. It takes one that
// waits in a shard, from a random shard on; otherwise it waits in the
// shard with the fewest goroutines waiting, reading that shard's socket
// as a goroutine in one engine's Recv does. So goroutines spread over
// the shards and, as many as shards or more, each reads its own socket
// with no hand-off. Shards that nobody waits in are covered (see wait).
func (g *shards) recvAny(ctx context.Context) (*Message, error) {
	start := rand.IntN(len(g.eps))
	for {
		if m := g.spill.pop(); m != nil {
			return m, nil
		}
		for i := range g.eps {
			// A message waits only in a shard where nobody waited when
			// it came: one coming to wait takes what waits.
			k := (start + i) % len(g.eps)
			if g.slots[k].waiting.Load() != 0 {
				continue
			}
			g.slots[k].swept.Add(1)
			m, err := g.eps[k].Recv(cancelled, Any)
			if m != nil || errors.Is(err, ErrClosed) {
				return g.fix(k, m, err)
			}
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		m, err, again := g.wait(ctx, start)
		if !again {
			return m, err
		}
	}
}

// wait waits in the emptiest shard for a message. Any other shard
// nobody waits in gets a helper goroutine for the time being, which
// waits there and hands its message over through the spill; a
// goroutine that comes to wait in the shard ends the helper. It reports
// again when the wait ended for another goroutine's sake (a helper's
// message, or a kick that moves it to an empty shard): the caller looks
// round again.
func (g *shards) wait(ctx context.Context, start int) (*Message, error, bool) {
	home := g.emptiest(start)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	call := &anyCall{cancel: cancel}
	g.join(home, call)
	var helpers sync.WaitGroup
	for k := range g.eps {
		if k != home && g.slots[k].waiting.Load() == 0 {
			g.help(k, wctx, cancel, &helpers)
		}
	}
	m, err := g.eps[home].Recv(wctx, Any)
	cancel()
	g.leave(home, call)
	helpers.Wait()
	switch {
	case m != nil:
		m, err = g.fix(home, m, nil)
		return m, err, false
	case errors.Is(err, ErrClosed) || g.done.Load():
		return nil, ErrClosed, false
	case ctx.Err() != nil:
		return nil, ctx.Err(), false
	case !errors.Is(err, context.Canceled):
		return nil, err, false
	}
	return nil, nil, true
}

// helper is a goroutine covering a shard for a wait elsewhere.
type helper struct{ stop context.CancelFunc }

// help starts a helper covering shard k for the wait whose context is
// ctx: it receives there, spills what it gets and ends the wait (wake).
func (g *shards) help(k int, ctx context.Context, wake context.CancelFunc, wg *sync.WaitGroup) {
	s := &g.slots[k]
	hctx, stop := context.WithCancel(ctx)
	h := &helper{stop: stop}
	s.mu.Lock()
	if s.waiting.Load() != 0 || s.helper != nil {
		s.mu.Unlock()
		stop()
		return
	}
	s.waiting.Add(1)
	s.helper = h
	s.mu.Unlock()
	s.helped.Add(1)
	s.disarm()
	wg.Go(func() {
		m, err := g.eps[k].Recv(hctx, Any)
		stop()
		s.mu.Lock()
		if s.helper == h {
			s.helper = nil
		}
		s.mu.Unlock()
		s.waiting.Add(-1)
		if m != nil {
			m, _ = g.fix(k, m, err)
			g.spill.push(m)
			wake() // the wait comes back for it, and covers again
		}
		g.left(k, m == nil)
	})
}

// emptiest is the shard with the fewest goroutines waiting, looking
// from start on.
func (g *shards) emptiest(start int) int {
	best, fewest := start, g.slots[start].waiting.Load()
	for i := 1; i < len(g.eps) && fewest > 0; i++ {
		k := (start + i) % len(g.eps)
		if n := g.slots[k].waiting.Load(); n < fewest {
			best, fewest = k, n
		}
	}
	return best
}

// join records call waiting in shard k, and ends the helper covering
// it: the call covers it now.
func (g *shards) join(k int, call *anyCall) {
	s := &g.slots[k]
	s.waiting.Add(1)
	s.disarm()
	s.mu.Lock()
	s.calls = append(s.calls, call)
	if s.helper != nil {
		s.helper.stop()
		s.helper = nil
	}
	s.mu.Unlock()
}

// disarm stops the shard's cover check: someone waits in it now.
func (s *shardSlot) disarm() {
	if s.coverArmed.Load() && s.coverArmed.Swap(false) {
		s.cover.Stop()
	}
}

// leave records that call stopped waiting in shard k.
func (g *shards) leave(k int, call *anyCall) {
	s := &g.slots[k]
	s.mu.Lock()
	for i, c := range s.calls {
		if c == call {
			last := len(s.calls) - 1
			s.calls[i], s.calls[last] = s.calls[last], nil
			s.calls = s.calls[:last]
			break
		}
	}
	s.mu.Unlock()
	s.waiting.Add(-1)
	g.left(k, true)
}

// left runs after a goroutine stopped waiting in shard k. If messages
// were spilled, a waiting goroutine comes to take them. If the shard is
// empty while goroutines wait in others, and arm is set, it arms the
// shard's cover check.
func (g *shards) left(k int, arm bool) {
	if g.done.Load() {
		return
	}
	if g.spill.n.Load() > 0 {
		g.kick(-1)
	}
	s := &g.slots[k]
	if arm && s.waiting.Load() == 0 && g.anyWaiting() && !s.coverArmed.Swap(true) {
		s.cover.Reset(coverDelay)
	}
}

// covered runs coverDelay after shard k was left empty: if it still is,
// a goroutine waiting in another shard moves to it.
func (g *shards) covered(k int) {
	if !g.slots[k].coverArmed.Swap(false) || g.done.Load() {
		return
	}
	if g.slots[k].waiting.Load() == 0 {
		g.kick(k)
	}
}

// anyWaiting reports whether a goroutine waits in Recv(Any).
func (g *shards) anyWaiting() bool {
	for i := range g.slots {
		if g.slots[i].waiting.Load() > 0 {
			return true
		}
	}
	return false
}

// kick ends the wait of one goroutine in Recv(Any) outside shard not,
// in the shard where most wait, so that it looks round again.
func (g *shards) kick(not int) {
	from, most := -1, int32(0)
	for k := range g.slots {
		if n := g.slots[k].waiting.Load(); k != not && n > most {
			from, most = k, n
		}
	}
	if from < 0 {
		return
	}
	s := &g.slots[from]
	s.mu.Lock()
	if n := len(s.calls); n > 0 {
		s.calls[n-1].cancel()
		s.kicked.Add(1)
	}
	s.mu.Unlock()
}

// spill holds the messages helpers received, until a goroutine in
// Recv(Any) takes them.
type spill struct {
	n      atomic.Int32
	mu     sync.Mutex
	msgs   []*Message
	closed bool
}

func (q *spill) push(m *Message) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		m.Release()
		return
	}
	q.msgs = append(q.msgs, m)
	q.n.Add(1)
}

func (q *spill) pop() *Message {
	if q.n.Load() == 0 {
		return nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.msgs) == 0 {
		return nil
	}
	m := q.msgs[0]
	q.msgs[0] = nil
	q.msgs = q.msgs[1:]
	q.n.Add(-1)
	return m
}

func (q *spill) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	for _, m := range q.msgs {
		m.Release()
	}
	q.msgs = nil
	q.n.Store(0)
}

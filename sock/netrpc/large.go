package netrpc

import (
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/homa-go/homa/sock"
)

// largeServer holds a server's large messages, requests being assembled
// from their parts and replies waiting for their clients to pull them,
// within Config.LargeMemory and LargeMemoryPerPeer. What it counts is
// what it holds: buffers as bytes arrive (see assembler), replies as
// they are stored, and entryCost for every entry, so that a peer's
// claims cost nothing until its bytes come. Entries that see no traffic
// for Config.LargeTimeout are dropped, when the store is next used.
type largeServer struct {
	cfg   *Config
	local netip.AddrPort // for errors

	mu      sync.Mutex
	calls   map[partKey]*incoming
	replies map[partKey]*outgoing
	used    int
	byPeer  map[netip.Addr]int
	lastID  uint64
	swept   time.Time
}

// partKey names a large message: its peer (host and port) and its id.
type partKey struct {
	peer netip.AddrPort
	id   uint64
}

// incoming is a large request being assembled. Once it is complete or
// refused it stays, without its bytes, until it expires, so that parts
// still on their way are refused rather than starting it anew.
type incoming struct {
	a      assembler
	cost   int
	last   time.Time
	closed error // why later parts are refused; nil while assembling
}

// outgoing is a large reply waiting to be pulled: its parts after the
// first (from an outMsg), each dropped once it is sent.
type outgoing struct {
	parts [][]byte
	total int
	left  int // parts not yet sent
	last  time.Time
}

// entryCost is what the store counts for an entry besides its bytes.
const entryCost = 256

func newLargeServer(cfg *Config, local netip.AddrPort) *largeServer {
	return &largeServer{
		cfg: cfg, local: local,
		calls:   make(map[partKey]*incoming),
		replies: make(map[partKey]*outgoing),
		byPeer:  make(map[netip.Addr]int),
	}
}

// partResult is what becomes of a request part.
type partResult int

const (
	partHeld     partResult = iota // taken; acknowledge it
	partRefused                    // not taken (err says why); the caller still owns m
	partComplete                   // the request is complete
)

// takePart takes the request part p, which arrived in m. When the
// request is complete it returns its parts, the caller's from then on,
// and the bytes they count for, to be given back with release once the
// call has decoded them. A part that breaks the rules refuses its whole
// request.
func (l *largeServer) takePart(m *sock.Message, p part, now time.Time, shutting bool) (res partResult, done *assembler, cost int, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.maybeSweep(now)
	k := partKey{m.Peer, p.id}
	in := l.calls[k]
	if in == nil {
		if err := l.refusal(p, shutting); err != nil {
			return partRefused, nil, 0, err
		}
		if err := l.charge(m.Peer.Addr(), entryCost, now); err != nil {
			return partRefused, nil, 0, err
		}
		in = &incoming{a: assembler{total: p.total}, cost: entryCost}
		l.calls[k] = in
	}
	if in.closed != nil {
		return partRefused, nil, 0, in.closed
	}
	in.last = now
	if shutting {
		err = l.refusal(p, shutting)
	} else if p.total != in.a.total {
		err = fmt.Errorf("%w: part of call %d claims %d bytes, its earlier parts %d", errMalformed, p.id, p.total, in.a.total)
	}
	grow := 0
	if err == nil {
		grow, err = in.a.check(p.offset, len(p.data), cap(m.Data))
	}
	if err == nil {
		err = l.charge(m.Peer.Addr(), grow, now)
	}
	if err != nil {
		l.close(k, in, err)
		return partRefused, nil, 0, err
	}
	in.cost += grow
	in.a.add(p.offset, p.data, m)
	if !in.a.complete() {
		return partHeld, nil, 0, nil
	}
	done = &assembler{}
	*done, in.a = in.a, assembler{}
	cost, in.cost = in.cost-entryCost, entryCost
	in.closed = fmt.Errorf("%w: part of call %d, which is complete", errMalformed, p.id)
	return partComplete, done, cost, nil
}

// refusal is why a new large request is not taken, or nil.
func (l *largeServer) refusal(p part, shutting bool) error {
	if shutting {
		return fmt.Errorf("netrpc: server %v is %w; the request of %d bytes did not run", l.local, errShuttingDown, p.total)
	}
	if p.total > l.cfg.MaxMessage {
		return tooLong("request", p.total, l.cfg.MaxMessage, "server")
	}
	return nil
}

// close ends the assembly of k for err, keeping its entry so that its
// later parts are refused too.
func (l *largeServer) close(k partKey, in *incoming, err error) {
	in.a.free()
	in.a = assembler{}
	l.uncharge(k.peer.Addr(), in.cost-entryCost)
	in.cost = entryCost
	in.closed = err
}

// release gives back the bytes of a complete request.
func (l *largeServer) release(peer netip.Addr, cost int) {
	l.mu.Lock()
	l.uncharge(peer, cost)
	l.mu.Unlock()
}

// storeReply keeps parts, the parts after the first of a reply of total
// bytes (from an outMsg; the store owns them from now on), for peer's
// pulls and returns the reply's id.
func (l *largeServer) storeReply(peer netip.AddrPort, parts [][]byte, total int, now time.Time) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.maybeSweep(now)
	if err := l.charge(peer.Addr(), entryCost+partsCost(parts), now); err != nil {
		return 0, err
	}
	l.lastID++
	l.replies[partKey{peer, l.lastID}] = &outgoing{parts: parts, total: total, left: len(parts), last: now}
	return l.lastID, nil
}

// partsCost is what the parts of a reply hold.
func partsCost(parts [][]byte) int {
	n := 0
	for _, p := range parts {
		n += cap(p)
	}
	return n
}

// pull returns the part the pull p of peer asks for, the caller's from
// now on: its buffer, with room for the part header. A part is sent
// once; the reply is dropped once every part has been.
func (l *largeServer) pull(peer netip.AddrPort, p part, now time.Time) ([]byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.maybeSweep(now)
	k := partKey{peer, p.id}
	out := l.replies[k]
	if out == nil {
		return nil, fmt.Errorf("netrpc: server %v has %w %d for %v: it was fetched, or dropped after netrpc.Config.LargeTimeout (%v) without a pull", l.local, errNoReply, p.id, peer, l.cfg.LargeTimeout)
	}
	i := p.offset/partData - 1 // the first part went with the response
	switch {
	case p.total != out.total:
		return nil, fmt.Errorf("%w: pull of reply %d claims %d bytes, the reply has %d", errMalformed, p.id, p.total, out.total)
	case p.offset%partData != 0 || i < 0 || i >= len(out.parts):
		return nil, fmt.Errorf("%w: pull of reply %d at byte %d, not where a part begins", errMalformed, p.id, p.offset)
	case out.parts[i] == nil:
		return nil, fmt.Errorf("%w: pull of reply %d at byte %d, which was sent before", errMalformed, p.id, p.offset)
	}
	b := out.parts[i]
	out.parts[i] = nil
	out.last = now
	l.uncharge(peer.Addr(), cap(b))
	if out.left--; out.left == 0 {
		delete(l.replies, k)
		l.uncharge(peer.Addr(), entryCost)
	}
	return b, nil
}

// replyCount is the number of replies waiting to be pulled.
func (l *largeServer) replyCount(now time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.maybeSweep(now)
	return len(l.replies)
}

// charge counts n more bytes for peer, unless that would exceed a
// limit even after dropping what has expired.
func (l *largeServer) charge(peer netip.Addr, n int, now time.Time) error {
	if n <= 0 {
		l.uncharge(peer, -n)
		return nil
	}
	fits := func() bool {
		return l.used+n <= l.cfg.LargeMemory && l.byPeer[peer]+n <= l.cfg.LargeMemoryPerPeer
	}
	if !fits() {
		l.sweep(now)
	}
	if !fits() {
		return fmt.Errorf("netrpc: server %v is %w: %d bytes more would exceed netrpc.Config.LargeMemory (%d bytes, %d in use) or LargeMemoryPerPeer (%d bytes, %d in use by %v); retry later, or raise them",
			l.local, errLargeMemory, n, l.cfg.LargeMemory, l.used, l.cfg.LargeMemoryPerPeer, l.byPeer[peer], peer)
	}
	l.used += n
	l.byPeer[peer] += n
	return nil
}

// uncharge gives back n bytes of peer's.
func (l *largeServer) uncharge(peer netip.Addr, n int) {
	l.used -= n
	if l.byPeer[peer] -= n; l.byPeer[peer] <= 0 {
		delete(l.byPeer, peer)
	}
}

// maybeSweep sweeps when a quarter of LargeTimeout has passed since the
// last sweep, so that an entry outlives its timeout by at most a quarter
// of it while the store is in use.
func (l *largeServer) maybeSweep(now time.Time) {
	if now.Sub(l.swept) >= l.cfg.LargeTimeout/4 {
		l.sweep(now)
	}
}

// sweep drops the entries idle since before now-LargeTimeout.
func (l *largeServer) sweep(now time.Time) {
	l.swept = now
	old := now.Add(-l.cfg.LargeTimeout)
	for k, in := range l.calls {
		if in.last.Before(old) {
			in.a.free()
			l.uncharge(k.peer.Addr(), in.cost)
			delete(l.calls, k)
		}
	}
	for k, out := range l.replies {
		if out.last.Before(old) {
			l.uncharge(k.peer.Addr(), entryCost+partsCost(out.parts))
			delete(l.replies, k)
		}
	}
}

// free drops everything, when the server closes.
func (l *largeServer) free() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, in := range l.calls {
		in.a.free()
	}
	clear(l.calls)
	clear(l.replies)
	clear(l.byPeer)
	l.used = 0
}

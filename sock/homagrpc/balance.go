package homagrpc

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/homa-go/homa/sock"
)

// Balancer chooses, for each call, which of a ClientConn's servers gets
// it.
type Balancer int

const (
	// PickFirst sends every call to the first server until one of its
	// calls fails with codes.Unavailable (the server stopped answering,
	// or nothing listens), then to the next one, round the list, as
	// grpc-go's pick_first moves on when its connection fails.
	PickFirst Balancer = iota
	// RoundRobin sends each call or stream to the next server in turn.
	RoundRobin
)

func (b Balancer) String() string {
	switch b {
	case PickFirst:
		return "pick_first"
	case RoundRobin:
		return "round_robin"
	}
	return fmt.Sprintf("Balancer(%d)", int(b))
}

// WithBalancer sets how calls are spread over the servers of a
// ClientConn with several (DialTarget); the default is PickFirst.
func WithBalancer(b Balancer) DialOption {
	return func(o *dialOptions) { o.balancer = b }
}

// picker picks a server per call. Its servers are one targetSet, which
// a re-resolution of the target's names replaces whole (reresolve.go),
// so a pick reads one pointer and takes no lock.
type picker struct {
	b   Balancer
	set atomic.Pointer[targetSet]
}

// targetSet is a list of servers, fixed once made, with what changes
// while it is current.
type targetSet struct {
	addrs []netip.AddrPort
	ready []atomic.Bool // by target: it answered since it was last found unavailable
	next  atomic.Uint64 // RoundRobin: the next call's; PickFirst: the current
}

func newPicker(b Balancer, targets []netip.AddrPort) *picker {
	p := &picker{b: b}
	p.set.Store(newTargetSet(targets))
	return p
}

func newTargetSet(targets []netip.AddrPort) *targetSet {
	return &targetSet{addrs: targets, ready: make([]atomic.Bool, len(targets))}
}

func (p *picker) pick() netip.AddrPort {
	s := p.set.Load()
	if len(s.addrs) == 1 {
		return s.addrs[0]
	}
	if p.b == RoundRobin {
		return s.addrs[(s.next.Add(1)-1)%uint64(len(s.addrs))]
	}
	return s.addrs[s.next.Load()%uint64(len(s.addrs))]
}

// unavailable moves a PickFirst picker past target after a call to it
// found it unavailable.
func (p *picker) unavailable(target netip.AddrPort) {
	s := p.set.Load()
	if i := s.index(target); i >= 0 {
		s.ready[i].Store(false)
	}
	if p.b != PickFirst || len(s.addrs) == 1 {
		return
	}
	cur := s.next.Load()
	if s.addrs[cur%uint64(len(s.addrs))] == target {
		s.next.CompareAndSwap(cur, cur+1)
	}
}

// index is target's place in the list, or -1.
func (s *targetSet) index(target netip.AddrPort) int {
	return slices.Index(s.addrs, target)
}

// isReady reports whether target answered since it was last found
// unavailable (see WaitForReady in ready.go).
func (p *picker) isReady(target netip.AddrPort) bool {
	s := p.set.Load()
	i := s.index(target)
	return i >= 0 && s.ready[i].Load()
}

// setReady records that target answered.
func (p *picker) setReady(target netip.AddrPort) {
	s := p.set.Load()
	if i := s.index(target); i >= 0 && !s.ready[i].Load() {
		s.ready[i].Store(true)
	}
}

// len is how many servers there are now.
func (p *picker) len() int { return len(p.set.Load().addrs) }

// replace makes targets the servers. An address that stays keeps its
// ready flag; PickFirst stays on its current server when it stays, and
// starts again from the first otherwise; RoundRobin goes on counting.
// Calls in progress keep the server they picked. A flag set in the old
// list while it is replaced may be lost: a call then probes a server
// once more, or sends to it once more, as after any failure. Only one
// goroutine replaces at a time.
func (p *picker) replace(targets []netip.AddrPort) {
	old := p.set.Load()
	if slices.Equal(old.addrs, targets) {
		return
	}
	s := newTargetSet(targets)
	for i, t := range targets {
		if j := old.index(t); j >= 0 {
			s.ready[i].Store(old.ready[j].Load())
		}
	}
	if p.b == RoundRobin {
		s.next.Store(old.next.Load())
	} else if i := s.index(old.addrs[old.next.Load()%uint64(len(old.addrs))]); i >= 0 {
		s.next.Store(uint64(i))
	}
	p.set.Store(s)
}

// Targets returns the servers' addresses, in the order given, or, when
// the target names hosts, as the last lookup of the names gave them
// (see WithResolveInterval).
func (c *ClientConn) Targets() []netip.AddrPort {
	return slices.Clone(c.picker.set.Load().addrs)
}

// ParseTarget parses a target string naming one or more Homa servers:
// "homa:///10.0.0.1:5000,10.0.0.2:5000", or the same without the
// "homa:///" prefix. IPv6 addresses are in brackets ("[::1]:5000").
// It takes IP addresses only; ResolveTarget also takes host names.
func ParseTarget(target string) ([]netip.AddrPort, error) {
	rest, err := targetList(target)
	if err != nil {
		return nil, err
	}
	var out []netip.AddrPort
	for _, s := range strings.Split(rest, ",") {
		ap, err := netip.ParseAddrPort(strings.TrimSpace(s))
		if err != nil || ap.Port() == 0 {
			return nil, fmt.Errorf("homagrpc: target %q: %q is not an IP address and port: %w", target, s, sock.ErrBadAddress)
		}
		out = append(out, ap)
	}
	return out, nil
}

// DialTarget is Dial for a target string of one or more servers, by IP
// address or host name (see ResolveTarget), among which the WithBalancer
// option spreads the calls. The servers must be of one address family.
// Names are looked up with WithResolver's resolver, within 10 s, at the
// dial, and again while the ClientConn lives when calls find servers
// unavailable (see WithResolveInterval).
func DialTarget(target string, cfg *sock.Config, opts ...DialOption) (*ClientConn, error) {
	return connectTarget(target, opts, func(targets []netip.AddrPort) (*ClientConn, error) {
		return dial(targets, cfg, opts)
	})
}

// NewClientConnTarget is NewClientConn for several servers, among which
// the WithBalancer option spreads the calls.
func NewClientConnTarget(s *sock.Socket, targets []netip.AddrPort, opts ...DialOption) (*ClientConn, error) {
	if len(targets) == 0 {
		return nil, fmt.Errorf("homagrpc: no targets: %w", sock.ErrBadAddress)
	}
	return newClientConn(s, append([]netip.AddrPort(nil), targets...), opts), nil
}

package homagrpc

import (
	"context"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// A ClientConn that DialTarget made from a target naming hosts follows
// the names, as grpc-go's dns resolver does: when a call finds a server
// unavailable, the names are looked up again, and the addresses found
// replace the servers. One goroutine at a time looks up, apart from the
// calls (which never wait for it), at most once per interval: a request
// that comes sooner waits for the interval to end (counted from the
// start of the previous lookup, the dial's included), and requests that
// come while one waits or looks up join it. While no call fails there
// is no goroutine and no timer. A lookup that fails, or finds no address
// of the ClientConn's family, leaves the servers as they were (see
// ResolveErr). A target of IP addresses only is never looked up again.

// defaultResolveInterval is the least time between two lookups of a
// ClientConn's names, as grpc-go's dns resolver waits.
const defaultResolveInterval = 30 * time.Second

// WithResolveInterval sets the least time between two lookups of the
// names of a DialTarget target made because calls found servers
// unavailable (default 30 s; 0 or less: the default).
func WithResolveInterval(d time.Duration) DialOption {
	return func(o *dialOptions) { o.resolveInterval = d }
}

// reresolver looks a ClientConn's target up again.
type reresolver struct {
	target   string
	r        Resolver
	want4    bool // the ClientConn's family
	interval time.Duration
	running  atomic.Bool // a goroutine waits for its turn or looks up
	last     time.Time   // when the last lookup began; the running goroutine's

	mu  sync.Mutex
	err error // the last lookup's
}

// connectTarget looks target up with the resolver of opts, makes a
// ClientConn to its servers with open, and, when target names a host,
// has the ClientConn follow its names.
func connectTarget(target string, opts []DialOption, open func([]netip.AddrPort) (*ClientConn, error)) (*ClientConn, error) {
	var o dialOptions
	for _, opt := range opts {
		opt(&o)
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), resolveTimeout)
	targets, err := ResolveTarget(ctx, target, o.resolver)
	cancel()
	if err != nil {
		return nil, err
	}
	c, err := open(targets)
	if err != nil {
		return nil, err
	}
	if _, err := ParseTarget(target); err != nil { // it names a host
		interval := o.resolveInterval
		if interval <= 0 {
			interval = defaultResolveInterval
		}
		c.names = &reresolver{target: target, r: o.resolver, want4: targets[0].Addr().Is4(), interval: interval, last: start}
	}
	return c, nil
}

// unavailable records that a call found the server at target
// unavailable, and asks for a new lookup of the target's names.
func (c *ClientConn) unavailable(target netip.AddrPort) {
	c.picker.unavailable(target)
	c.reresolve()
}

// reresolve starts a lookup of the target's names unless one is under
// way, or the target names no host, or c is closing. It does not wait.
func (c *ClientConn) reresolve() {
	n := c.names
	if n == nil || !n.running.CompareAndSwap(false, true) {
		return
	}
	if !c.track() {
		n.running.Store(false)
		return
	}
	go func() {
		defer c.wg.Done()
		defer n.running.Store(false)
		if d := time.Until(n.last.Add(n.interval)); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-c.closeCtx.Done():
				t.Stop()
				return
			}
		}
		n.last = time.Now()
		ctx, cancel := context.WithTimeout(c.closeCtx, resolveTimeout)
		targets, err := resolveTarget(ctx, n.target, n.r, true, n.want4)
		cancel()
		if c.closeCtx.Err() != nil {
			return
		}
		n.mu.Lock()
		n.err = err
		n.mu.Unlock()
		if err == nil {
			c.picker.replace(targets)
		}
	}()
}

// ResolveErr is the error of the last lookup of the target's names made
// since the dial (see WithResolveInterval), when it failed or found no
// address of the ClientConn's family: the ClientConn then kept the
// servers it had. It is nil when that lookup succeeded, when none was
// made, and for a ClientConn not made by DialTarget from a target naming
// a host.
func (c *ClientConn) ResolveErr() error {
	n := c.names
	if n == nil {
		return nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.err
}

package tcpecho

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"time"
)

// ErrPoolClosed is returned by calls on a closed Pool. It matches
// net.ErrClosed.
var ErrPoolClosed = fmt.Errorf("tcpecho: pool closed: %w", net.ErrClosed)

// copyLimit is the largest request copied behind its prefix into one
// write; longer ones go out with writev, prefix and payload as they are.
const copyLimit = 16 << 10

// Pool is a client of a Server that shares up to a fixed number of
// connections among goroutines, the way Go services use a connection
// pool (database/sql, net/http's transport): a call borrows an idle
// connection, or dials a new one while fewer than the maximum are open,
// or else waits for one to come back; it sends one message and reads the
// reply on it, then returns it. A connection on which a call failed is
// closed, not reused. A Pool is safe for concurrent use.
type Pool struct {
	addr   string
	dialer net.Dialer
	idle   chan *poolConn // connections not in use
	slots  chan struct{}  // one token per open connection
	done   chan struct{}  // closed by Close

	mu     sync.Mutex
	open   map[*poolConn]struct{}
	closed bool
}

// poolConn is one connection of a Pool, used by one call at a time.
type poolConn struct {
	c    *net.TCPConn
	r    *bufio.Reader
	wbuf []byte

	// The context whose end sets a past deadline on c; registered once
	// per context, so a caller that reuses its context pays nothing per
	// call.
	ctx   context.Context
	stop  func() bool
	fired chan struct{}
}

// Dial makes a Pool of at most maxConns connections (at least 1) to the
// server at addr ("host:port"). It dials the first connection now, so an
// unreachable server is an error here.
func Dial(ctx context.Context, addr string, maxConns int) (*Pool, error) {
	maxConns = max(maxConns, 1)
	p := &Pool{
		addr:  addr,
		idle:  make(chan *poolConn, maxConns),
		slots: make(chan struct{}, maxConns),
		done:  make(chan struct{}),
		open:  make(map[*poolConn]struct{}),
	}
	p.slots <- struct{}{}
	c, err := p.dial(ctx)
	if err != nil {
		return nil, err
	}
	p.idle <- c
	return p, nil
}

// Conns is the number of connections open now.
func (p *Pool) Conns() int { return len(p.slots) }

// Call sends req and waits for the reply, which it reads into *buf
// (grown when too small; the prefix stays in front) and returns. The
// reply is valid until *buf is reused. Call gives up when ctx ends.
func (p *Pool) Call(ctx context.Context, req []byte, buf *[]byte) ([]byte, error) {
	c, err := p.get(ctx)
	if err != nil {
		return nil, err
	}
	resp, err := c.roundTrip(ctx, req, buf)
	p.put(c, err == nil)
	return resp, err
}

// get borrows an idle connection, dials a new one, or waits.
func (p *Pool) get(ctx context.Context) (*poolConn, error) {
	select {
	case c := <-p.idle:
		return c, nil
	default:
	}
	select {
	case c := <-p.idle:
		return c, nil
	case p.slots <- struct{}{}:
		return p.dial(ctx)
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-p.done:
		return nil, ErrPoolClosed
	}
}

// dial opens a connection for a slot already taken; on failure it gives
// the slot back.
func (p *Pool) dial(ctx context.Context) (*poolConn, error) {
	nc, err := p.dialer.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		<-p.slots
		return nil, err
	}
	c := &poolConn{c: nc.(*net.TCPConn)}
	c.r = NewReader(c.c)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.c.Close()
		<-p.slots
		return nil, ErrPoolClosed
	}
	p.open[c] = struct{}{}
	return c, nil
}

// put returns a borrowed connection: to the idle ones if its call went
// well and the pool is open, otherwise it is closed.
func (p *Pool) put(c *poolConn, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ok && !p.closed {
		p.idle <- c // never blocks: there are no more connections than slots
		return
	}
	c.release()
	c.c.Close()
	delete(p.open, c)
	<-p.slots
}

// Close closes every connection; calls in progress fail. Close is
// idempotent.
func (p *Pool) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	close(p.done)
	for {
		select {
		case c := <-p.idle:
			c.release()
			c.c.Close()
			delete(p.open, c)
			<-p.slots
		default:
			// Connections still borrowed are closed here and dropped by
			// put when their calls return.
			for c := range p.open {
				c.c.Close()
			}
			return nil
		}
	}
}

func (c *poolConn) roundTrip(ctx context.Context, req []byte, buf *[]byte) ([]byte, error) {
	if err := c.watch(ctx); err != nil {
		return nil, err
	}
	if err := c.write(req); err != nil {
		return nil, err
	}
	n, err := ReadMessage(c.r, buf)
	if err != nil {
		return nil, err
	}
	return (*buf)[Prefix : Prefix+n], nil
}

// write sends one framed message: copied into one buffer when short,
// with writev when long.
func (c *poolConn) write(req []byte) error {
	if len(req) <= copyLimit {
		c.wbuf = AppendMessage(c.wbuf[:0], req)
		_, err := c.c.Write(c.wbuf)
		return err
	}
	c.wbuf = binary.BigEndian.AppendUint32(c.wbuf[:0], uint32(len(req)))
	bufs := net.Buffers{c.wbuf, req}
	_, err := bufs.WriteTo(c.c)
	return err
}

// watch makes blocked reads and writes return when ctx ends.
func (c *poolConn) watch(ctx context.Context) error {
	if ctx != c.ctx {
		c.release()
		fired := make(chan struct{})
		c.ctx, c.fired = ctx, fired
		c.stop = context.AfterFunc(ctx, func() {
			_ = c.c.SetDeadline(time.Unix(1, 0))
			close(fired)
		})
	}
	return ctx.Err()
}

// release stops watching the context; if it has ended, it clears the
// deadline it set.
func (c *poolConn) release() {
	if c.stop == nil {
		return
	}
	if !c.stop() {
		<-c.fired
		_ = c.c.SetDeadline(time.Time{})
	}
	c.ctx, c.stop = nil, nil
}

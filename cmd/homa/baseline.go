package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"time"
)

// The baselines bench compares Homa with. Each is an echo server and a
// client in this process, written to be as quick as plain Go allows: one
// persistent connection or socket, buffers reused, nothing allocated per
// round trip once the buffers have grown. To add one, write its opener
// and list it here; its name is what --vs selects.
var baselines = []protocol{
	{name: "tcp", desc: "Go TCP echo: one connection, 4-byte length prefix, TCP_NODELAY", open: openTCP},
	{name: "udp", desc: "Go UDP echo: one datagram each way (a floor for a datagram stack in Go)", open: openUDP},
}

// ctxWatch makes blocked reads and writes on a net.Conn return when the
// context of a round trip ends. It registers once per context, so a load
// loop that reuses its context pays nothing per round trip.
type ctxWatch struct {
	c     net.Conn
	ctx   context.Context
	stop  func() bool
	fired chan struct{} // closed once the ended context has set the deadline
}

func (w *ctxWatch) watch(ctx context.Context) error {
	if ctx != w.ctx {
		w.release()
		fired := make(chan struct{})
		w.ctx, w.fired = ctx, fired
		w.stop = context.AfterFunc(ctx, func() {
			_ = w.c.SetDeadline(time.Unix(1, 0))
			close(fired)
		})
	}
	return ctx.Err()
}

// release stops watching; if the context has ended, it clears the
// deadline that ended it, so that the next context starts afresh.
func (w *ctxWatch) release() {
	if w.stop == nil {
		return
	}
	if !w.stop() {
		<-w.fired
		_ = w.c.SetDeadline(time.Time{})
	}
	w.ctx, w.stop = nil, nil
}

// grow returns b resized to n bytes, keeping its contents and
// reallocating only when it is too small.
func grow(b []byte, n int) []byte {
	if cap(b) < n {
		return append(b[:cap(b)], make([]byte, n-cap(b))...)[:n]
	}
	return b[:n]
}

// TCP: each message is a 4-byte big-endian length and the payload.
const (
	tcpPrefix = 4
	tcpMaxMsg = 1 << 20 // larger than any --size
	tcpBuffer = 64 << 10
)

// tcpServer is an echo server for length-prefixed messages.
type tcpServer struct {
	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[net.Conn]struct{} // open connections, closed by close
}

func (s *tcpServer) accept() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return // closed
		}
		s.mu.Lock()
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Go(func() {
			s.echo(c)
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
			c.Close()
		})
	}
}

// echo answers the messages of one connection until it fails or closes.
func (s *tcpServer) echo(c net.Conn) {
	r := bufio.NewReaderSize(c, tcpBuffer)
	buf := make([]byte, tcpPrefix+tcpBuffer)
	for {
		n, err := readMessage(r, &buf)
		if err != nil {
			return
		}
		if _, err := c.Write(buf[:tcpPrefix+n]); err != nil {
			return
		}
	}
}

// readMessage reads one length-prefixed message into *buf, growing it as
// needed, and returns the payload length. The prefix stays in front of
// the payload so that the message can be written back in one call.
func readMessage(r *bufio.Reader, buf *[]byte) (int, error) {
	b := grow(*buf, tcpPrefix)
	if _, err := io.ReadFull(r, b); err != nil {
		return 0, err
	}
	n := int(binary.BigEndian.Uint32(b))
	if n > tcpMaxMsg {
		return 0, fmt.Errorf("tcp: message of %d bytes", n)
	}
	b = grow(b, tcpPrefix+n)
	*buf = b
	_, err := io.ReadFull(r, b[tcpPrefix:])
	return n, err
}

func (s *tcpServer) close() {
	s.ln.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// tcpClient sends length-prefixed messages over one connection.
type tcpClient struct {
	c      *net.TCPConn
	r      *bufio.Reader
	buf    []byte
	w      ctxWatch
	server *tcpServer
}

func openTCP(_ context.Context, host netip.Addr) (pinger, error) {
	ln, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(netip.AddrPortFrom(host, 0)))
	if err != nil {
		return nil, err
	}
	s := &tcpServer{ln: ln, conns: make(map[net.Conn]struct{})}
	s.wg.Go(s.accept)
	c, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		s.close()
		return nil, err
	}
	if err := c.SetNoDelay(true); err != nil { // Go's default, made explicit
		c.Close()
		s.close()
		return nil, err
	}
	return &tcpClient{c: c, r: bufio.NewReaderSize(c, tcpBuffer), w: ctxWatch{c: c}, server: s}, nil
}

func (t *tcpClient) roundTrip(ctx context.Context, req []byte) ([]byte, error) {
	if err := t.w.watch(ctx); err != nil {
		return nil, err
	}
	t.buf = grow(t.buf, tcpPrefix+len(req))
	binary.BigEndian.PutUint32(t.buf, uint32(len(req)))
	copy(t.buf[tcpPrefix:], req)
	if _, err := t.c.Write(t.buf); err != nil {
		return nil, err
	}
	n, err := readMessage(t.r, &t.buf)
	if err != nil {
		return nil, err
	}
	return t.buf[tcpPrefix : tcpPrefix+n], nil
}

func (t *tcpClient) close() error {
	t.w.release()
	err := t.c.Close()
	t.server.close()
	return err
}

// udpMaxDatagram is the largest UDP payload over IPv6 (IPv4's is 20
// bytes less; the kernel refuses a larger write).
const udpMaxDatagram = 65527

// udpServer echoes every datagram to its sender.
type udpServer struct {
	c  *net.UDPConn
	wg sync.WaitGroup
}

func (s *udpServer) echo() {
	buf := make([]byte, udpMaxDatagram)
	for {
		n, from, err := s.c.ReadFromUDPAddrPort(buf)
		if err != nil {
			return // closed
		}
		// A failed write is a lost datagram; the client's timeout
		// handles it as it would a loss on the wire.
		_, _ = s.c.WriteToUDPAddrPort(buf[:n], from)
	}
}

func (s *udpServer) close() {
	s.c.Close()
	s.wg.Wait()
}

// udpClient sends each request as one datagram on a connected socket.
type udpClient struct {
	c      *net.UDPConn
	buf    []byte
	w      ctxWatch
	server *udpServer
}

func openUDP(_ context.Context, host netip.Addr) (pinger, error) {
	sc, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(host, 0)))
	if err != nil {
		return nil, err
	}
	s := &udpServer{c: sc}
	s.wg.Go(s.echo)
	c, err := net.DialUDP("udp", nil, sc.LocalAddr().(*net.UDPAddr))
	if err != nil {
		s.close()
		return nil, err
	}
	return &udpClient{c: c, buf: make([]byte, udpMaxDatagram), w: ctxWatch{c: c}, server: s}, nil
}

func (u *udpClient) roundTrip(ctx context.Context, req []byte) ([]byte, error) {
	if err := u.w.watch(ctx); err != nil {
		return nil, err
	}
	if len(req) > udpMaxDatagram {
		return nil, errors.New("udp: payload larger than one datagram")
	}
	if _, err := u.c.Write(req); err != nil {
		return nil, err
	}
	n, err := u.c.Read(u.buf)
	if err != nil {
		return nil, err
	}
	return u.buf[:n], nil
}

func (u *udpClient) close() error {
	u.w.release()
	err := u.c.Close()
	u.server.close()
	return err
}

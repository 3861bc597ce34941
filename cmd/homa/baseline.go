package main

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/homa-go/homa/internal/tcpecho"
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

// tcpClient sends length-prefixed messages (tcpecho framing) over one
// connection.
type tcpClient struct {
	c      *net.TCPConn
	r      *bufio.Reader
	buf    []byte
	w      ctxWatch
	server *tcpecho.Server
}

func openTCP(_ context.Context, host netip.Addr) (pinger, error) {
	ln, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(netip.AddrPortFrom(host, 0)))
	if err != nil {
		return nil, err
	}
	s := tcpecho.Serve(ln, nil)
	c, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		s.Close()
		return nil, err
	}
	if err := c.SetNoDelay(true); err != nil { // Go's default, made explicit
		c.Close()
		s.Close()
		return nil, err
	}
	return &tcpClient{c: c, r: tcpecho.NewReader(c), w: ctxWatch{c: c}, server: s}, nil
}

func (t *tcpClient) roundTrip(ctx context.Context, req []byte) ([]byte, error) {
	if err := t.w.watch(ctx); err != nil {
		return nil, err
	}
	t.buf = tcpecho.AppendMessage(t.buf[:0], req)
	if _, err := t.c.Write(t.buf); err != nil {
		return nil, err
	}
	n, err := tcpecho.ReadMessage(t.r, &t.buf)
	if err != nil {
		return nil, err
	}
	return t.buf[tcpecho.Prefix : tcpecho.Prefix+n], nil
}

func (t *tcpClient) close() error {
	t.w.release()
	err := t.c.Close()
	t.server.Close()
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

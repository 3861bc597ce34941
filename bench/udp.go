package bench

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"time"
)

// The Go UDP baseline of bench is an echo server and a client in this
// process, one datagram each way on one socket, buffers reused, nothing
// allocated per round trip. It is measured in latency mode only.

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

func (s *udpServer) Close() {
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

// openUDP starts a UDP echo server on host and returns a client of it.
func openUDP(_ context.Context, host netip.Addr) (client, error) {
	sc, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(host, 0)))
	if err != nil {
		return nil, err
	}
	s := &udpServer{c: sc}
	s.wg.Go(s.echo)
	c, err := net.DialUDP("udp", nil, sc.LocalAddr().(*net.UDPAddr))
	if err != nil {
		s.Close()
		return nil, err
	}
	return &serialClient{p: &udpClient{c: c, buf: make([]byte, udpMaxDatagram), w: ctxWatch{c: c}, server: s}}, nil
}

func (u *udpClient) RoundTrip(ctx context.Context, req []byte) ([]byte, error) {
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

func (u *udpClient) Close() error {
	u.w.release()
	err := u.c.Close()
	u.server.Close()
	return err
}

package homa_test

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/homa-go/homa/homa"
	"github.com/homa-go/homa/homa/netio"
	"github.com/homa-go/homa/homa/wire"
)

// discardConn is a Conn without I/O: writes vanish, reads block until
// Close. The path benchmarks feed its endpoint with HandlePacket.
type discardConn struct {
	addr   netip.Addr
	port   uint16
	closed chan struct{}
	once   sync.Once
}

func newDiscardConn(addr netip.Addr, port uint16) *discardConn {
	return &discardConn{addr: addr, port: port, closed: make(chan struct{})}
}

func (c *discardConn) LocalAddr() netip.Addr                    { return c.addr }
func (c *discardConn) Port() uint16                             { return c.port }
func (c *discardConn) MaxPacket(netip.Addr) int                 { return 1480 }
func (c *discardConn) WriteBatch(p []netio.Packet) (int, error) { return len(p), nil }
func (c *discardConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return nil
}
func (c *discardConn) ReadBatch([]netio.Packet) (int, error) {
	<-c.closed
	return 0, net.ErrClosed
}

// onePacket is the DATA packet of a whole message from port src to port
// dst, acknowledging client RPC ackID (0: none).
func onePacket(src, dst uint16, id, ackID uint64, payload []byte) []byte {
	return appendPacket(nil, src, dst, id, ackID, payload)
}

// appendPacket appends onePacket's packet to b.
func appendPacket(b []byte, src, dst uint16, id, ackID uint64, payload []byte) []byte {
	d := wire.Data{Common: wire.Common{SrcPort: src, DstPort: dst, SenderID: id},
		MessageLength: uint32(len(payload)), Incoming: uint32(len(payload)), SegOffset: wire.OffsetNone, Payload: payload}
	if ackID != 0 {
		d.Ack = wire.AckEntry{ClientID: ackID, ServerPort: dst}
	}
	return d.Append(b)
}

// TestPathAllocs: in steady state a 100-byte RPC allocates nothing on
// either side but the Message the application receives, whatever its
// packets: the receive, send and buffer paths allocate nothing per
// packet (the paths of BenchmarkServerPath and BenchmarkClientPath,
// with the test's packets built into one reused buffer).
func TestPathAllocs(t *testing.T) {
	payload := make([]byte, 100)
	ctx := context.Background()
	var pkt []byte

	srv := homa.NewEndpoint(newDiscardConn(serverAddr, 23000), homa.Config{})
	defer srv.Close()
	var id, prev uint64
	serve := func() {
		id += 2
		pkt = appendPacket(pkt[:0], 40000, 23000, id, prev, payload)
		prev = id
		srv.HandlePacket(pkt, clientAddr)
		if err := echoNext(ctx, srv); err != nil {
			t.Fatal(err)
		}
	}

	cl := homa.NewEndpoint(newDiscardConn(clientAddr, 40000), homa.Config{})
	defer cl.Close()
	dst := netip.AddrPortFrom(serverAddr, 23000)
	call := func() {
		id, err := cl.Send(dst, payload, 0)
		if err != nil {
			t.Fatal(err)
		}
		pkt = appendPacket(pkt[:0], 23000, 40000, id|1, 0, payload)
		cl.HandlePacket(pkt, serverAddr)
		m, err := cl.Recv(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		m.Release()
	}

	for _, side := range []struct {
		name string
		rpc  func()
	}{{"server", serve}, {"client", call}} {
		for range 1000 { // steady state: pools, tables and timers warm
			side.rpc()
		}
		if allocs := testing.AllocsPerRun(1000, side.rpc); allocs > 1 {
			t.Errorf("%s: %v allocations per RPC, want at most 1 (the Message)", side.name, allocs)
		}
	}
}

// echoNext receives the next request on srv and answers it with its own
// bytes, as an echo server does.
func echoNext(ctx context.Context, srv *homa.Endpoint) error {
	m, err := srv.Recv(ctx, 0)
	if err != nil {
		return err
	}
	defer m.Release()
	return srv.Reply(m.Peer.Addr(), m.ID, m.Data)
}

// BenchmarkServerPath is a server's CPU per 100-byte RPC without I/O: a
// request (acknowledging the previous RPC, as a busy client does)
// handed to the endpoint, Recv, Reply, and the idle work after it.
func BenchmarkServerPath(b *testing.B) {
	srv := homa.NewEndpoint(newDiscardConn(serverAddr, 23000), homa.Config{})
	defer srv.Close()
	payload := make([]byte, 100)
	ctx := context.Background()
	b.ReportAllocs()
	var prev uint64
	for i := 0; b.Loop(); i++ {
		id := uint64(2*i + 2)
		srv.HandlePacket(onePacket(40000, 23000, id, prev, payload), clientAddr)
		prev = id
		if err := echoNext(ctx, srv); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkClientPath is a client's CPU per 100-byte RPC without I/O:
// Send, the response handed to the endpoint, Recv, and the idle work.
func BenchmarkClientPath(b *testing.B) {
	cl := homa.NewEndpoint(newDiscardConn(clientAddr, 40000), homa.Config{})
	defer cl.Close()
	payload := make([]byte, 100)
	dst := netip.AddrPortFrom(serverAddr, 23000)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		id, err := cl.Send(dst, payload, 0)
		if err != nil {
			b.Fatal(err)
		}
		cl.HandlePacket(onePacket(23000, 40000, id|1, 0, payload), serverAddr)
		m, err := cl.Recv(ctx, id)
		if err != nil {
			b.Fatal(err)
		}
		m.Release()
	}
}

// BenchmarkServerPathParallel is BenchmarkServerPath on one endpoint per
// goroutine, GOMAXPROCS of them at once: what endpoints on different
// CPUs share (the buffer pool) shows as the difference.
func BenchmarkServerPathParallel(b *testing.B) {
	var port atomic.Uint32
	port.Store(23000)
	payload := make([]byte, 100)
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		p := uint16(port.Add(1))
		srv := homa.NewEndpoint(newDiscardConn(serverAddr, p), homa.Config{})
		defer srv.Close()
		var prev uint64
		for i := 0; pb.Next(); i++ {
			id := uint64(2*i + 2)
			srv.HandlePacket(onePacket(40000, p, id, prev, payload), clientAddr)
			prev = id
			if err := echoNext(ctx, srv); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

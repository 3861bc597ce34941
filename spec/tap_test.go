package spec_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/homa-go/homa/homa"
	"github.com/homa-go/homa/homa/core"
	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/homa/netio"
	"github.com/homa-go/homa/homa/wire"
)

// The hosts of the conformance tests. fakeClient is a host with no
// endpoint: packets from it are injected with HandlePacket, and packets to
// it are recorded by the tap and then dropped by the network.
var (
	serverAddr = netip.MustParseAddr("10.0.0.1")
	clientAddr = netip.MustParseAddr("10.0.0.2")
	fakeClient = netip.MustParseAddr("10.0.0.9")
)

const (
	serverPort = 500   // the server endpoint's Homa port
	fakePort   = 40000 // the Homa port of injected client packets
)

// sent is one packet an endpoint wrote, as the tap saw it.
type sent struct {
	seq  int        // order of writing, from 0
	dst  netip.Addr // destination host
	prio uint8      // network priority it was written with
	pkt  wire.Packet
}

// String describes the packet for test failures.
func (s sent) String() string {
	return fmt.Sprintf("%s (priority %d, to %v)", s.pkt.String(), s.prio, s.dst)
}

// tap is a netio.Conn that records every packet written through it, then
// passes it on to the Conn it wraps. (The in-memory network refuses only
// malformed packets, which the engine does not write, so everything on
// record was sent.)
type tap struct {
	netio.Conn
	mu   sync.Mutex
	pkts []sent
}

// WriteBatch implements netio.Conn. It records the packets before
// passing them on, so that a packet is on record before its receiver can
// react to it.
func (t *tap) WriteBatch(pkts []netio.Packet) (int, error) {
	t.mu.Lock()
	for i := range pkts {
		s := sent{seq: len(t.pkts), dst: pkts[i].Addr, prio: pkts[i].Priority}
		// The engine recycles the buffers once the write returns: keep a
		// copy of the whole datagram for the parsed payload to point into.
		b := append(slices.Clone(pkts[i].Bytes()), pkts[i].Payload...)
		if s.pkt.Parse(b) == nil {
			t.pkts = append(t.pkts, s)
		}
	}
	t.mu.Unlock()
	return t.Conn.WriteBatch(pkts)
}

// mark returns the sequence number the next packet written will get.
func (t *tap) mark() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.pkts)
}

// since returns the packets of type typ written at or after mark.
func (t *tap) since(mark int, typ wire.Type) []sent {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []sent
	for _, s := range t.pkts[mark:] {
		if s.pkt.Type == typ {
			out = append(out, s)
		}
	}
	return out
}

// all returns every packet recorded so far.
func (t *tap) all() []sent {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.pkts)
}

// quiet is the engine configuration of these tests: no busy polling
// (which would spin in a synctest bubble), and a timer that never fires,
// so that only the packets a test injects cause anything. Tests about
// timers set Tick back to its default.
func quiet() homa.Config {
	return homa.Config{Config: core.Config{Tick: time.Hour}, PollDuration: -1}
}

// ticking is quiet with the default timer tick of 1 ms.
func ticking() homa.Config {
	c := quiet()
	c.Tick = 0
	return c
}

// open starts an endpoint on nw at addr:port whose writes go through a
// tap. The endpoint is closed when the test ends.
func open(t testing.TB, nw *memnet.Network, addr netip.Addr, port uint16, cfg homa.Config) (*homa.Endpoint, *tap) {
	t.Helper()
	c, err := nw.Open(addr, port)
	if err != nil {
		t.Fatal(err)
	}
	tp := &tap{Conn: c}
	e := homa.NewEndpoint(tp, cfg)
	t.Cleanup(func() { e.Close() })
	return e, tp
}

// newNet returns an in-memory network with a 1500-byte MTU (1,424 message
// bytes per DATA packet) and no faults.
func newNet(seed uint64) *memnet.Network {
	return memnet.New(memnet.Config{Seed: seed, MTU: 1500})
}

// dataPkt builds a DATA packet of RPC id (as its sender knows it) from
// port src to port dst, carrying msg[off:end] of a message of len(msg)
// bytes whose first unsched bytes the sender sends without grants.
func dataPkt(id uint64, src, dst uint16, msg []byte, unsched, off, end uint32) []byte {
	d := dataMsg(id, src, dst, msg, unsched, off, end)
	return d.Append(nil)
}

// dataMsg is dataPkt before encoding, for tests that change a field.
func dataMsg(id uint64, src, dst uint16, msg []byte, unsched, off, end uint32) wire.Data {
	return wire.Data{
		Common:        wire.Common{SrcPort: src, DstPort: dst, Sequence: off, SenderID: id},
		MessageLength: uint32(len(msg)),
		Incoming:      unsched,
		CutoffVersion: 1, // the version of the default cutoffs: not stale
		SegOffset:     off,
		Payload:       msg[off:end],
	}
}

// bare builds a packet that is only a common header.
func bare(typ wire.Type, id uint64, src, dst uint16) []byte {
	b := wire.Bare{Common: wire.Common{Type: typ, SrcPort: src, DstPort: dst, SenderID: id}}
	return b.Append(nil)
}

// resendPkt builds a RESEND for bytes [off, off+n) of RPC id's message.
func resendPkt(id uint64, src, dst uint16, off, n uint32) []byte {
	r := wire.Resend{Common: wire.Common{SrcPort: src, DstPort: dst, SenderID: id}, Offset: off, Length: n, Priority: 7}
	return r.Append(nil)
}

// message returns n bytes that differ from one position to the next.
func message(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i>>8)
	}
	return b
}

// covered returns the byte ranges the DATA packets carry, merged: the
// union of [Offset, Offset+len(Payload)).
func covered(pkts []sent) [][2]uint32 {
	var r [][2]uint32
	for _, s := range pkts {
		off := s.pkt.Data.Offset()
		r = append(r, [2]uint32{off, off + uint32(len(s.pkt.Data.Payload))})
	}
	slices.SortFunc(r, func(a, b [2]uint32) int { return int(a[0]) - int(b[0]) })
	var out [][2]uint32
	for _, x := range r {
		if n := len(out); n > 0 && x[0] <= out[n-1][1] {
			out[n-1][1] = max(out[n-1][1], x[1])
			continue
		}
		out = append(out, x)
	}
	return out
}

// acks reports whether an ACK packet names client RPC id at server port.
func acks(a *wire.Ack, id uint64, port uint16) bool {
	if a.SenderID == id && a.DstPort == port {
		return true
	}
	for _, e := range a.Entries() {
		if e.ClientID == id && e.ServerPort == port {
			return true
		}
	}
	return false
}

// recvCtx bounds a Recv; inside a synctest bubble the bound is on the
// fake clock.
func recvCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// header returns the common header of a parsed packet of any type.
func header(p *wire.Packet) wire.Common {
	switch p.Type {
	case wire.TypeData:
		return p.Data.Common
	case wire.TypeGrant:
		return p.Grant.Common
	case wire.TypeResend:
		return p.Resend.Common
	case wire.TypeCutoffs:
		return p.Cutoffs.Common
	case wire.TypeAck:
		return p.Ack.Common
	}
	return p.Common
}

package interop

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/homa-go/homa/contract"
	"github.com/homa-go/homa/homa"
	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/homa/netio"
	"github.com/homa-go/homa/homa/wire"
)

// The hosts of a behaviour test, at the addresses of the captures: the
// engine takes the place of the Linux module, the test plays the
// raw-socket peer.
var (
	moduleAddr = netip.MustParseAddr("10.146.12.2")
	peerAddr   = netip.MustParseAddr("10.146.12.1")
)

// Ports and sizes of the captures.
const (
	moduleServerPort = 500   // the module's echo server
	peerClientPort   = 40000 // the raw peer as client
	peerServerPort   = 600   // the raw peer as server
	// segment is the payload of a full DATA packet at MTU 1500: 1500 less
	// the 20-byte IP header and the 56-byte DATA header.
	segment = 1424
	// unsched is the unscheduled bytes per message, Linux's default.
	unsched = 40_000
	// linuxVersion is the version of Linux's default cutoffs; senders
	// that never received CUTOFFS from a receiver assume it.
	linuxVersion = 1
	// controlPriority is the priority Linux gives every control packet.
	controlPriority = 7
)

// Bounds on waits. Every wait of a behaviour test ends by itself. The
// tests run in synctest bubbles (see simulated), so these are times of
// the bubble's clock: a wait ends only once the engine, the network and
// the peer's reader are all blocked, with every packet sent until then
// delivered.
const (
	// waitFor bounds the wait for a packet the engine must send.
	waitFor = 5 * time.Second
	// quietTicks is how long, in 1 ms ticks, a test watches for packets
	// that must not come.
	quietTicks = 30
)

// rxPacket is a packet the peer received from the engine.
type rxPacket struct {
	wire.Packet
	raw []byte
}

// peer is the raw side of a behaviour test: a Conn on the in-memory
// network that the test reads and writes Homa packets on directly.
type peer struct {
	t    *testing.T
	conn netio.Conn
	in   chan rxPacket
	done chan struct{}
	seen []string // every packet received, for failure messages
}

// scene is a behaviour test's network: the engine and the peer.
type scene struct {
	t    *testing.T
	ep   *homa.Endpoint
	peer *peer
	echo *echoServer // when the engine serves
}

// newScene starts the engine at moduleAddr:enginePort (0: a client port)
// with cfg and the peer at peerAddr:peerPort, on a lossless in-memory
// network with MTU 1500. The engine does not spin on its socket (a
// spinning reader would keep the bubble's clock from moving).
func newScene(t *testing.T, cfg homa.Config, enginePort, peerPort uint16) *scene {
	if cfg.PollDuration == 0 {
		cfg.PollDuration = -1
	}
	nw := memnet.New(memnet.Config{Seed: 146, MTU: 1500})
	ec, err := nw.Open(moduleAddr, enginePort)
	if err != nil {
		t.Fatal(err)
	}
	pc, err := nw.Open(peerAddr, peerPort)
	if err != nil {
		t.Fatal(err)
	}
	s := &scene{t: t, ep: homa.NewEndpoint(ec, cfg)}
	s.peer = &peer{t: t, conn: pc, in: make(chan rxPacket, 1<<14), done: make(chan struct{})}
	go s.peer.read()
	t.Cleanup(func() {
		s.ep.Close()
		if s.echo != nil {
			if err := s.echo.stop(); err != nil {
				t.Errorf("echo server: %v", err)
			}
		}
		pc.Close()
		<-s.peer.done
		nw.Close()
	})
	return s
}

// newServerScene starts the engine as the module's echo server on port
// 500 and the peer as a client on port 40000.
func newServerScene(t *testing.T, cfg homa.Config) *scene {
	s := newScene(t, cfg, moduleServerPort, peerClientPort)
	s.echo = startEcho(s.ep)
	return s
}

// newClientScene starts the engine as a client (it gets port 32768) and
// the peer as a server on port 600.
func newClientScene(t *testing.T, cfg homa.Config) *scene {
	return newScene(t, cfg, 0, peerServerPort)
}

// read receives packets until the Conn closes.
func (p *peer) read() {
	defer close(p.done)
	defer close(p.in)
	pkts := make([]netio.Packet, 16)
	for i := range pkts {
		pkts[i].Buf = make([]byte, 1<<16)
	}
	for {
		n, err := p.conn.ReadBatch(pkts)
		for i := range pkts[:n] {
			raw := bytes.Clone(pkts[i].Bytes())
			var rp rxPacket
			if rp.Parse(raw) != nil {
				rp.Type = 0 // undecodable: the tests fail on it
			}
			rp.raw = raw
			select {
			case p.in <- rp:
			default: // the test stopped reading; drop
			}
		}
		if err != nil {
			return
		}
	}
}

// send writes packets to the engine.
func (p *peer) send(pkts ...[]byte) {
	p.t.Helper()
	batch := make([]netio.Packet, len(pkts))
	for i, b := range pkts {
		batch[i] = netio.Packet{Buf: b, N: len(b), Addr: moduleAddr, Priority: controlPriority}
	}
	if n, err := p.conn.WriteBatch(batch); err != nil || n != len(batch) {
		p.t.Fatalf("peer: wrote %d of %d packets: %v", n, len(batch), err)
	}
}

// next returns the next packet from the engine, or false after d.
func (p *peer) next(d time.Duration) (rxPacket, bool) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case rp, ok := <-p.in:
		if ok {
			p.seen = append(p.seen, rp.String())
		}
		return rp, ok
	case <-timer.C:
		return rxPacket{}, false
	}
}

// expect returns the next packet of type typ from the engine and the
// packets of other types that came before it. It fails the test if none
// comes within waitFor.
func (p *peer) expect(typ wire.Type) (rxPacket, []rxPacket) {
	p.t.Helper()
	var others []rxPacket
	deadline := time.Now().Add(waitFor)
	for {
		rp, ok := p.next(time.Until(deadline))
		if !ok {
			p.t.Fatalf("no %v from the engine within %v; received:\n%s", typ, waitFor, p.history())
		}
		if rp.Type == typ {
			return rp, others
		}
		others = append(others, rp)
	}
}

// quiet fails the test if a packet for which bad is true arrives within
// quietTicks milliseconds, and returns the packets that did arrive.
func (p *peer) quiet(what string, bad func(rxPacket) bool) []rxPacket {
	p.t.Helper()
	var got []rxPacket
	deadline := time.Now().Add(quietTicks * time.Millisecond)
	for {
		rp, ok := p.next(time.Until(deadline))
		if !ok {
			return got
		}
		if bad(rp) {
			p.t.Errorf("%s: %s", what, rp.String())
		}
		got = append(got, rp)
	}
}

// drain discards what arrives within d of the bubble's clock: packets
// the engine built before the state a test just observed, and wrote
// after.
func (p *peer) drain(d time.Duration) []rxPacket {
	var got []rxPacket
	deadline := time.Now().Add(d)
	for {
		rp, ok := p.next(time.Until(deadline))
		if !ok {
			return got
		}
		got = append(got, rp)
	}
}

// history lists the packets received so far.
func (p *peer) history() string {
	if len(p.seen) == 0 {
		return "  (nothing)"
	}
	return "  " + strings.Join(p.seen, "\n  ")
}

// common returns a common header for a packet from the peer's port to
// the engine's, with the Linux marker values.
func (s *scene) common(id uint64) wire.Common {
	return wire.Common{SrcPort: s.peer.conn.Port(), DstPort: s.ep.Port(), SenderID: id}
}

// dataSpec describes a message the peer sends.
type dataSpec struct {
	id         uint64
	msg        []byte
	incoming   uint32 // 0: min(len, unsched)
	cutoffVer  uint16 // version of the engine's cutoffs the peer assumes
	ack        wire.AckEntry
	retransmit bool
}

// packets returns the DATA packets of bytes [from, to) of the message,
// as the raw peer of the captures built them: segments of up to 1424
// bytes with the offset in both sequence and offset fields, the
// piggybacked ack in the first.
func (s *scene) packets(d dataSpec, from, to int) [][]byte {
	incoming := d.incoming
	if incoming == 0 {
		incoming = uint32(min(len(d.msg), unsched))
	}
	var pkts [][]byte
	for off := from; off < to; off += segment {
		end := min(off+segment, to)
		p := wire.Data{Common: s.common(d.id), MessageLength: uint32(len(d.msg)), Incoming: incoming,
			CutoffVersion: d.cutoffVer, SegOffset: uint32(off), Payload: d.msg[off:end]}
		p.Sequence = uint32(off)
		if off == from {
			p.Ack = d.ack
		}
		if d.retransmit {
			p.Retransmit = 1
		}
		pkts = append(pkts, p.Append(nil))
	}
	return pkts
}

// bare builds a header-only packet from the peer.
func (s *scene) bare(t wire.Type, id uint64) []byte {
	b := wire.Bare{Common: s.common(id)}
	b.Type = t
	return b.Append(nil)
}

// ack builds an ACK from the peer with the given entries.
func (s *scene) ack(id uint64, entries ...wire.AckEntry) []byte {
	a := wire.Ack{Common: s.common(id), NumAcks: uint16(len(entries))}
	copy(a.Acks[:], entries)
	return a.Append(nil)
}

// resend builds a RESEND from the peer.
func (s *scene) resend(id uint64, offset, length uint32, prio uint8) []byte {
	r := wire.Resend{Common: s.common(id), Offset: offset, Length: length, Priority: prio}
	return r.Append(nil)
}

// grant builds a GRANT from the peer.
func (s *scene) grant(id uint64, offset uint32, prio uint8) []byte {
	g := wire.Grant{Common: s.common(id), Offset: offset, Priority: prio}
	return g.Append(nil)
}

// checkHeader checks the ports and sender id of a packet from the engine.
func (s *scene) checkHeader(rp rxPacket, wantID uint64) {
	s.t.Helper()
	c := commonOf(&rp.Packet)
	if c.SrcPort != s.ep.Port() || c.DstPort != s.peer.conn.Port() || c.SenderID != wantID {
		s.t.Errorf("%v from the engine: ports %d->%d id %d, want %d->%d id %d",
			rp.Type, c.SrcPort, c.DstPort, c.SenderID, s.ep.Port(), s.peer.conn.Port(), wantID)
	}
}

// commonOf returns the common header of a decoded packet.
func commonOf(p *wire.Packet) *wire.Common {
	switch p.Type {
	case wire.TypeData:
		return &p.Data.Common
	case wire.TypeGrant:
		return &p.Grant.Common
	case wire.TypeResend:
		return &p.Resend.Common
	case wire.TypeCutoffs:
		return &p.Cutoffs.Common
	case wire.TypeAck:
		return &p.Ack.Common
	}
	return &p.Common
}

// message collects a message the engine sends in DATA packets.
type message struct {
	buf      []byte
	got      []bool // per byte
	received int
	length   int
}

// add records the payload of a DATA packet; it reports an error for a
// packet that does not fit the message.
func (m *message) add(d *wire.Data) error {
	if m.buf == nil {
		m.length = int(d.MessageLength)
		m.buf = make([]byte, m.length)
		m.got = make([]bool, m.length)
	}
	off := int(d.Offset())
	if int(d.MessageLength) != m.length || off+len(d.Payload) > m.length {
		return fmt.Errorf("DATA offset %d +%d of a %d-byte message (was %d bytes)", off, len(d.Payload), d.MessageLength, m.length)
	}
	copy(m.buf[off:], d.Payload)
	for i := off; i < off+len(d.Payload); i++ {
		if !m.got[i] {
			m.got[i] = true
			m.received++
		}
	}
	return nil
}

func (m *message) complete() bool { return m.buf != nil && m.received == m.length }

// pattern returns n bytes that differ from one message to the next.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) ^ seed
	}
	return b
}

// waitStats polls the engine's statistics until ok holds, and fails the
// test after waitFor.
func (s *scene) waitStats(what string, ok func(contract.Stats) bool) contract.Stats {
	s.t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		st := s.ep.Stats()
		if ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s: not reached within %v: %+v", what, waitFor, st)
		}
		time.Sleep(time.Millisecond)
	}
}

// echoServer answers every request the engine receives with its bytes;
// while held, requests wait for release.
type echoServer struct {
	ep     *homa.Endpoint
	mu     sync.Mutex
	held   chan struct{} // closed when released; nil when not held
	served int
	errs   []error // Reply failures
	wg     sync.WaitGroup
}

func startEcho(ep *homa.Endpoint) *echoServer {
	e := &echoServer{ep: ep}
	e.wg.Add(1)
	go e.serve()
	return e
}

func (e *echoServer) serve() {
	defer e.wg.Done()
	for {
		m, err := e.ep.Recv(context.Background(), 0)
		if err != nil {
			return // closed
		}
		e.mu.Lock()
		held := e.held
		e.mu.Unlock()
		if held != nil {
			<-held
		}
		err = e.ep.Reply(m.Peer.Addr(), m.ID, m.Data)
		e.mu.Lock()
		if err != nil && !errors.Is(err, contract.ErrClosed) {
			e.errs = append(e.errs, err)
		}
		e.served++
		e.mu.Unlock()
		m.Release()
	}
}

// hold makes the server wait before answering until release is called.
func (e *echoServer) hold() {
	e.mu.Lock()
	e.held = make(chan struct{})
	e.mu.Unlock()
}

// release answers the requests held and stops holding.
func (e *echoServer) release() {
	e.mu.Lock()
	if e.held != nil {
		close(e.held)
		e.held = nil
	}
	e.mu.Unlock()
}

// stop waits for the server goroutine after the endpoint closed, and
// returns the Reply failures it saw.
func (e *echoServer) stop() error {
	e.release()
	e.wg.Wait()
	e.mu.Lock()
	defer e.mu.Unlock()
	return errors.Join(e.errs...)
}

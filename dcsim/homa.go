package dcsim

import (
	"net/netip"
	"time"

	"github.com/homa-go/homa/contract"
	"github.com/homa-go/homa/homa/core"
	"github.com/homa-go/homa/homa/wire"
)

// homaPort is every host's Homa port: one core per host serves and
// sends.
const homaPort = 4000

// ipHeader is the IPv4 header in front of every Homa packet.
const ipHeader = 20

// offType is where a Homa header keeps the packet type (spec/WIRE.md).
const offType = 11

// homaNet runs one real core per host over the fabric.
type homaNet struct {
	f         *fabric
	g         *generator
	hosts     []homaHost
	bufs      *pool
	out       core.Output
	msgs      []*contract.Message
	maxPacket int
	frame     int
	failed    uint64
	pk        packetizer
	// answers maps the id of a client's RPC whose reply is a workload
	// response (not a one-byte acknowledgment) to that response.
	answers map[uint64]int32
}

type homaHost struct {
	core     *core.Core
	timerAt  int64
	timerGen uint32
	timerSet bool
	// rpcs maps the id of an RPC this host started to the workload
	// message its request carries.
	rpcs map[uint64]int32
}

// coreConfig is the engine's default configuration, paced at the host
// link, with the study's overrides.
func coreConfig(cfg *Config) core.Config {
	var c core.Config
	if cfg.PaceFraction > 0 {
		c.LinkMbps = int(float64(cfg.HostMbps) * cfg.PaceFraction)
	}
	c.Grant.MaxOvercommit = cfg.Overcommit
	c.Grant.SchedLevels = cfg.SchedLevels
	c.UnschedBytes = cfg.UnschedBytes
	return c
}

func homaPacketizer(cfg *Config) packetizer {
	mp := cfg.MTU - ipHeader
	return packetizer{payload: mp - wire.DataLen, overhead: wire.DataLen + ipHeader + cfg.FrameOverhead,
		part: contract.MaxMessage}
}

func newHomaNet(f *fabric, cfg *Config) *homaNet {
	n := &homaNet{f: f, bufs: new(pool), maxPacket: cfg.MTU - ipHeader, frame: cfg.FrameOverhead,
		pk: homaPacketizer(cfg), answers: make(map[uint64]int32)}
	n.hosts = make([]homaHost, cfg.Hosts)
	cc := coreConfig(cfg)
	for i := range n.hosts {
		n.hosts[i] = homaHost{
			core: core.New(core.Local{Port: homaPort, FirstID: uint64(i+1) << 24, Buffers: n.bufs}, cc),
			rpcs: make(map[uint64]int32),
		}
	}
	f.ep = n
	return n
}

// addr is host h's IPv4 address: 10.0.0.0 plus h+1.
func addr(h int32) netip.Addr {
	v := uint32(10<<24) + uint32(h) + 1
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// hostOf is the inverse of addr.
func hostOf(a netip.Addr) int32 {
	b := a.As4()
	return int32(uint32(b[0])<<24|uint32(b[1])<<16|uint32(b[2])<<8|uint32(b[3])) - (10 << 24) - 1
}

func now(f *fabric) time.Duration { return time.Duration(f.now) }

// Long messages. A workload message longer than the core's largest goes
// as parts of contract.MaxMessage bytes (the last shorter), each the
// request of an RPC from the message's sender to its receiver, at most
// longWindow of them outstanding: the next part starts when a part's
// reply comes back. The message has arrived when its last part has. A
// part's reply is one byte, except that the part completing a request
// carries the workload's response, if that fits one message; a longer
// response goes the same way as a long request, in parts from the
// server, each answered with one byte.
const longWindow = 2

// start starts message i: a request, or a response too long to be one
// reply.
func (n *homaNet) start(i int32) {
	n.startParts(i)
	n.settle(n.g.msgs[i].src)
}

// startParts sends message i's first parts; the caller settles.
func (n *homaNet) startParts(i int32) {
	m := &n.g.msgs[i]
	k, _ := n.pk.parts(int(m.size))
	m.unsent, m.missing = int32(k), int32(k)
	for range min(k, longWindow) {
		n.sendPart(i)
	}
}

// sendPart sends message i's next part as an RPC's request.
func (n *homaNet) sendPart(i int32) {
	m := &n.g.msgs[i]
	k, last := n.pk.parts(int(m.size))
	size := n.pk.part
	if m.unsent == 1 {
		size = last
	}
	if k == 1 {
		size = int(m.size)
	}
	m.unsent--
	h := &n.hosts[m.src]
	id, err := h.core.Send(netip.AddrPortFrom(addr(m.dst), homaPort), n.bufs.Get(size), uint64(i), n.maxPacket, now(n.f), &n.out)
	if err != nil {
		n.failed++
		return
	}
	h.rpcs[id] = i
}

func (n *homaNet) deliver(h int32, p *Packet) {
	n.hosts[h].core.Handle(p.data, addr(p.Src), now(n.f), &n.out)
	n.bufs.Put(p.data)
	n.f.freePacket(p)
	n.settle(h)
}

func (n *homaNet) timer(h int32, gen uint32) {
	hh := &n.hosts[h]
	if !hh.timerSet || gen != hh.timerGen {
		return // superseded
	}
	hh.timerSet = false
	hh.core.Tick(now(n.f), &n.out)
	n.settle(h)
}

func (n *homaNet) flowTimer(int32, uint32) {}

func (n *homaNet) bind(g *generator) { n.g = g }

// counters adds the cores' counters to r.
func (n *homaNet) counters(r *Result) {
	for i := range n.hosts {
		s := n.hosts[i].core.Stats()
		r.Grants += s.GrantsSent
		r.Resends += s.ResendsSent
		r.Retransmits += s.ResentPackets
	}
	r.Failed = n.failed
}

// settle puts what host h's last core call produced on the fabric, hands
// its messages to the application, and keeps one timer at the core's
// next deadline.
func (n *homaNet) settle(h int32) {
	hh := &n.hosts[h]
	for {
		// The application first: its replies add to the packets.
		n.msgs = append(n.msgs[:0], n.out.Messages...)
		clear(n.out.Messages)
		n.out.Messages = n.out.Messages[:0]
		for _, m := range n.msgs {
			n.message(h, m)
		}
		clear(n.msgs)
		for _, p := range n.out.Packets {
			pkt := n.f.newPacket()
			l := len(p.Buf) + len(p.Payload)
			pkt.data = n.bufs.Get(l)
			copy(pkt.data[copy(pkt.data, p.Buf):], p.Payload)
			n.bufs.Put(p.Buf)
			pkt.Src, pkt.Dst = h, hostOf(p.Addr)
			pkt.Prio = p.Priority
			pkt.Data = len(p.Payload) > 0 || l > wire.DataLen && p.Buf[offType] == byte(wire.TypeData)
			pkt.Wire = int32(l + ipHeader + n.frame)
			pkt.Flow = uint64(h)<<32 | uint64(pkt.Dst)
			n.f.send(pkt)
		}
		for _, hold := range n.out.Holds {
			hold.Release()
		}
		n.out.Reset()
		if !hh.core.IdleWork() {
			break
		}
		hh.core.Idle(now(n.f), &n.out)
	}
	if at, ok := hh.core.Next(); ok && (!hh.timerSet || int64(at) < hh.timerAt) {
		hh.timerAt, hh.timerSet = max(int64(at), n.f.now), true
		hh.timerGen++
		n.f.schedule(hh.timerAt, evTimer, h, hh.timerGen, nil)
	}
}

// message is host h's application: it counts the parts of workload
// messages, answers requests (with a workload response or one byte) and
// keeps long messages' windows full.
func (n *homaNet) message(h int32, m *contract.Message) {
	defer m.Release()
	hh := &n.hosts[h]
	if m.Err != nil {
		n.failed++
		delete(hh.rpcs, m.ID)
		delete(n.answers, m.ID)
		return
	}
	if !m.IsRequest() {
		i := hh.rpcs[m.ID]
		delete(hh.rpcs, m.ID)
		if resp, ok := n.answers[m.ID]; ok {
			delete(n.answers, m.ID)
			n.g.delivered(resp)
		}
		if n.g.msgs[i].unsent > 0 {
			n.sendPart(i)
		}
		return
	}
	peer := m.Peer.Addr()
	hh.core.Delivered(peer, m.ID)
	i, ok := n.hosts[hostOf(peer)].rpcs[m.ID&^1]
	if !ok {
		return
	}
	reply := n.bufs.Get(1)
	if w := &n.g.msgs[i]; w.missing > 0 {
		w.missing--
		if w.missing == 0 {
			if resp, ok := n.g.delivered(i); ok {
				if k, _ := n.pk.parts(int(n.g.msgs[resp].size)); k == 1 {
					n.bufs.Put(reply)
					reply = n.bufs.Get(int(n.g.msgs[resp].size))
					n.answers[m.ID&^1] = resp
				} else {
					n.startParts(resp)
				}
			}
		}
	}
	if err := hh.core.Reply(peer, m.ID, reply, n.maxPacket, now(n.f), &n.out); err != nil {
		n.failed++
	}
}

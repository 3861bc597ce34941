package dcsim

import (
	"net/netip"
	"time"

	"github.com/homa-go/homa/contract"
	"github.com/homa-go/homa/homa"
	"github.com/homa-go/homa/homa/core"
	"github.com/homa-go/homa/homa/netio"
	"github.com/homa-go/homa/homa/wire"
)

// homaPort is every host's Homa port: one core per host (or one per
// shard, Config.Shards) serves and sends.
const homaPort = 4000

// ipHeader is the IPv4 header in front of every Homa packet.
const ipHeader = 20

// offType is where a Homa header keeps the packet type (spec/WIRE.md).
const offType = 11

// homaNet runs one real core per host (or per shard of a host) over
// the fabric.
type homaNet struct {
	f         *fabric
	g         *generator
	hosts     []homaHost
	shards    int     // cores per host
	shardOf   []int32 // by host: the shard that serves it on every other host
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
	cores []hostCore // one, or one per shard
	// rpcs maps the id of an RPC this host started to the workload
	// message its request carries.
	rpcs map[uint64]int32
}

// hostCore is a core of a host, with the timer of its next deadline.
type hostCore struct {
	core     *core.Core
	timerAt  int64
	timerGen uint32
	timerSet bool
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
	n.shards = max(cfg.Shards, 1)
	n.shardOf = make([]int32, cfg.Hosts)
	for h := range n.shardOf {
		n.shardOf[h] = int32(netio.ShardOf(netip.AddrPortFrom(addr(int32(h)), homaPort), n.shards))
	}
	cc := coreConfig(cfg)
	for i := range n.hosts {
		var budget *homa.GrantBudget
		var link *homa.SharedLink
		var cutoffs *homa.SharedCutoffs
		if n.shards > 1 && !cfg.ShardsShareNothing {
			budget = homa.SplitIncoming(cc.Grant.WithDefaults().MaxIncoming, n.shards)
			link = homa.NewSharedLink(n.shards)
			cutoffs = homa.NewSharedCutoffs(cc.Cutoffs)
		}
		h := homaHost{cores: make([]hostCore, n.shards), rpcs: make(map[uint64]int32)}
		for k := range h.cores {
			c := cc
			if budget != nil {
				c.Budget, c.Link, c.Estimator = budget.Shard(k), link.Shard(k), cutoffs.Shard()
			}
			first := uint64(i*n.shards+k+1) << 24
			h.cores[k].core = core.New(core.Local{Port: homaPort, FirstID: first, Buffers: n.bufs}, c)
		}
		n.hosts[i] = h
	}
	f.ep = n
	return n
}

// coreFor is the core of host h that serves peer (the shard of peer).
func (n *homaNet) coreFor(h, peer int32) (int32, *core.Core) {
	k := n.shardOf[peer]
	return k, n.hosts[h].cores[k].core
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
	m := &n.g.msgs[i]
	n.settle(m.src, n.shardOf[m.dst])
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
	_, c := n.coreFor(m.src, m.dst)
	id, err := c.Send(netip.AddrPortFrom(addr(m.dst), homaPort), n.bufs.Get(size), uint64(i), n.maxPacket, now(n.f), &n.out)
	if err != nil {
		n.failed++
		return
	}
	n.hosts[m.src].rpcs[id] = i
}

func (n *homaNet) deliver(h int32, p *Packet) {
	k, c := n.coreFor(h, p.Src)
	c.Handle(p.data, addr(p.Src), now(n.f), &n.out)
	n.bufs.Put(p.data)
	n.f.freePacket(p)
	n.settle(h, k)
}

// timer runs the deadlines of core idx: host idx/shards, its shard
// idx%shards.
func (n *homaNet) timer(idx int32, gen uint32) {
	h, k := idx/int32(n.shards), idx%int32(n.shards)
	hc := &n.hosts[h].cores[k]
	if !hc.timerSet || gen != hc.timerGen {
		return // superseded
	}
	hc.timerSet = false
	hc.core.Tick(now(n.f), &n.out)
	n.settle(h, k)
}

func (n *homaNet) flowTimer(int32, uint32) {}

func (n *homaNet) bind(g *generator) { n.g = g }

// counters adds the cores' counters to r.
func (n *homaNet) counters(r *Result) {
	for i := range n.hosts {
		for k := range n.hosts[i].cores {
			s := n.hosts[i].cores[k].core.Stats()
			r.Grants += s.GrantsSent
			r.Resends += s.ResendsSent
			r.Retransmits += s.ResentPackets
		}
	}
	r.Failed = n.failed
}

// settle puts what the last call of host h's core k produced on the
// fabric, hands its messages to the application, and keeps one timer at
// the core's next deadline.
func (n *homaNet) settle(h, k int32) {
	hc := &n.hosts[h].cores[k]
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
		if !hc.core.IdleWork() {
			break
		}
		hc.core.Idle(now(n.f), &n.out)
	}
	if at, ok := hc.core.Next(); ok && (!hc.timerSet || int64(at) < hc.timerAt) {
		hc.timerAt, hc.timerSet = max(int64(at), n.f.now), true
		hc.timerGen++
		n.f.schedule(hc.timerAt, evTimer, h*int32(n.shards)+k, hc.timerGen, nil)
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
	_, c := n.coreFor(h, hostOf(peer))
	c.Delivered(peer, m.ID)
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
	if err := c.Reply(peer, m.ID, reply, n.maxPacket, now(n.f), &n.out); err != nil {
		n.failed++
	}
}

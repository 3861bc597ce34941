package dcsim

import "math/bits"

// The baseline: each message is a TCP-like flow with DCTCP congestion
// control. Segments carry MSS bytes; the receiver acknowledges every
// segment cumulatively, echoing the CE mark of the segment it answers;
// the sender grows its window in slow start and congestion avoidance,
// cuts it by alpha/2 once a window when marks came back (alpha the
// moving average of the marked fraction, gain 1/16), retransmits on
// three duplicate acknowledgments (halving the window) and goes back to
// its first unacknowledged segment with a window of one on a timeout.
// Every packet uses priority 0. There is no handshake: a flow starts
// with its initial window, as on a warm connection.

// DCTCP parameters.
const (
	tcpHeader   = 40 // IPv4 and TCP headers
	tcpInitWin  = 10 // segments
	tcpGain     = 1.0 / 16
	tcpDupAcks  = 3
	tcpRTO      = 1_000_000 // ns
	tcpMaxTries = 30        // timeouts before a flow is abandoned
)

// tcpSeg is a baseline segment's header: a data segment (seq, with len
// bytes) or an ACK (seq the next segment expected, ece the echo).
type tcpSeg struct {
	flow int32
	seq  int32
	len  int32
	ack  bool
	ece  bool
}

type tcpFlow struct {
	msg            int32
	src, dst       int32
	size, nseg     int32
	una, nxt       int32
	cwnd, ssthresh float64
	alpha          float64
	acked, marked  int32
	winEnd         int32
	dupacks        int32
	rtoGen         uint32
	tries          int32
	sent           bool // the sender is done
	got            []uint64
	cum            int32
	received       bool // the receiver has it all
}

type tcpNet struct {
	f           *fabric
	g           *generator
	mss, frame  int32
	flows       map[int32]*tcpFlow
	retransmits uint64
	timeouts    uint64
	failed      uint64
}

func tcpPacketizer(cfg *Config) packetizer {
	return packetizer{payload: cfg.MTU - tcpHeader, overhead: tcpHeader + cfg.FrameOverhead}
}

func newTCPNet(f *fabric, cfg *Config) *tcpNet {
	n := &tcpNet{f: f, mss: int32(cfg.MTU - tcpHeader), frame: int32(cfg.FrameOverhead), flows: make(map[int32]*tcpFlow)}
	f.ep = n
	return n
}

func (n *tcpNet) bind(g *generator) { n.g = g }

func (n *tcpNet) counters(r *Result) {
	r.Retransmits, r.Timeouts, r.Failed = n.retransmits, n.timeouts, n.failed
}

func (n *tcpNet) start(i int32) {
	m := &n.g.msgs[i]
	nseg := max((m.size+n.mss-1)/n.mss, 1)
	fl := &tcpFlow{
		msg: i, src: m.src, dst: m.dst, size: m.size, nseg: nseg,
		cwnd: tcpInitWin, ssthresh: 1 << 30, got: make([]uint64, (nseg+63)/64),
	}
	n.flows[i] = fl
	n.sendMore(fl)
}

// segment sends segment s of fl.
func (n *tcpNet) segment(fl *tcpFlow, s int32) {
	p := n.f.newPacket()
	l := min(n.mss, fl.size-s*n.mss)
	p.Src, p.Dst, p.Wire, p.Flow = fl.src, fl.dst, l+tcpHeader+n.frame, uint64(fl.msg)
	p.ECT, p.Data = true, true
	p.seg = tcpSeg{flow: fl.msg, seq: s, len: l}
	n.f.send(p)
}

func (n *tcpNet) sendMore(fl *tcpFlow) {
	armed := fl.nxt > fl.una
	for fl.nxt < fl.nseg && float64(fl.nxt-fl.una) < max(fl.cwnd, 1) {
		n.segment(fl, fl.nxt)
		fl.nxt++
	}
	if !armed && fl.nxt > fl.una {
		n.arm(fl)
	}
}

func (n *tcpNet) arm(fl *tcpFlow) {
	fl.rtoGen++
	n.f.schedule(n.f.now+tcpRTO, evFlow, fl.msg, fl.rtoGen, nil)
}

func (n *tcpNet) deliver(h int32, p *Packet) {
	s := p.seg
	ce := p.CE
	n.f.freePacket(p)
	fl := n.flows[s.flow]
	if fl == nil {
		return // a straggler of a finished flow
	}
	if s.ack {
		n.onAck(fl, s.seq, s.ece)
		return
	}
	// The receiver: note the segment, acknowledge cumulatively.
	if fl.got[s.seq/64]&(1<<(s.seq%64)) == 0 {
		fl.got[s.seq/64] |= 1 << (s.seq % 64)
		for fl.cum < fl.nseg && fl.got[fl.cum/64]&(1<<(fl.cum%64)) != 0 {
			if w := fl.got[fl.cum/64] >> (fl.cum % 64); w == ^uint64(0)>>(fl.cum%64) {
				fl.cum += int32(64 - fl.cum%64)
			} else {
				fl.cum += int32(bits.TrailingZeros64(^w))
			}
		}
		fl.cum = min(fl.cum, fl.nseg)
	}
	a := n.f.newPacket()
	a.Src, a.Dst, a.Wire, a.Flow = fl.dst, fl.src, tcpHeader+n.frame, uint64(fl.msg)
	a.seg = tcpSeg{flow: fl.msg, seq: fl.cum, ack: true, ece: ce}
	n.f.send(a)
	if fl.cum == fl.nseg && !fl.received {
		fl.received = true
		if resp, ok := n.g.delivered(fl.msg); ok {
			n.start(resp)
		}
		n.retire(fl)
	}
}

// onAck is the sender's DCTCP.
func (n *tcpNet) onAck(fl *tcpFlow, a int32, ece bool) {
	if fl.sent {
		return
	}
	switch {
	case a > fl.una:
		newly := a - fl.una
		fl.una, fl.dupacks, fl.tries = a, 0, 0
		fl.nxt = max(fl.nxt, fl.una)
		fl.acked += newly
		if ece {
			fl.marked += newly
		}
		if fl.una >= fl.winEnd {
			frac := float64(fl.marked) / float64(max(fl.acked, 1))
			fl.alpha = (1-tcpGain)*fl.alpha + tcpGain*frac
			if fl.marked > 0 {
				fl.cwnd = max(fl.cwnd*(1-fl.alpha/2), 1)
				fl.ssthresh = fl.cwnd
			}
			fl.acked, fl.marked, fl.winEnd = 0, 0, fl.nxt
		}
		if fl.cwnd < fl.ssthresh {
			fl.cwnd += float64(newly)
		} else {
			fl.cwnd += float64(newly) / fl.cwnd
		}
		if fl.una == fl.nseg {
			fl.sent = true
			fl.rtoGen++ // disarm
			n.retire(fl)
			return
		}
		n.arm(fl)
	case a == fl.una && fl.nxt > fl.una:
		fl.dupacks++
		if fl.dupacks == tcpDupAcks {
			n.retransmits++
			n.segment(fl, fl.una)
			fl.ssthresh = max(fl.cwnd/2, 2)
			fl.cwnd = fl.ssthresh
		}
	}
	n.sendMore(fl)
}

// flowTimer is a retransmission timeout: go back to the first
// unacknowledged segment with a window of one.
func (n *tcpNet) flowTimer(id int32, gen uint32) {
	fl := n.flows[id]
	if fl == nil || fl.sent || gen != fl.rtoGen {
		return
	}
	n.timeouts++
	fl.tries++
	if fl.tries > tcpMaxTries {
		n.failed++
		fl.sent, fl.received = true, true
		delete(n.flows, id)
		return
	}
	n.retransmits += uint64(fl.nxt - fl.una)
	fl.ssthresh = max(fl.cwnd/2, 2)
	fl.cwnd = 1
	fl.nxt = fl.una
	fl.dupacks = 0
	n.sendMore(fl)
	if fl.nxt > fl.una {
		n.arm(fl)
	}
}

// retire forgets fl once both ends are done with it.
func (n *tcpNet) retire(fl *tcpFlow) {
	if fl.sent && fl.received {
		delete(n.flows, fl.msg)
	}
}

func (n *tcpNet) timer(int32, uint32) {}

package dcsim

import (
	"cmp"
	"slices"
)

// The SRPT oracle: an ideal, centralized scheduler in the manner of the
// pFabric and pHost papers' "ideal" curves. It knows every message the
// moment it starts and, whenever a message starts or finishes, picks in
// order of fewest bytes remaining (earlier start, then lower index, on a
// tie) every message whose sender's link and receiver's link are both
// still free: each host sends one message at a time and receives one at
// a time, at the full host link rate, preempting at any byte. The fabric
// between them has no limit and no queues. A message's wire bytes are
// Homa's packets (one message however long, no parts), and it arrives
// its idle-fabric latency after its last byte left: the same ideal the
// slowdown divides by, so a message that never waits has slowdown 1.
// It models no packets, so it has no queues, drops or grants to report.

type srptMsg struct {
	i        int32
	src, dst int32
	start    int64
	rem      int64 // ns of link time still to send
	after    int64 // ns from the last byte's sending to delivery
	running  bool
}

type srptNet struct {
	f  *fabric
	g  *generator
	pk packetizer
	// active is in SRPT order (before); scratch is for re-sorting it.
	active, scratch []*srptMsg
	// Whether each host's link out and in is taken, for the pass that
	// picks the running messages.
	out, in []bool
	last    int64 // when rem was last brought up to date
	gen     uint32
	// sentNs is the link time of bytes sent inside the measured window.
	sentNs int64
}

func srptPacketizer(cfg *Config) packetizer {
	pk := homaPacketizer(cfg)
	pk.part = 0
	return pk
}

func newSRPTNet(f *fabric, cfg *Config) *srptNet {
	n := &srptNet{f: f, pk: srptPacketizer(cfg), out: make([]bool, cfg.Hosts), in: make([]bool, cfg.Hosts)}
	f.ep = n
	return n
}

func (n *srptNet) bind(g *generator) { n.g = g }

func (n *srptNet) counters(*Result) {}

// linkNs is the time the host link takes to send an n-byte message's
// packets, each rounded up to a nanosecond as the fabric's ports do.
func (n *srptNet) linkNs(size int) int64 {
	mbps := n.f.cfg.HostMbps
	k, last := n.pk.packets(size)
	return int64(k-1)*txNs(int32(n.pk.payload+n.pk.overhead), mbps) + txNs(int32(last), mbps)
}

func (n *srptNet) start(i int32) {
	m := &n.g.msgs[i]
	n.advance()
	tx := n.linkNs(int(m.size))
	sm := &srptMsg{i: i, src: m.src, dst: m.dst, start: n.f.now, rem: tx,
		after: n.f.ideal(n.pk, int(m.size), m.src, m.dst) - tx}
	at, _ := slices.BinarySearchFunc(n.active, sm, compareSRPT)
	n.active = slices.Insert(n.active, at, sm)
	n.schedule()
}

// compareSRPT orders messages by fewest link nanoseconds remaining, then
// earlier start, then index.
func compareSRPT(a, b *srptMsg) int {
	if c := cmp.Compare(a.rem, b.rem); c != 0 {
		return c
	}
	if c := cmp.Compare(a.start, b.start); c != 0 {
		return c
	}
	return cmp.Compare(a.i, b.i)
}

// advance brings the running messages up to now and retires those done:
// each arrives its latency later. It keeps active in order: the running
// messages all lose the same time, so they stay in order among
// themselves and are merged back among the waiting ones.
func (n *srptNet) advance() {
	now := n.f.now
	dt := now - n.last
	n.last = now
	if dt <= 0 {
		return
	}
	in := max(min(now, n.f.end)-max(now-dt, n.f.warm), 0)
	run := n.scratch[:0]
	wait := n.active[:0]
	for _, m := range n.active {
		if !m.running {
			wait = append(wait, m)
			continue
		}
		m.rem -= dt
		n.sentNs += in
		if m.rem > 0 {
			run = append(run, m)
		} else {
			n.f.schedule(now+m.after, evFlow, m.i, 0, nil)
		}
	}
	n.f.dataBytes = uint64(n.sentNs * n.f.cfg.HostMbps / 8000)
	// wait shares active's array: merge from the back into the room
	// the running ones left, and forget the retired ones.
	total := len(wait) + len(run)
	clear(n.active[total:])
	n.active = n.active[:total]
	i, j := len(wait)-1, len(run)-1
	for k := total - 1; j >= 0; k-- {
		if i >= 0 && compareSRPT(n.active[i], run[j]) > 0 {
			n.active[k] = n.active[i]
			i--
		} else {
			n.active[k] = run[j]
			j--
		}
	}
	clear(run)
	n.scratch = run[:0]
}

// schedule picks the running messages, shortest remaining first, and
// sets the timer to the first of them to finish.
func (n *srptNet) schedule() {
	for _, m := range n.active {
		n.out[m.src], n.in[m.dst] = false, false
	}
	next := int64(-1)
	for _, m := range n.active {
		m.running = !n.out[m.src] && !n.in[m.dst]
		if m.running {
			n.out[m.src], n.in[m.dst] = true, true
			if next < 0 || m.rem < next {
				next = m.rem
			}
		}
	}
	n.gen++
	if next >= 0 {
		n.f.schedule(n.f.now+next, evTimer, 0, n.gen, nil)
	}
}

// timer is the first running message's last byte.
func (n *srptNet) timer(_ int32, gen uint32) {
	if gen != n.gen {
		return
	}
	n.advance()
	n.schedule()
}

// flowTimer is message i's arrival.
func (n *srptNet) flowTimer(i int32, _ uint32) {
	if resp, ok := n.g.delivered(i); ok {
		n.start(resp)
	}
}

func (n *srptNet) deliver(h int32, p *Packet) { n.f.freePacket(p) }

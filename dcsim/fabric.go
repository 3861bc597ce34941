package dcsim

import (
	"math/rand/v2"
	"time"
)

// NumPriorities is the number of strict-priority queues of every port.
const NumPriorities = 8

// Packet is one packet in the fabric. Transports fill in the addressing,
// priority, size and their own payload; the fabric sets CE.
type Packet struct {
	Src, Dst int32 // host indices
	Prio     uint8 // 0 (lowest) to 7
	Wire     int32 // bytes on the link, framing included
	Flow     uint64
	// ECT marks a packet as ECN-capable; CE is set on it by a port whose
	// queue is above its ECN threshold.
	ECT, CE bool
	// Data is set on packets that carry message bytes: what reaches
	// hosts of them in the measured window is the achieved load.
	Data bool

	data []byte // a Homa datagram
	seg  tcpSeg // a baseline segment or ACK

	tail int64 // when the packet's last bit reaches the current node
}

// Layer names a layer of egress ports.
type Layer uint8

// The layers, in the order a packet between racks crosses them.
const (
	LayerNIC       Layer = iota // host to ToR
	LayerToRUp                  // ToR to spine
	LayerSpineDown              // spine to ToR
	LayerToRDown                // ToR to host
	numLayers
)

var layerNames = [numLayers]string{"nic", "tor-up", "spine-down", "tor-down"}

func (l Layer) String() string { return layerNames[l] }

// fifo is a queue of packets.
type fifo struct {
	items []*Packet
	head  int
}

func (f *fifo) push(p *Packet) { f.items = append(f.items, p) }

func (f *fifo) pop() *Packet {
	if f.head == len(f.items) {
		return nil
	}
	p := f.items[f.head]
	f.items[f.head] = nil
	f.head++
	if f.head == len(f.items) {
		f.items, f.head = f.items[:0], 0
	} else if f.head > 1024 && f.head*2 > len(f.items) {
		n := copy(f.items, f.items[f.head:])
		clear(f.items[n:])
		f.items, f.head = f.items[:n], 0
	}
	return p
}

// port is a link's sending end: eight queues served in strict priority,
// highest first, FIFO within one.
type port struct {
	q      [NumPriorities]fifo
	queued int   // bytes waiting (not the one being sent)
	limit  int   // queued bound; 0: none
	ecn    int   // marking threshold in bytes
	mbps   int64 // link rate
	busy   bool
	layer  Layer
	toHost bool
	to     int32 // the host, or the switch the link leads to

	// Occupancy: the integral of queued over time, and its peak.
	lastAt int64
	area   float64
	peak   int
}

func (pt *port) account(now int64) {
	pt.area += float64(pt.queued) * float64(now-pt.lastAt)
	pt.lastAt = now
}

func (pt *port) next() *Packet {
	for i := NumPriorities - 1; i >= 0; i-- {
		if p := pt.q[i].pop(); p != nil {
			return p
		}
	}
	return nil
}

// txNs is the time to send n bytes at mbps, rounded up to a nanosecond.
func txNs(n int32, mbps int64) int64 { return (int64(n)*8000 + mbps - 1) / mbps }

// LayerStats describes one layer of ports over a run.
type LayerStats struct {
	Ports   int     `json:"ports"`
	Packets uint64  `json:"packets"`
	Drops   uint64  `json:"drops"`
	Marks   uint64  `json:"ecn_marks"`
	MeanQ   float64 `json:"mean_queue_bytes"` // time average per port
	PeakQ   int     `json:"peak_queue_bytes"` // largest of any port
}

// endpoint is a host's transport, driven by the fabric.
type endpoint interface {
	deliver(h int32, p *Packet)
	timer(h int32, gen uint32)
	flowTimer(id int32, gen uint32)
}

// fabric is the network and the event loop.
type fabric struct {
	cfg    Config
	now    int64
	q      eventQueue
	rng    *rand.Rand
	ports  []port
	ep     endpoint
	onApp  func(h int32) // the workload's arrivals
	layers [numLayers]LayerStats
	events uint64
	// The measured window, and the wire bytes of data packets delivered
	// in it.
	warm, end int64
	dataBytes uint64

	racks, spines, perRack int32
	// Port numbering: NICs [0, H), ToR down [H, 2H), ToR up
	// [2H, 2H+R*S), spine down [2H+R*S, 2H+2R*S).
	torDown, torUp, spineDown int32

	free []*Packet
}

func newFabric(cfg Config, rng *rand.Rand) *fabric {
	h := int32(cfg.Hosts)
	f := &fabric{
		cfg: cfg, rng: rng,
		warm: ns(cfg.Warmup), end: ns(cfg.Duration),
		racks: int32(cfg.Racks), spines: int32(cfg.Spines), perRack: int32(cfg.HostsPerRack),
	}
	if f.racks == 1 {
		f.spines = 0
	}
	f.torDown = h
	f.torUp = 2 * h
	f.spineDown = f.torUp + f.racks*f.spines
	f.ports = make([]port, f.spineDown+f.racks*f.spines)
	ecn := func(mbps int64) int { return int(int64(cfg.ECNBytes) * mbps / 10_000) }
	for i := range h {
		f.ports[i] = port{mbps: cfg.HostMbps, layer: LayerNIC, to: f.rack(i)}
		f.ports[f.torDown+i] = port{mbps: cfg.HostMbps, layer: LayerToRDown, toHost: true, to: i,
			limit: cfg.BufferBytes, ecn: ecn(cfg.HostMbps)}
	}
	for r := range f.racks {
		for s := range f.spines {
			f.ports[f.torUp+r*f.spines+s] = port{mbps: cfg.FabricMbps, layer: LayerToRUp, to: f.racks + s,
				limit: cfg.BufferBytes, ecn: ecn(cfg.FabricMbps)}
			f.ports[f.spineDown+s*f.racks+r] = port{mbps: cfg.FabricMbps, layer: LayerSpineDown, to: r,
				limit: cfg.BufferBytes, ecn: ecn(cfg.FabricMbps)}
		}
	}
	for i := range f.ports {
		f.layers[f.ports[i].layer].Ports++
	}
	return f
}

// rack is host h's rack, which is also its ToR's switch number.
func (f *fabric) rack(h int32) int32 { return h / f.perRack }

func (f *fabric) schedule(at int64, kind evKind, idx int32, gen uint32, p *Packet) {
	f.q.push(event{at: at, kind: kind, idx: idx, gen: gen, pkt: p})
}

// newPacket returns a cleared packet from the free list.
func (f *fabric) newPacket() *Packet {
	if n := len(f.free); n > 0 {
		p := f.free[n-1]
		f.free = f.free[:n-1]
		return p
	}
	return new(Packet)
}

// freePacket puts p back on the free list; the caller is done with it.
func (f *fabric) freePacket(p *Packet) {
	*p = Packet{}
	f.free = append(f.free, p)
}

// send hands p from its source host to the host software below the
// transport: it reaches the NIC after TxDelay.
func (f *fabric) send(p *Packet) {
	if d := int64(f.cfg.TxDelay); d > 0 {
		f.schedule(f.now+d, evTx, p.Src, 0, p)
		return
	}
	p.tail = f.now
	f.enqueue(p.Src, p)
}

// enqueue puts p in port pi's queue of its priority, or drops it.
func (f *fabric) enqueue(pi int32, p *Packet) {
	pt := &f.ports[pi]
	ls := &f.layers[pt.layer]
	if pt.limit > 0 && pt.queued+int(p.Wire) > pt.limit && pt.busy {
		ls.Drops++
		f.freePacket(p)
		return
	}
	ls.Packets++
	pt.account(f.now)
	pt.queued += int(p.Wire)
	pt.peak = max(pt.peak, pt.queued)
	if p.ECT && pt.ecn > 0 && pt.queued > pt.ecn {
		p.CE = true
		ls.Marks++
	}
	pt.q[p.Prio&(NumPriorities-1)].push(p)
	if !pt.busy {
		f.startPort(pi)
	}
}

// startPort sends port pi's next packet, if any.
func (f *fabric) startPort(pi int32) {
	pt := &f.ports[pi]
	p := pt.next()
	if p == nil {
		pt.busy = false
		return
	}
	pt.busy = true
	pt.account(f.now)
	pt.queued -= int(p.Wire)
	finish := max(f.now+txNs(p.Wire, pt.mbps), p.tail)
	f.schedule(finish, evPortDone, pi, 0, nil)
	prop := int64(f.cfg.LinkDelay)
	p.tail = finish + prop
	if pt.toHost {
		f.schedule(p.tail+int64(f.cfg.RxDelay), evDeliver, pt.to, 0, p)
		return
	}
	head := f.now + prop
	if f.cfg.StoreAndForward || f.nextMbps(pt, p) > pt.mbps {
		head = p.tail
	}
	f.schedule(head+int64(f.cfg.SwitchDelay), evArrive, pt.to, 0, p)
}

// nextMbps is the rate of the port p leaves the next switch by. A switch
// cannot cut a packet through to a faster link (it would run out of
// bits to send), so it stores and forwards such packets.
func (f *fabric) nextMbps(pt *port, p *Packet) int64 {
	switch pt.layer {
	case LayerNIC:
		if f.rack(p.Dst) != f.rack(p.Src) {
			return f.cfg.FabricMbps
		}
		return f.cfg.HostMbps
	case LayerToRUp:
		return f.cfg.FabricMbps
	default:
		return f.cfg.HostMbps
	}
}

// route returns the egress port of switch sw for p.
func (f *fabric) route(sw int32, p *Packet) int32 {
	dr := f.rack(p.Dst)
	if sw < f.racks { // a ToR
		if dr == sw {
			return f.torDown + p.Dst
		}
		var s int32
		if f.cfg.ECMP {
			s = int32(mix(p.Flow) % uint64(f.spines))
		} else {
			s = f.rng.Int32N(f.spines)
		}
		return f.torUp + sw*f.spines + s
	}
	return f.spineDown + (sw-f.racks)*f.racks + dr
}

// mix is a 64-bit finalizer (splitmix64's) for flow hashes.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// run processes events up to time until (ns) or until stop reports true
// (checked every 1024 events); it returns whether stop did.
func (f *fabric) run(until int64, stop func() bool) bool {
	for f.q.len() > 0 && f.q.peek().at <= until {
		ev := f.q.pop()
		f.now = ev.at
		f.events++
		switch ev.kind {
		case evPortDone:
			f.startPort(ev.idx)
		case evArrive:
			f.enqueue(f.route(ev.idx, ev.pkt), ev.pkt)
		case evDeliver:
			if ev.pkt.Data && f.now >= f.warm && f.now < f.end {
				f.dataBytes += uint64(ev.pkt.Wire)
			}
			f.ep.deliver(ev.idx, ev.pkt)
		case evTx:
			ev.pkt.tail = f.now
			f.enqueue(ev.idx, ev.pkt)
		case evTimer:
			f.ep.timer(ev.idx, ev.gen)
		case evApp:
			f.onApp(ev.idx)
		case evFlow:
			f.ep.flowTimer(ev.idx, ev.gen)
		}
		if stop != nil && f.events&1023 == 0 && stop() {
			return true
		}
	}
	f.now = max(f.now, until)
	return false
}

// layerStats returns the per-layer statistics as of now.
func (f *fabric) layerStats() [numLayers]LayerStats {
	out := f.layers
	for i := range f.ports {
		pt := &f.ports[i]
		pt.account(f.now)
		ls := &out[pt.layer]
		ls.MeanQ += pt.area
		ls.PeakQ = max(ls.PeakQ, pt.peak)
	}
	for l := range out {
		if out[l].Ports > 0 && f.now > 0 {
			out[l].MeanQ /= float64(out[l].Ports) * float64(f.now)
		}
	}
	return out
}

// ns converts a duration to the fabric's nanoseconds.
func ns(d time.Duration) int64 { return int64(d) }

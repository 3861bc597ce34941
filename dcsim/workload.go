package dcsim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/homa-go/homa/internal/tools/workload"
)

// msg is one workload message: a request, or the response to one.
type msg struct {
	src, dst int32
	size     int32
	flags    uint8
	start    int64 // when the transport got it (ns); -1: not yet
	done     int64 // when the receiver's transport delivered it; 0: not yet
	// A message carried in several parts (see packetizer.part): the
	// parts not yet started, and those not yet arrived.
	unsent, missing int32
}

const (
	msgResponse uint8 = 1 << iota // the second of its RPC's pair
	msgIncast                     // part of an incast burst
	msgMeasured                   // started inside the measured window
)

// starter is a transport: it starts message i (at the fabric's now).
type starter interface{ start(i int32) }

// generator makes the workload: each host starts RPCs at Poisson times,
// to uniformly random other hosts, with request and response sizes drawn
// independently from the distribution. Both messages of an RPC count as
// workload messages, so every host sends (and receives) rate*2 messages
// a second on average, at random times to random peers: the paper's
// one-way Poisson traffic, carried by RPCs.
type generator struct {
	f     *fabric
	rng   *rand.Rand
	dist  *sizes
	rate  float64 // RPCs per second per host
	msgs  []msg
	proto starter
	end   int64 // no arrivals from here
	warm  int64
	cfg   *Config
	// pending counts the measured messages not yet delivered.
	pending int
}

// loadDist returns the named distribution: w1..w5 (with the messages
// above the core's maximum) or fixed:N.
func loadDist(name string) (*sizes, error) {
	if s, ok := strings.CutPrefix(strings.ToLower(name), "fixed:"); ok {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > workload.MaxMessage {
			return nil, fmt.Errorf("%w: workload %q", ErrConfig, name)
		}
		return newSizes(workload.Fixed(n))
	}
	d, err := workload.Named(name)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	return newSizes(d)
}

// meanWire is the mean wire size of a message of d, by integrating the
// quantile function (deterministic, and exact up to 1e-5 of the mass).
func meanWire(d *sizes, pk packetizer) float64 {
	const n = 100_000
	sum := 0.0
	for i := range n {
		sum += float64(pk.wire(d.quantile((float64(i) + 0.5) / n)))
	}
	return sum / n
}

func newGenerator(f *fabric, cfg *Config, d *sizes, pk packetizer, seed uint64) *generator {
	g := &generator{
		f: f, cfg: cfg, dist: d,
		rng:  rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d)),
		end:  ns(cfg.Duration),
		warm: ns(cfg.Warmup),
	}
	// Each RPC puts two messages on host links; load is a fraction of a
	// host's link in wire bytes.
	bytesPerSec := cfg.Load * float64(cfg.HostMbps) * 1e6 / 8
	g.rate = bytesPerSec / (2 * meanWire(d, pk))
	f.onApp = g.arrival
	for h := range int32(cfg.Hosts) {
		g.next(h)
	}
	if cfg.Incast > 0 {
		g.nextIncast()
	}
	return g
}

func (g *generator) next(h int32) {
	gap := workload.NextGap(g.rng, g.rate)
	if at := g.f.now + int64(gap); gap < math.MaxInt64/2 && at < g.end {
		g.f.schedule(at, evApp, h, 0, nil)
	}
}

func (g *generator) nextIncast() {
	if at := g.f.now + int64(workload.NextGap(g.rng, g.cfg.IncastRate)); at < g.end {
		g.f.schedule(at, evApp, -1, 0, nil)
	}
}

// arrival starts an RPC from host h (-1: an incast burst).
func (g *generator) arrival(h int32) {
	if h < 0 {
		g.incast()
		g.nextIncast()
		return
	}
	hosts := int32(g.cfg.Hosts)
	dst := g.rng.Int32N(hosts - 1)
	if dst >= h {
		dst++
	}
	g.rpc(h, dst, int32(g.dist.sample(g.rng)), int32(g.dist.sample(g.rng)), 0)
	g.next(h)
}

// incast has Incast random hosts send a request to one at once.
func (g *generator) incast() {
	hosts := int32(g.cfg.Hosts)
	dst := g.rng.Int32N(hosts)
	n := min(g.cfg.Incast, g.cfg.Hosts-1)
	picked := make(map[int32]bool, n)
	for len(picked) < n {
		s := g.rng.Int32N(hosts)
		if s != dst && !picked[s] {
			picked[s] = true
			g.rpc(s, dst, int32(g.cfg.IncastSize), 1, msgIncast)
		}
	}
}

// rpc records a request and its response and starts the request.
func (g *generator) rpc(src, dst, req, resp int32, flags uint8) {
	if g.f.now >= g.warm {
		flags |= msgMeasured
	}
	if flags&msgMeasured != 0 {
		g.pending += 2
	}
	i := int32(len(g.msgs))
	g.msgs = append(g.msgs,
		msg{src: src, dst: dst, size: req, flags: flags, start: g.f.now},
		msg{src: dst, dst: src, size: resp, flags: flags | msgResponse, start: -1})
	g.proto.start(i)
}

// delivered records that message i arrived whole; for a request it
// returns the index of the response to start.
func (g *generator) delivered(i int32) (resp int32, ok bool) {
	m := &g.msgs[i]
	if m.done != 0 {
		return 0, false
	}
	m.done = max(g.f.now, 1)
	if m.flags&msgMeasured != 0 {
		g.pending--
	}
	if m.flags&msgResponse != 0 {
		return 0, false
	}
	g.msgs[i+1].start = g.f.now
	return i + 1, true
}

// packetizer describes how a transport cuts messages into packets.
type packetizer struct {
	payload  int // bytes of message per full packet
	overhead int // bytes of headers and framing per packet
	// part, when positive, is the largest message the transport carries:
	// a longer one goes as ceil(n/part) messages of part bytes (the last
	// shorter), each cut into packets on its own.
	part int
}

// parts returns how many messages carry n bytes, and the size of the
// last.
func (pk packetizer) parts(n int) (k, last int) {
	if pk.part <= 0 || n <= pk.part {
		return 1, n
	}
	k = (n + pk.part - 1) / pk.part
	return k, n - (k-1)*pk.part
}

// packets returns how many packets carry a message of n bytes (at most
// one part), and the wire size of the last.
func (pk packetizer) packets(n int) (k, last int) {
	k = max((n+pk.payload-1)/pk.payload, 1)
	return k, n - (k-1)*pk.payload + pk.overhead
}

// wire is the bytes on the wire of an n-byte message, all its parts.
func (pk packetizer) wire(n int) int {
	k, last := pk.parts(n)
	w := 0
	if k > 1 {
		w = (k - 1) * pk.wire(pk.part)
	}
	p, lp := pk.packets(last)
	return w + (p-1)*(pk.payload+pk.overhead) + lp
}

// ideal is the time an n-byte message takes from host src to dst on the
// idle fabric, every packet (of every part) sent back to back at the
// line rate: the source's software, its NIC sending all packets, the
// last packet's crossing of the switches, and the receiver's software.
func (f *fabric) ideal(pk packetizer, n int, src, dst int32) int64 {
	host := f.cfg.HostMbps
	full := int32(pk.payload + pk.overhead)
	kp, lastPart := pk.parts(n)
	start := ns(f.cfg.TxDelay)
	if kp > 1 {
		k, last := pk.packets(pk.part)
		start += int64(kp-1) * (int64(k-1)*txNs(full, host) + txNs(int32(last), host))
	}
	k, last := pk.packets(lastPart)
	start += int64(k-1) * txNs(full, host)
	w := int32(last)
	finish := start + txNs(w, host)
	prop := ns(f.cfg.LinkDelay)
	tail := finish + prop
	in := host
	hop := func(mbps int64) {
		head := start + prop
		if f.cfg.StoreAndForward || mbps > in {
			head = tail
		}
		start = head + ns(f.cfg.SwitchDelay)
		finish = max(start+txNs(w, mbps), tail)
		tail = finish + prop
		in = mbps
	}
	if f.rack(src) != f.rack(dst) {
		hop(f.cfg.FabricMbps)
		hop(f.cfg.FabricMbps)
	}
	hop(host)
	return tail + ns(f.cfg.RxDelay)
}

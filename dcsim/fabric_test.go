package dcsim

import (
	"math/rand/v2"
	"testing"
	"time"
)

// recorder is an endpoint that keeps what reaches each host.
type recorder struct {
	f   *fabric
	got []delivery
}

type delivery struct {
	at   int64
	src  int32
	dst  int32
	prio uint8
}

func (r *recorder) deliver(h int32, p *Packet) {
	r.got = append(r.got, delivery{at: r.f.now, src: p.Src, dst: h, prio: p.Prio})
	r.f.freePacket(p)
}
func (r *recorder) timer(int32, uint32)     {}
func (r *recorder) flowTimer(int32, uint32) {}

// testFabric builds a fabric of racks x perRack hosts and 2 spines, with
// no host delays.
func testFabric(t *testing.T, racks, perRack int, mod func(*Config)) (*fabric, *recorder) {
	t.Helper()
	cfg := Config{Racks: racks, HostsPerRack: perRack, Spines: 2, TxDelay: -1, RxDelay: -1}
	if mod != nil {
		mod(&cfg)
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	f := newFabric(cfg, rand.New(rand.NewPCG(1, 2)))
	r := &recorder{f: f}
	f.ep = r
	return f, r
}

// sendAt queues a full-size packet from src to dst at time at.
func sendAt(f *fabric, at int64, src, dst int32, prio uint8) {
	p := f.newPacket()
	p.Src, p.Dst, p.Prio, p.Wire = src, dst, prio, 1538
	f.schedule(at, evTx, src, 0, p)
}

const full10G = 1231 // ns for 1538 bytes at 10 Gbit/s, rounded up
const full40G = 308  // at 40 Gbit/s

func TestOneFlowLineRate(t *testing.T) {
	for _, saf := range []bool{false, true} {
		f, r := testFabric(t, 2, 2, func(c *Config) { c.StoreAndForward = saf })
		const n = 20
		for range n {
			sendAt(f, 0, 0, 3, 0) // rack 0 to rack 1: NIC, ToR up, spine, ToR down
		}
		f.run(int64(time.Second), nil)
		if len(r.got) != n {
			t.Fatalf("store-and-forward %v: %d packets arrived, want %d", saf, len(r.got), n)
		}
		// Cut-through: the ToR stores the packet before its faster
		// uplink, then the head crosses the spine and the ToR (250 ns
		// each) while the ToR's uplink sends; the last link (10G) ends a
		// full packet time after the head reached it. Store-and-forward:
		// every link sends the whole packet after the switch delay.
		first := int64(3*250 + 2*full10G)
		if saf {
			first = full10G + 3*250 + 2*full40G + full10G
		}
		for i, d := range r.got {
			if want := first + int64(i)*full10G; d.at != want {
				t.Errorf("store-and-forward %v: packet %d arrived at %d ns, want %d", saf, i, d.at, want)
			}
		}
	}
}

func TestPriorityAtPort(t *testing.T) {
	f, r := testFabric(t, 1, 3, nil)
	for range 3 {
		sendAt(f, 0, 0, 2, 1)
	}
	sendAt(f, 100, 1, 2, 6)
	f.run(int64(time.Second), nil)
	// The first low packet is on the wire when the high one arrives
	// (350 ns); the high one goes next, ahead of the two queued behind.
	want := []delivery{
		{at: 250 + full10G, src: 0, prio: 1},
		{at: 250 + 2*full10G, src: 1, prio: 6},
		{at: 250 + 3*full10G, src: 0, prio: 1},
		{at: 250 + 4*full10G, src: 0, prio: 1},
	}
	if len(r.got) != len(want) {
		t.Fatalf("%d deliveries, want %d: %+v", len(r.got), len(want), r.got)
	}
	for i, w := range want {
		if g := r.got[i]; g.at != w.at || g.src != w.src || g.prio != w.prio {
			t.Errorf("delivery %d: %+v, want %+v", i, g, w)
		}
	}
}

func TestBufferOverflow(t *testing.T) {
	f, r := testFabric(t, 1, 5, func(c *Config) { c.BufferBytes = 3000 })
	for src := int32(1); src <= 4; src++ {
		sendAt(f, 0, src, 0, 0)
	}
	f.run(int64(time.Second), nil)
	// The first to arrive goes out at once, the second waits (1538
	// bytes), the third and fourth would take the queue past 3000.
	ls := f.layerStats()
	if len(r.got) != 2 || ls[LayerToRDown].Drops != 2 {
		t.Fatalf("%d delivered, %d dropped at the ToR; want 2 and 2", len(r.got), ls[LayerToRDown].Drops)
	}
	if ls[LayerToRDown].PeakQ != 1538 {
		t.Errorf("peak queue %d bytes, want 1538", ls[LayerToRDown].PeakQ)
	}
	if r.got[1].at != 250+2*full10G {
		t.Errorf("second packet at %d ns, want %d", r.got[1].at, 250+2*full10G)
	}
}

func TestIncast(t *testing.T) {
	f, r := testFabric(t, 3, 4, nil)
	const per = 5
	senders := []int32{1, 2, 5, 6, 9, 10, 11} // same rack and other racks
	for _, s := range senders {
		for range per {
			sendAt(f, 0, s, 0, 0)
		}
	}
	f.run(int64(time.Second), nil)
	n := len(senders) * per
	if len(r.got) != n {
		t.Fatalf("%d delivered, want %d", len(r.got), n)
	}
	// The receiver's link is the bottleneck: once the first packet
	// (from its own rack, 250 ns) starts, it never idles.
	for i, d := range r.got {
		if want := int64(250 + (i+1)*full10G); d.at != want {
			t.Fatalf("packet %d at %d ns, want %d", i, d.at, want)
		}
	}
	ls := f.layerStats()
	if ls[LayerToRDown].Drops != 0 || ls[LayerToRDown].PeakQ < 20*1538 {
		t.Errorf("ToR down: %d drops, peak %d bytes; want 0 and a standing queue", ls[LayerToRDown].Drops, ls[LayerToRDown].PeakQ)
	}
}

func TestECNMarks(t *testing.T) {
	f, r := testFabric(t, 1, 5, func(c *Config) { c.ECNBytes = 3000 })
	for src := int32(1); src <= 4; src++ {
		p := f.newPacket()
		p.Src, p.Dst, p.Wire, p.ECT = src, 0, 1538, true
		f.schedule(0, evTx, src, 0, p)
	}
	f.run(int64(time.Second), nil)
	// The first goes out at once, the second finds 1538 bytes queued
	// (itself), the third and fourth more than 3000.
	if ls := f.layerStats(); len(r.got) != 4 || ls[LayerToRDown].Marks != 2 {
		t.Errorf("%d delivered, %d marked; want 4 and 2", len(r.got), ls[LayerToRDown].Marks)
	}
}

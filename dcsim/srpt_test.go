package dcsim

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// harness is a fabric of 12 hosts (3 racks of 4) running proto, with no
// workload arrivals: the test starts RPCs itself with g.rpc.
func harness(t *testing.T, proto string) (*fabric, *generator) {
	t.Helper()
	cfg, err := Config{Racks: 3, HostsPerRack: 4, Spines: 2, Workload: "fixed:1", Duration: time.Second}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	d, err := loadDist(cfg.Workload)
	if err != nil {
		t.Fatal(err)
	}
	f := newFabric(cfg, rand.New(rand.NewPCG(1, 2)))
	g := &generator{f: f, cfg: &f.cfg, dist: d, rng: rand.New(rand.NewPCG(3, 4))}
	var tr transport
	switch proto {
	case "srpt":
		tr = newSRPTNet(f, &f.cfg)
	case "homa":
		tr = newHomaNet(f, &f.cfg)
	default:
		tr = newTCPNet(f, &f.cfg)
	}
	g.proto = tr
	tr.bind(g)
	return f, g
}

// took is how long request i took.
func took(t *testing.T, g *generator, i int) int64 {
	t.Helper()
	m := g.msgs[i]
	if m.done == 0 {
		t.Fatalf("message %d (%d bytes %d->%d) not delivered", i, m.size, m.src, m.dst)
	}
	return m.done - m.start
}

// The oracle's hand-computed cases, with h = the host link time of a
// message's packets and I = its idle-fabric time (Config defaults:
// 10 Gbit/s hosts).
func TestSRPTOracle(t *testing.T) {
	const short, long = 1_000, 100_000
	t.Run("alone", func(t *testing.T) {
		f, g := harness(t, "srpt")
		g.rpc(0, 5, long, 1, 0)
		f.run(int64(time.Second), nil)
		if got, want := took(t, g, 0), f.ideal(srptPacketizer(&f.cfg), long, 0, 5); got != want {
			t.Errorf("alone: %d ns, want the idle time %d", got, want)
		}
	})
	for _, c := range []struct {
		name    string
		headway int64 // ns between the long request's start and the short one's
	}{
		// Two requests to host 8 at once: the short one goes first, at
		// line rate; the long one waits for its link time.
		{"one receiver", 0},
		// A long request is under way when a short one for the same
		// receiver starts: the short one preempts it.
		{"preemption", 20_000},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, g := harness(t, "srpt")
			n := f.ep.(*srptNet)
			g.rpc(0, 8, long, 1, 0)
			if c.headway > 0 {
				f.run(c.headway, nil)
			}
			g.rpc(1, 8, short, 1, 0)
			f.run(int64(time.Second), nil)
			pk := srptPacketizer(&f.cfg)
			if got, want := took(t, g, 2), f.ideal(pk, short, 1, 8); got != want {
				t.Errorf("short: %d ns, want %d", got, want)
			}
			if got, want := took(t, g, 0), f.ideal(pk, long, 0, 8)+n.linkNs(short); got != want {
				t.Errorf("long: %d ns, want I(long)+h(short) = %d", got, want)
			}
		})
	}
	t.Run("one sender", func(t *testing.T) {
		// Host 0 sends to two hosts: its link carries one at a time.
		f, g := harness(t, "srpt")
		n := f.ep.(*srptNet)
		g.rpc(0, 8, long, 1, 0)
		g.rpc(0, 9, short, 1, 0)
		f.run(int64(time.Second), nil)
		pk := srptPacketizer(&f.cfg)
		if got, want := took(t, g, 0), f.ideal(pk, long, 0, 8)+n.linkNs(short); got != want {
			t.Errorf("long: %d ns, want I(long)+h(short) = %d", got, want)
		}
	})
	t.Run("disjoint", func(t *testing.T) {
		// Pairs that share no link do not wait for each other, however
		// they are ordered.
		f, g := harness(t, "srpt")
		g.rpc(0, 8, long, 1, 0)
		g.rpc(1, 9, long/2, 1, 0)
		g.rpc(2, 3, short, 1, 0)
		f.run(int64(time.Second), nil)
		pk := srptPacketizer(&f.cfg)
		for i, c := range []struct {
			size     int
			src, dst int32
		}{{long, 0, 8}, {long / 2, 1, 9}, {short, 2, 3}} {
			if got, want := took(t, g, 2*i), f.ideal(pk, c.size, c.src, c.dst); got != want {
				t.Errorf("message %d: %d ns, want %d", 2*i, got, want)
			}
		}
	})
	t.Run("greedy", func(t *testing.T) {
		// 0->8 (short) and 1->8 (long) contend for host 8's link; 1->9
		// (middle) shares host 1's link with the long one. SRPT order:
		// short, middle, long. Short and middle run at once; the long
		// one starts when both links are free, after the middle one.
		f, g := harness(t, "srpt")
		n := f.ep.(*srptNet)
		const middle = 10_000
		g.rpc(1, 8, long, 1, 0)
		g.rpc(0, 8, short, 1, 0)
		g.rpc(1, 9, middle, 1, 0)
		f.run(int64(time.Second), nil)
		pk := srptPacketizer(&f.cfg)
		if got, want := took(t, g, 0), f.ideal(pk, long, 1, 8)+n.linkNs(middle); got != want {
			t.Errorf("long: %d ns, want I(long)+h(middle) = %d", got, want)
		}
	})
}

// TestSRPTEndToEnd: on a workload the oracle delivers everything, and
// no message beats the idle fabric.
func TestSRPTEndToEnd(t *testing.T) {
	r, err := Run(small("w3", 0.8), "srpt")
	if err != nil {
		t.Fatal(err)
	}
	if r.Messages < 50 || r.Incomplete != 0 || r.MinSlowdown < 1 || r.P99 < r.P50 {
		t.Errorf("%d messages, %d incomplete, slowdown min %.3f p50 %.3f p99 %.3f", r.Messages, r.Incomplete, r.MinSlowdown, r.P50, r.P99)
	}
	if r.AchievedLoad < 0.5*r.OfferedLoad {
		t.Errorf("achieved %.3f of offered %.3f", r.AchievedLoad, r.OfferedLoad)
	}
}

// TestLongMessages: messages above the core's maximum go as parts, and
// each protocol delivers a 2.5 MB request whole, in about its idle time
// when alone.
func TestLongMessages(t *testing.T) {
	const size = 2_500_000
	for _, proto := range []string{"homa", "dctcp", "srpt"} {
		f, g := harness(t, proto)
		g.rpc(0, 5, size, size, 0)
		f.run(int64(time.Second), nil)
		var pk packetizer
		switch proto {
		case "homa":
			pk = homaPacketizer(&f.cfg)
		case "dctcp":
			pk = tcpPacketizer(&f.cfg)
		default:
			pk = srptPacketizer(&f.cfg)
		}
		for i := range 2 {
			ideal := f.ideal(pk, size, g.msgs[i].src, g.msgs[i].dst)
			if got := took(t, g, i); got < ideal || float64(got) > 1.1*float64(ideal) {
				t.Errorf("%s: message %d took %d ns, want within 10%% above its idle time %d", proto, i, got, ideal)
			}
		}
	}
}

func TestParts(t *testing.T) {
	pk := packetizer{payload: 1000, overhead: 100, part: 2500}
	for _, c := range []struct{ n, k, last, wire int }{
		{1, 1, 1, 101},
		{2500, 1, 2500, 2500 + 3*100},
		{2501, 2, 1, 2800 + 101},
		{6000, 3, 1000, 2*2800 + 1100},
	} {
		k, last := pk.parts(c.n)
		if k != c.k || last != c.last || pk.wire(c.n) != c.wire {
			t.Errorf("%d bytes: %d parts, last %d, wire %d; want %d, %d, %d", c.n, k, last, pk.wire(c.n), c.k, c.last, c.wire)
		}
	}
}

// TestTails: W4 and W5 keep their messages above 1 MB, with the
// distributions' published means (W5 about 2.6 MB before truncation).
func TestTails(t *testing.T) {
	for _, c := range []struct {
		name     string
		mean     float64
		max      int
		overFrac float64
	}{{"w4", 0, 10_000_000, 0.028}, {"w5", 2.6e6, 29_400_000, 0.30}} {
		s, err := loadDist(c.name)
		if err != nil {
			t.Fatal(err)
		}
		if c.mean > 0 && (s.mean < 0.9*c.mean || s.mean > 1.1*c.mean) {
			t.Errorf("%s: mean %.0f, want about %.0f", c.name, s.mean, c.mean)
		}
		if got := s.quantile(1); got < c.max*9/10 || got > c.max {
			t.Errorf("%s: largest %d, want about %d", c.name, got, c.max)
		}
		if over := 1 - s.below; over < 0.9*c.overFrac || over > 1.1*c.overFrac {
			t.Errorf("%s: %.4f of messages above 1 MB, want about %.3f", c.name, over, c.overFrac)
		}
		rng := rand.New(rand.NewPCG(5, 6))
		long := 0
		for range 10_000 {
			if s.sample(rng) > 1_000_000 {
				long++
			}
		}
		if f := float64(long) / 10_000; f < 0.8*c.overFrac || f > 1.2*c.overFrac {
			t.Errorf("%s: sampled %.4f above 1 MB, want about %.3f", c.name, f, c.overFrac)
		}
	}
}

// TestSRPTOrder: the oracle keeps its messages in SRPT order as they
// start, run, wait and finish at random.
func TestSRPTOrder(t *testing.T) {
	f, g := harness(t, "srpt")
	n := f.ep.(*srptNet)
	rng := rand.New(rand.NewPCG(9, 10))
	for step := range 2000 {
		src := rng.Int32N(12)
		dst := (src + 1 + rng.Int32N(11)) % 12
		g.rpc(src, dst, int32(1+rng.IntN(50_000)), int32(1+rng.IntN(5_000)), 0)
		f.run(f.now+int64(rng.IntN(3_000)), nil)
		if !slices.IsSortedFunc(n.active, compareSRPT) {
			t.Fatalf("step %d: active out of order", step)
		}
	}
	f.run(int64(time.Second), nil)
	if len(n.active) != 0 {
		t.Fatalf("%d messages left", len(n.active))
	}
	for i := range g.msgs {
		if g.msgs[i].done == 0 {
			t.Fatalf("message %d not delivered", i)
		}
	}
}

package dcsim

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"time"
)

// Protocols lists the transports Run knows: the real Homa core, the
// DCTCP-style baseline, and the ideal SRPT oracle.
var Protocols = []string{"homa", "dctcp", "srpt"}

// transport is what Run needs of a protocol.
type transport interface {
	endpoint
	starter
	counters(r *Result)
	bind(g *generator)
}

// Run simulates proto ("homa", "dctcp" or "srpt") on the fabric and
// workload of cfg and returns what it measured.
func Run(cfg Config, proto string) (*Result, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	d, err := loadDist(cfg.Workload)
	if err != nil {
		return nil, err
	}
	wall := time.Now()
	f := newFabric(cfg, rand.New(rand.NewPCG(cfg.Seed^0x2545f4914f6cdd1d, cfg.Seed)))
	var t transport
	var pk packetizer
	switch strings.ToLower(proto) {
	case "homa":
		pk = homaPacketizer(&cfg)
		t = newHomaNet(f, &cfg)
	case "dctcp", "tcp":
		pk = tcpPacketizer(&cfg)
		t = newTCPNet(f, &cfg)
	case "srpt":
		pk = srptPacketizer(&cfg)
		t = newSRPTNet(f, &cfg)
	default:
		return nil, fmt.Errorf("%w: protocol %q (want one of %s)", ErrConfig, proto, strings.Join(Protocols, ", "))
	}
	// Every protocol gets the same messages: the rate comes from Homa's
	// packets.
	g := newGenerator(f, &cfg, d, homaPacketizer(&cfg), cfg.Seed)
	g.proto = t
	t.bind(g)

	end := ns(cfg.Duration)
	limit := end + ns(cfg.Drain)
	step := ns(cfg.ProgressEvery)
	done := func() bool { return f.now >= end && g.pending == 0 }
	for at := step; ; at += step {
		stopped := f.run(min(at, limit), done)
		if cfg.Progress != nil {
			cfg.Progress(time.Duration(f.now), time.Duration(limit))
		}
		if stopped || done() || at >= limit || f.q.len() == 0 && f.now >= end {
			break
		}
	}

	r := &Result{Proto: strings.ToLower(proto), Workload: d.name(), Load: cfg.Load, Hosts: cfg.Hosts}
	r.Label = r.Proto
	if r.Proto == "homa" {
		if cfg.Overcommit > 0 {
			r.Label += fmt.Sprintf(" overcommit %d", cfg.Overcommit)
		}
		if cfg.SchedLevels > 0 {
			r.Label += fmt.Sprintf(" sched-levels %d", cfg.SchedLevels)
		}
		if cfg.UnschedBytes > 0 {
			r.Label += fmt.Sprintf(" unsched %d", cfg.UnschedBytes)
		}
		if cfg.Shards > 1 {
			r.Label += fmt.Sprintf(" shards %d", cfg.Shards)
			if cfg.ShardsShareNothing {
				r.Label += " sharing nothing"
			}
		}
	}
	summarize(r, g, pk)
	ls := f.layerStats()
	r.Layers = make(map[string]LayerStats, numLayers)
	for l := range numLayers {
		r.Layers[l.String()] = ls[l]
		r.Drops += ls[l].Drops
	}
	t.counters(r)
	r.SimSeconds = float64(f.now) / 1e9
	r.WallSeconds = time.Since(wall).Seconds()
	r.Events = f.events
	if r.WallSeconds > 0 {
		r.EventsPerSec = float64(f.events) / r.WallSeconds
		r.SimPerWall = r.SimSeconds / r.WallSeconds
	}
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	r.HeapPerHost = float64(ms.HeapAlloc) / float64(cfg.Hosts)
	runtime.KeepAlive(t)
	runtime.KeepAlive(g)
	return r, nil
}

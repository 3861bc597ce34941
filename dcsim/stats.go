package dcsim

import (
	"cmp"
	"math"
	"slices"

	"github.com/homa-go/homa/internal/tools/workload"
)

// Result is what one run of one protocol measured.
type Result struct {
	Proto string `json:"proto"`
	// Label names the run in plots and tables (default: the protocol,
	// with the Homa parameters that differ from the engine's defaults).
	Label    string  `json:"label"`
	Workload string  `json:"workload"`
	Load     float64 `json:"load"` // offered, as configured
	Hosts    int     `json:"hosts"`
	// OfferedLoad is the wire bytes of the messages started in the
	// measured window, AchievedLoad those of the data packets delivered
	// to hosts in it (retransmissions included), as fractions of the
	// hosts' link capacity over the window.
	OfferedLoad  float64 `json:"offered_load"`
	AchievedLoad float64 `json:"achieved_load"`
	// LeftOver is (offered - achieved) bytes at the window's end per
	// host, in seconds of its link: about constant across durations when
	// the load is carried, growing with the duration when it is not.
	LeftOver float64 `json:"left_over_seconds_per_host"`
	// Messages counts the measured messages (started after the warmup,
	// requests and responses, incast apart); Incomplete those not
	// delivered by the end of the drain.
	Messages   int `json:"messages"`
	Incomplete int `json:"incomplete"`
	// Slowdowns of the shortest 20% of the measured messages and of all.
	ShortP50 float64 `json:"short_p50_slowdown"`
	ShortP99 float64 `json:"short_p99_slowdown"`
	P50      float64 `json:"p50_slowdown"`
	P99      float64 `json:"p99_slowdown"`
	// MinSlowdown is the smallest: below 1 would mean a message beat
	// the idle fabric, a bug in the model.
	MinSlowdown float64 `json:"min_slowdown"`
	// Buckets are the slowdowns by message size (bounds at the
	// distribution's deciles).
	Buckets []Bucket `json:"buckets"`
	// Incast summarizes the incast bursts' requests, if any.
	Incast *Bucket `json:"incast,omitempty"`
	// Layers describes each layer of switch (and NIC) ports.
	Layers map[string]LayerStats `json:"layers"`
	Drops  uint64                `json:"drops"`
	// Transport counters: Homa's grants, RESENDs and retransmitted
	// packets (the baseline's retransmissions and timeouts), and failed
	// RPCs.
	Grants      uint64 `json:"grants"`
	Resends     uint64 `json:"resends"`
	Retransmits uint64 `json:"retransmits"`
	Timeouts    uint64 `json:"timeouts,omitempty"`
	Failed      uint64 `json:"failed"`
	// Cost of the run.
	SimSeconds   float64 `json:"sim_seconds"`
	WallSeconds  float64 `json:"wall_seconds"`
	Events       uint64  `json:"events"`
	EventsPerSec float64 `json:"events_per_second"`
	SimPerWall   float64 `json:"sim_seconds_per_wall_second"`
	HeapPerHost  float64 `json:"heap_bytes_per_host"`

	series []workload.Bucket // for plots
}

// Bucket is the slowdown of the messages in one size range.
type Bucket struct {
	MaxSize  int     `json:"max_size"`
	Fraction float64 `json:"fraction"` // of messages at or below MaxSize
	Count    int     `json:"count"`
	P50      float64 `json:"p50_slowdown"`
	P99      float64 `json:"p99_slowdown"`
}

type sample struct {
	size int32
	slow float64
}

// quantile is the nearest-rank p-quantile of sorted values.
func quantile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	r := int(math.Ceil(p*float64(len(sorted))-1e-9)) - 1
	return sorted[min(max(r, 0), len(sorted)-1)]
}

func bucketOf(max int, s []sample) Bucket {
	v := make([]float64, len(s))
	for i := range s {
		v[i] = s[i].slow
	}
	slices.Sort(v)
	return Bucket{MaxSize: max, Count: len(v), P50: quantile(v, 0.5), P99: quantile(v, 0.99)}
}

// summarize fills r's slowdowns and loads from the messages.
func summarize(r *Result, g *generator, pk packetizer) {
	f, cfg := g.f, g.cfg
	window := float64(g.end - g.warm)
	capBytes := float64(cfg.Hosts) * float64(cfg.HostMbps) * 1e6 / 8 * window / 1e9
	var offered float64
	var all, incast []sample
	for i := range g.msgs {
		m := &g.msgs[i]
		w := float64(pk.wire(int(m.size)))
		if m.start >= g.warm && m.start < g.end {
			offered += w
		}
		if m.flags&msgMeasured == 0 {
			continue
		}
		if m.done == 0 || m.start < 0 {
			if m.flags&msgIncast == 0 || m.flags&msgResponse == 0 {
				r.Incomplete++
			}
			continue
		}
		s := sample{size: m.size, slow: float64(m.done-m.start) / float64(f.ideal(pk, int(m.size), m.src, m.dst))}
		switch {
		case m.flags&msgIncast == 0:
			all = append(all, s)
		case m.flags&msgResponse == 0:
			incast = append(incast, s)
		}
	}
	r.OfferedLoad, r.AchievedLoad = offered/capBytes, float64(f.dataBytes)/capBytes
	r.LeftOver = (r.OfferedLoad - r.AchievedLoad) * window / 1e9
	r.Messages = len(all) + r.Incomplete
	if len(incast) > 0 {
		b := bucketOf(cfg.IncastSize, incast)
		r.Incast = &b
	}
	if len(all) == 0 {
		return
	}
	slices.SortStableFunc(all, func(a, b sample) int { return cmp.Compare(a.size, b.size) })
	total := bucketOf(int(all[len(all)-1].size), all)
	r.P50, r.P99 = total.P50, total.P99
	r.MinSlowdown = math.Inf(1)
	for _, s := range all {
		r.MinSlowdown = min(r.MinSlowdown, s.slow)
	}
	short := bucketOf(0, all[:max(len(all)/5, 1)])
	r.ShortP50, r.ShortP99 = short.P50, short.P99
	lo := 0
	for _, bound := range g.dist.bounds(10) {
		hi, _ := slices.BinarySearchFunc(all, int32(bound)+1, func(s sample, t int32) int { return cmp.Compare(s.size, t) })
		if hi == lo {
			continue
		}
		b := bucketOf(bound, all[lo:hi])
		b.Fraction = float64(hi) / float64(len(all))
		r.Buckets = append(r.Buckets, b)
		r.series = append(r.series, workload.Bucket{MaxSize: bound, Fraction: b.Fraction, Count: b.Count,
			Slowdown50: b.P50, Slowdown99: b.P99})
		lo = hi
	}
}

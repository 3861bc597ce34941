package bench

import (
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
)

// The goals of the RPC layers, as ratios of two rows of one run:
//
//   - the erpc layer costs at most 15% of the rate of bare Homa on the
//     same transport, with many RPCs outstanding: erpc's RPCs/s over
//     homa's at least 0.85 (throughput mode);
//   - the same protoc-generated stub is at least twice as fast in median
//     latency over Homa as over gRPC-go/TCP: stub-tcp's median over
//     stub-homa's at least 2 (latency mode, one call at a time);
//   - messages on bidirectional gRPC streams go at least twice as fast
//     over Homa as over gRPC-go/TCP: stream-homa's messages per second
//     over stream-tcp's at least 2 (throughput mode).
//
// Both rows come from the same run, one after the other, so that they
// see the same machine.

// layerGoal is one goal: the ratio of a metric of two protocols, and the
// least value that meets it.
type layerGoal struct {
	num, den string // protocols
	metric   string // "rate" (RPCs/s) or "median" (µs)
	mode     string // the mode the goal is measured in
	least    float64
}

var layerGoals = []layerGoal{
	{"erpc", "homa", "rate", Throughput, 0.85},
	{"erpc-udp", "homa-udp", "rate", Throughput, 0.85},
	{"stub-tcp", "stub-homa", "median", Latency, 2},
	{"stub-tcp", "stub-homa-udp", "median", Latency, 2},
	{"stream-homa", "stream-tcp", "rate", Throughput, 2},
	{"stream-homa-udp", "stream-tcp", "rate", Throughput, 2},
}

// LayerRatio is a goal's ratio as measured. A ratio of rows with
// failed calls gives no verdict: failed calls lower a row's rate and
// leave its median to the calls that succeeded, so Met is false and
// Failed says how many failed.
type LayerRatio struct {
	Ratio  string  `json:"ratio"` // "erpc/homa rate"
	Value  float64 `json:"value"`
	Goal   float64 `json:"goal"` // the value meets the goal if at least this
	Met    bool    `json:"met"`
	Failed int     `json:"failed,omitempty"` // calls failed in the two rows: no verdict
}

// compareLayers computes the ratios of the goals whose two protocols
// this run measured, in the goal's mode.
func (r *Report) compareLayers() {
	find := func(name string) *Result {
		i := slices.IndexFunc(r.Results, func(b Result) bool { return b.Protocol == name })
		if i < 0 {
			return nil
		}
		return &r.Results[i]
	}
	for _, g := range layerGoals {
		num, den := find(g.num), find(g.den)
		if num == nil || den == nil || r.Mode != g.mode {
			continue
		}
		var a, b float64
		if g.metric == "rate" {
			a, b = num.RPCsPerSec, den.RPCsPerSec
		} else {
			a, b = num.MedianUS, den.MedianUS
		}
		if b <= 0 {
			continue
		}
		v, failed := a/b, num.Failed+den.Failed
		r.Layers = append(r.Layers, LayerRatio{Ratio: g.num + "/" + g.den + " " + g.metric, Value: v, Goal: g.least,
			Met: failed == 0 && v >= g.least, Failed: failed})
	}
}

// writeLayers prints the ratios of the goals.
func (r *Report) writeLayers(w io.Writer) {
	fmt.Fprintln(w, "RPC layers (rows of this run):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, l := range r.Layers {
		met := "met"
		switch {
		case l.Failed > 0:
			met = fmt.Sprintf("no verdict, %d calls failed", l.Failed)
		case !l.Met:
			met = "not met"
		}
		fmt.Fprintf(tw, "  %s\t%.2f\t(goal >= %g: %s)\n", l.Ratio, l.Value, l.Goal, met)
	}
	tw.Flush()
}

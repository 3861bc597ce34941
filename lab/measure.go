package lab

import (
	"context"
	"os"

	"github.com/homa-go/homa/internal/tools/workload"
)

// RunAll runs e once for each protocol of protos, in turn, the i-th on
// port e.Port+i, and summarizes each run. A protocol whose run fails gets
// a Failed Summary, with a line on e.Log, and the others still run; only
// the end of ctx, an unknown e.Workload or a failure to make the samples
// directory stops it. With e.Dir empty the samples go to a temporary
// directory, removed before RunAll returns.
func (l *Lab) RunAll(ctx context.Context, e Experiment, protos []string) ([]Summary, error) {
	if len(protos) == 0 {
		return nil, nil
	}
	d, err := workload.Named(e.Workload)
	if err != nil {
		return nil, err
	}
	if e.Dir == "" {
		tmp, err := os.MkdirTemp("", "homalab-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(tmp)
		e.Dir = tmp
	} else if err := os.MkdirAll(e.Dir, 0o755); err != nil {
		return nil, err
	}
	port := e.Port
	var sums []Summary
	for i, proto := range protos {
		e.Proto, e.Port = proto, port+uint16(i)
		s, err := l.Run(ctx, &e)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err != nil {
			l.logf(&e, "%s failed: %v", proto, err)
			sums = append(sums, Failed(proto, d, e.LoadMbps, err))
			continue
		}
		sum := Analyze(proto, d, s.Calib, s.Loaded, e.Duration, e.LoadMbps)
		sum.QueueDrops, sum.SocketDrops = s.QueueDrops, s.SocketDrops
		l.logf(&e, "%s: %d RPCs under load, %.1f of %.1f Mbit/s; shortest %.0f%%: p50 slowdown %.2f, p99 %.2f",
			proto, sum.Completed, sum.AchievedMbps, sum.OfferedMbps, 100*ShortFraction, sum.Short.Slowdown50, sum.Short.Slowdown99)
		sums = append(sums, sum)
	}
	return sums, nil
}

// Comparisons compares Homa (or the first protocol measured, without a
// homa row) with every other protocol measured; failed runs are left
// out.
func Comparisons(sums []Summary) []Comparison {
	ref := -1
	for i, s := range sums {
		if s.Error == "" && (ref < 0 || s.Proto == "homa") {
			ref = i
		}
	}
	var out []Comparison
	for i, s := range sums {
		if ref >= 0 && i != ref && s.Error == "" {
			out = append(out, Compare(sums[ref], s))
		}
	}
	return out
}

package lab

import (
	"slices"
	"time"

	"github.com/homa-go/homa/internal/tools/workload"
)

// ShortFraction is the share of messages, the shortest first, that the
// headline figures are about: the Homa papers compare tail latency of
// the shortest 20% of messages.
const ShortFraction = 0.2

// TableBuckets is the number of size buckets of a Summary, before the
// ShortFraction bound is added.
const TableBuckets = 10

// Summary is the outcome of one protocol's run: slowdowns by message size
// under load, against the protocol's own unloaded RTTs.
type Summary struct {
	Proto    string `json:"proto"`
	Workload string `json:"workload"`
	// Calibrated is the number of unloaded RPCs behind the baseline;
	// Completed the number of RPCs measured under load.
	Calibrated int `json:"calibrated"`
	Completed  int `json:"completed"`
	// OfferedMbps is the load asked of the clients, AchievedMbps the
	// request bytes of the completed RPCs per second of the loaded
	// phase (both in Mbit/s of request payload).
	OfferedMbps  float64 `json:"offered_mbps"`
	AchievedMbps float64 `json:"achieved_mbps"`
	// QueueDrops and SocketDrops are Samples' counters: packets dropped
	// at the server's downlink, and by the server host's sockets.
	QueueDrops  uint64 `json:"queue_drops"`
	SocketDrops uint64 `json:"socket_drops"`
	// Buckets are the RPCs by size: bounds at the workload's deciles and
	// at the ShortFraction quantile.
	Buckets []workload.Bucket `json:"buckets"`
	// Short summarizes all RPCs of the shortest ShortFraction of the
	// workload's messages: sizes up to Short.MaxSize.
	Short workload.Bucket `json:"short"`
	// Error, if not empty, says why the run failed; nothing else but
	// the names and the offered load is then set.
	Error string `json:"error,omitempty"`
}

// Failed is the Summary of a run of proto that failed with err.
func Failed(proto string, d *workload.Dist, offeredMbps float64, err error) Summary {
	return Summary{Proto: proto, Workload: d.Name(), OfferedMbps: offeredMbps, Error: err.Error()}
}

// TableBounds returns the bucket bounds of a Summary for d: its deciles
// and its ShortFraction quantile, ascending, without duplicates.
func TableBounds(d *workload.Dist) []int {
	b := append(workload.Bounds(d, TableBuckets), d.Quantile(ShortFraction))
	return slices.Compact(slices.Sorted(slices.Values(b)))
}

// Analyze summarizes one protocol's run of workload d: calib are the
// unloaded samples, loaded those taken under an offered load of
// offeredMbps for duration.
func Analyze(proto string, d *workload.Dist, calib, loaded []workload.Sample, duration time.Duration, offeredMbps float64) Summary {
	base := workload.NewBaseline(calib)
	s := Summary{
		Proto:       proto,
		Workload:    d.Name(),
		Calibrated:  len(calib),
		Completed:   len(loaded),
		OfferedMbps: offeredMbps,
		Buckets:     workload.Summarize(loaded, TableBounds(d), base),
		Short:       workload.Summarize(shortest(loaded, d.Quantile(ShortFraction)), []int{d.Quantile(ShortFraction)}, base)[0],
	}
	if duration > 0 {
		var bytes int
		for _, x := range loaded {
			bytes += x.Size
		}
		s.AchievedMbps = float64(bytes) * 8 / duration.Seconds() / 1e6
	}
	return s
}

// shortest returns the samples of at most limit bytes.
func shortest(samples []workload.Sample, limit int) []workload.Sample {
	var out []workload.Sample
	for _, s := range samples {
		if s.Size <= limit {
			out = append(out, s)
		}
	}
	return out
}

// Comparison sets the shortest messages' figures of two runs side by
// side. Each ratio is the second run's figure over the first's: how many
// times lower the first one's is. A ratio is 0 when a figure is missing.
type Comparison struct {
	First  string `json:"first"`  // protocol
	Second string `json:"second"` // protocol
	// MaxSize bounds the shortest messages: up to this many bytes.
	MaxSize    int     `json:"max_size"`
	Slowdown50 float64 `json:"slowdown50_ratio"`
	Slowdown99 float64 `json:"slowdown99_ratio"`
	RTT50      float64 `json:"rtt50_ratio"`
	RTT99      float64 `json:"rtt99_ratio"`
}

// Compare compares the Short buckets of a and b.
func Compare(a, b Summary) Comparison {
	return Comparison{
		First:      a.Proto,
		Second:     b.Proto,
		MaxSize:    a.Short.MaxSize,
		Slowdown50: ratio(b.Short.Slowdown50, a.Short.Slowdown50),
		Slowdown99: ratio(b.Short.Slowdown99, a.Short.Slowdown99),
		RTT50:      ratio(float64(b.Short.P50), float64(a.Short.P50)),
		RTT99:      ratio(float64(b.Short.P99), float64(a.Short.P99)),
	}
}

// ratio is x/y, or 0 if either is not positive.
func ratio(x, y float64) float64 {
	if x <= 0 || y <= 0 {
		return 0
	}
	return x / y
}

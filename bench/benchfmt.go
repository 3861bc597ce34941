package bench

import (
	"fmt"
	"io"
	"strings"
)

// WriteBenchfmt writes the report's rows in the Go benchmark format, a
// line per protocol, for benchstat: runs of two builds appended to two
// files, alternated, compare with
//
//	benchstat old.txt new.txt
//
// which gives each figure's median over the runs, its spread, and whether
// the difference is more than the machine's noise. A line's name says
// what was measured (mode, sizes, load or concurrency) and the protocol,
// its count the RPCs measured; its figures are the median, p99 and p99.9
// RTT in µs, RPCs/s, CPU µs per RPC, the median and rate over tcp's in
// the same run (when it ran), and, with a workload, the p50 and p99 RTT
// and slowdown of the requests of the first size bucket (the shortest
// tenth, with the default ten buckets), over the protocol's own
// unloaded RTT of the size and over the fastest of all the run's
// protocols (BucketResult). The unloaded RTTs are measured in the same
// run one RPC at a time, and the slowdowns carry their noise: compare
// builds by the RTTs, and protocols by either. A run in rounds (Config.Rounds) adds a line per round, named
// .../PROTOCOL/round, with that round's RPCs/s and its rate over tcp's
// of the same round: benchstat then gives one run's spread of rounds.
func (r *Report) WriteBenchfmt(w io.Writer) error {
	var b strings.Builder
	goos, goarch := platform(r.Go)
	fmt.Fprintf(&b, "goos: %s\ngoarch: %s\npkg: homa bench\n", goos, goarch)
	for _, res := range r.Results {
		fmt.Fprintf(&b, "Benchmark%s/%s %d %.1f median-µs %.1f p99-µs %.1f p99.9-µs %.0f RPCs/s %.2f CPU-µs/RPC",
			r.benchName(), res.Protocol, res.Count, res.MedianUS, res.P99US, res.P999US, res.RPCsPerSec, res.CPUPerRPCUS)
		if res.MedianVsTCP != nil && res.RateVsTCP != nil {
			fmt.Fprintf(&b, " %.3f median/tcp %.3f rate/tcp", *res.MedianVsTCP, *res.RateVsTCP)
		}
		if r.Workload != "" && len(res.Buckets) > 0 && res.Buckets[0].Count > 0 {
			s := res.Buckets[0]
			fmt.Fprintf(&b, " %.1f short-p50-µs %.1f short-p99-µs %.2f short-slowdown-p50 %.2f short-slowdown-p99 %.2f short-fastest-slowdown-p50 %.2f short-fastest-slowdown-p99",
				s.P50US, s.P99US, s.Slowdown50, s.Slowdown99, s.Fastest50, s.Fastest99)
		}
		b.WriteByte('\n')
		// With rounds, each round is a sample of its own, so that
		// benchstat reads the spread of one run's rounds.
		for k, rate := range res.RoundRates {
			fmt.Fprintf(&b, "Benchmark%s/%s/round %d %.0f RPCs/s", r.benchName(), res.Protocol, res.Count/len(res.RoundRates), rate)
			if k < len(res.RoundRatesVsTCP) {
				fmt.Fprintf(&b, " %.3f rate/tcp", res.RoundRatesVsTCP[k])
			}
			b.WriteByte('\n')
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// benchName names what the run measured, in the form of a benchmark's
// name (no spaces).
func (r *Report) benchName() string {
	sizes := fmt.Sprintf("%dB", r.Size)
	if r.Workload != "" {
		sizes = r.Workload
	}
	switch r.Mode {
	case Throughput:
		return fmt.Sprintf("Throughput/%s/%dx%d", sizes, r.Clients, r.Outstanding)
	case Workload:
		return fmt.Sprintf("Workload/%s/%gMbps", sizes, r.LoadMbps)
	}
	return "Latency/" + sizes
}

// platform is the system and architecture in a Go version line such as
// "go1.26.8 linux/amd64".
func platform(goVersion string) (goos, goarch string) {
	if _, osArch, ok := strings.Cut(goVersion, " "); ok {
		if goos, goarch, ok := strings.Cut(osArch, "/"); ok {
			return goos, goarch
		}
	}
	return "unknown", "unknown"
}

package bench

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/homa-go/homa/internal/tools/workload"
)

// TestWriteBenchfmt: each row becomes one line of the Go benchmark
// format (a name without spaces, a count, then value-unit pairs), named
// after what the run measured, with the ratios to tcp when it ran and
// the shortest bucket's slowdowns for a workload.
func TestWriteBenchfmt(t *testing.T) {
	ratio := func(v float64) *float64 { return &v }
	r := &Report{Mode: Workload, Workload: "w4", LoadMbps: 500, Go: "go1.26.8 linux/amd64", Results: []Result{
		{Protocol: "homa", Count: 4143, MedianUS: 180.2, P99US: 1364.7, P999US: 2000, RPCsPerSec: 1036, CPUPerRPCUS: 356.8,
			MedianVsTCP: ratio(1.54), RateVsTCP: ratio(1), Buckets: []BucketResult{{MaxSize: 315, Fraction: 0.099, Count: 411, P50US: 120.5, P99US: 900.1, Slowdown50: 10.95, Slowdown99: 49.58, Fastest50: 10.95, Fastest99: 49.58}}},
		{Protocol: "tcp", Count: 4143, MedianUS: 117.2, P99US: 1001.9, P999US: 1500, RPCsPerSec: 1036, CPUPerRPCUS: 240.4,
			MedianVsTCP: ratio(1), RateVsTCP: ratio(1)},
	}}
	var b strings.Builder
	if err := r.WriteBenchfmt(&b); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if lines[0] != "goos: linux" || lines[1] != "goarch: amd64" {
		t.Errorf("configuration lines %q", lines[:2])
	}
	units := map[string][]string{}
	for _, l := range lines {
		if !strings.HasPrefix(l, "Benchmark") {
			continue
		}
		f := strings.Fields(l)
		if len(f)%2 != 0 {
			t.Fatalf("%q: want a name, a count and value-unit pairs", l)
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			t.Fatalf("%q: count %q", l, f[1])
		}
		for i := 2; i < len(f); i += 2 {
			if _, err := strconv.ParseFloat(f[i], 64); err != nil {
				t.Fatalf("%q: value %q", l, f[i])
			}
			units[f[0]] = append(units[f[0]], f[i+1])
		}
	}
	want := map[string]string{
		"BenchmarkWorkload/w4/500Mbps/homa": "median-µs p99-µs p99.9-µs RPCs/s CPU-µs/RPC median/tcp rate/tcp short-p50-µs short-p99-µs short-slowdown-p50 short-slowdown-p99 short-fastest-slowdown-p50 short-fastest-slowdown-p99",
		"BenchmarkWorkload/w4/500Mbps/tcp":  "median-µs p99-µs p99.9-µs RPCs/s CPU-µs/RPC median/tcp rate/tcp",
	}
	if len(units) != len(want) {
		t.Fatalf("benchmarks %v, want %v", units, want)
	}
	for name, u := range want {
		if got := strings.Join(units[name], " "); got != u {
			t.Errorf("%s: units %q, want %q", name, got, u)
		}
	}
	if !strings.Contains(b.String(), "BenchmarkWorkload/w4/500Mbps/homa 4143 180.2 median-µs") {
		t.Errorf("homa's line lacks its count and median:\n%s", b.String())
	}
	for _, tc := range []struct {
		r    Report
		name string
	}{
		{Report{Mode: Throughput, Size: 100, Clients: 4, Outstanding: 32}, "Throughput/100B/4x32"},
		{Report{Mode: Latency, Size: 1000000}, "Latency/1000000B"},
	} {
		if got := tc.r.benchName(); got != tc.name {
			t.Errorf("benchName = %q, want %q", got, tc.name)
		}
	}
}

// TestCompareToTCP: the gRPC layers' rows are compared with gRPC-go over
// TCP, of the same kind, and the others with tcp; a row whose baseline
// did not run gets no ratio.
func TestCompareToTCP(t *testing.T) {
	r := &Report{Results: []Result{
		{Protocol: "homa", MedianUS: 50, RPCsPerSec: 300},
		{Protocol: "tcp", MedianUS: 100, RPCsPerSec: 100},
		{Protocol: "stream-homa", MedianUS: 30, RPCsPerSec: 180},
		{Protocol: "stream-tcp", MedianUS: 60, RPCsPerSec: 90},
		{Protocol: "stub-homa", MedianUS: 20, RPCsPerSec: 500},
	}}
	r.compareToTCP()
	for _, tc := range []struct {
		protocol     string
		median, rate float64 // 0: none
	}{
		{"homa", 0.5, 3}, {"tcp", 1, 1}, {"stream-homa", 0.5, 2}, {"stream-tcp", 1, 1}, {"stub-homa", 0, 0},
	} {
		i := slices.IndexFunc(r.Results, func(b Result) bool { return b.Protocol == tc.protocol })
		b := r.Results[i]
		got := func(v *float64) float64 {
			if v == nil {
				return 0
			}
			return *v
		}
		if got(b.MedianVsTCP) != tc.median || got(b.RateVsTCP) != tc.rate {
			t.Errorf("%s: median/TCP %v, rate/TCP %v; want %v, %v", tc.protocol, got(b.MedianVsTCP), got(b.RateVsTCP), tc.median, tc.rate)
		}
	}
}

// TestWriteBenchfmtRounds: a run in rounds adds a line per round, each a
// sample of the same benchmark, with its rate and ratio to tcp's.
func TestWriteBenchfmtRounds(t *testing.T) {
	r := &Report{Mode: Throughput, Size: 1000, Clients: 4, Outstanding: 32, Go: "go1.26.8 linux/amd64", Results: []Result{
		{Protocol: "stream-homa", Count: 300, RPCsPerSec: 110, RoundRates: []float64{100, 120, 110}, RoundRatesVsTCP: []float64{2, 1.5, 2.2}},
		{Protocol: "stream-tcp", Count: 300, RPCsPerSec: 60, RoundRates: []float64{50, 80, 50}, RoundRatesVsTCP: []float64{1, 1, 1}},
	}}
	var b strings.Builder
	if err := r.WriteBenchfmt(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"BenchmarkThroughput/1000B/4x32/stream-homa/round 100 100 RPCs/s 2.000 rate/tcp\n",
		"BenchmarkThroughput/1000B/4x32/stream-homa/round 100 120 RPCs/s 1.500 rate/tcp\n",
		"BenchmarkThroughput/1000B/4x32/stream-homa/round 100 110 RPCs/s 2.200 rate/tcp\n",
		"BenchmarkThroughput/1000B/4x32/stream-tcp/round 100 80 RPCs/s 1.000 rate/tcp\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no line %q in:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "/round "); n != 6 {
		t.Errorf("%d round lines, want 6:\n%s", n, out)
	}
}

// TestCompareToFastest: every row's slowdowns over the fastest divide
// by the shortest unloaded RTT of the run's rows at each size, so the
// faster row's equal its own and the slower row's compare as its RTTs.
func TestCompareToFastest(t *testing.T) {
	const us = time.Microsecond
	fast := []workload.Sample{{Size: 100, RTT: 10 * us}}
	slow := []workload.Sample{{Size: 100, RTT: 40 * us}}
	cfg := &Config{Dist: workload.Fixed(100), Buckets: 1}
	loaded := measured{samples: []workload.Sample{{Size: 100, RTT: 80 * us}}}
	r := &Report{Results: []Result{
		summarize(Protocol{name: "homa"}, cfg, loaded, workload.NewBaseline(fast)),
		summarize(Protocol{name: "tcp"}, cfg, loaded, workload.NewBaseline(slow)),
	}}
	r.compareToFastest(cfg)
	for i, want := range []struct{ own, fastest float64 }{{8, 8}, {2, 8}} {
		b := r.Results[i].Buckets[0]
		if b.Slowdown50 != want.own || b.Fastest50 != want.fastest || b.Fastest99 != want.fastest {
			t.Errorf("%s: slowdown %v, over the fastest %v/%v; want %v, %v", r.Results[i].Protocol, b.Slowdown50, b.Fastest50, b.Fastest99, want.own, want.fastest)
		}
		if r.Results[i].samples != nil {
			t.Errorf("%s keeps its samples", r.Results[i].Protocol)
		}
	}
}

package dcsim

import (
	"testing"
	"time"
)

// BenchmarkHomaW4 simulates 1 ms of the paper's fabric (144 hosts) under
// W4 at 80% load: go test -bench HomaW4 -cpuprofile cpu.out ./dcsim.
func BenchmarkHomaW4(b *testing.B) {
	b.ReportAllocs()
	var events uint64
	var sim float64
	for b.Loop() {
		r, err := Run(Config{Workload: "w4", Load: 0.8, Duration: time.Millisecond, Seed: 1}, "homa")
		if err != nil {
			b.Fatal(err)
		}
		events += r.Events
		sim += r.SimSeconds
	}
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(sim/b.Elapsed().Seconds(), "sim-s/s")
}

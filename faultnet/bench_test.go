//go:build linux

package faultnet_test

import (
	"fmt"
	"os"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/homa-go/homa/faultnet"
)

// lossRow is one line of BenchmarkLoss's table.
type lossRow struct {
	permille, size int
	res            loadResult
	dupExecs       int
	drops          faultnet.LossCounters
}

// BenchmarkLoss measures RPC completion time against packet loss: a
// client in one namespace sends echo RPCs, one at a time, to a server in
// the other, while nftables drops 0, 1, 5 and 10% of the Homa packets on
// the link (each way). Each sub-benchmark's b.N is the number of RPCs; a
// fixed count gives comparable tails:
//
//	go test -run '^$' -bench Loss -benchtime 1000x ./faultnet
//
// It reports p50-us and p99-us (completion time of the RPCs that
// succeeded), failed (RPCs that did not complete within 2 s), dup-execs
// (requests the server ran more than once) and drop-% (what nftables
// actually dropped), then prints the same as a table.
func BenchmarkLoss(b *testing.B) {
	if err := faultnet.NftAvailable(); err != nil {
		b.Skipf("skipping: %v", err)
	}
	p := faultnet.Setup(b)
	srv := startServer(b, p)
	cli := startClient(b, p)
	var rows []*lossRow
	for _, permille := range []int{0, 10, 50, 100} {
		for _, size := range []int{100, 100_000} {
			row := &lossRow{permille: permille, size: size}
			rows = append(rows, row)
			name := fmt.Sprintf("loss=%g%%/size=%d", float64(permille)/10, size)
			b.Run(name, func(b *testing.B) { measureLoss(b, p, srv, cli, row) })
		}
	}
	printLossTable(rows)
}

// measureLoss runs b.N RPCs of row.size bytes at row's loss rate and
// records the outcome in row.
func measureLoss(b *testing.B, p *faultnet.Pair, srv, cli *faultnet.Child, row *lossRow) {
	if err := p.SetLoss(row.permille); err != nil { // also zeroes the counters
		b.Fatal(err)
	}
	before := report(b, srv)
	l := load{
		Mix:         []batch{{row.size, b.N}},
		Concurrency: 1,
		Timeout:     2 * time.Second,
		Deadline:    5 * time.Minute,
	}
	b.ResetTimer()
	row.res = runLoad(b, cli, l)
	b.StopTimer()
	row.dupExecs = report(b, srv).DupExecs - before.DupExecs
	var err error
	if row.drops, err = p.LossCounters(); err != nil {
		b.Fatal(err)
	}
	if row.res.Failed > 0 {
		b.Logf("%d RPCs failed, first: %q", row.res.Failed, row.res.Errors)
	}
	lat := row.res.Latency[row.size]
	b.ReportMetric(lat.P50, "p50-us")
	b.ReportMetric(lat.P99, "p99-us")
	b.ReportMetric(float64(row.res.Failed), "failed")
	b.ReportMetric(float64(row.dupExecs), "dup-execs")
	b.ReportMetric(100*row.drops.Fraction(), "drop-%")
}

func printLossTable(rows []*lossRow) {
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "loss\tsize B\tRPCs\tfailed\tp50 µs\tp99 µs\tmax µs\tdup execs\tdropped\t")
	for _, r := range rows {
		if r.res.Latency == nil {
			continue // filtered out by -bench
		}
		lat := r.res.Latency[r.size]
		fmt.Fprintf(w, "%g%%\t%d\t%d\t%d\t%.0f\t%.0f\t%.0f\t%d\t%d/%d (%.1f%%)\t\n",
			float64(r.permille)/10, r.size, r.res.OK+r.res.Failed, r.res.Failed,
			lat.P50, lat.P99, lat.Max, r.dupExecs, r.drops.Dropped, r.drops.Seen, 100*r.drops.Fraction())
	}
	w.Flush()
}

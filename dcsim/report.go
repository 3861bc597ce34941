package dcsim

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/homa-go/homa/internal/tools/benchplot"
)

// WriteTable prints results as tables: one line of figures per run, then
// each run's slowdown by message size.
func WriteTable(w io.Writer, results []*Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\tworkload\tload\toffered\tachieved\tmessages\tincomplete\tshort p50\tshort p99\tp50\tp99\tdrops\tgrants\tresends\tretransmits\tsim s\twall s\tevents/s\t")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%s\t%.2f\t%.3f\t%.3f\t%d\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t%d\t%d\t%d\t%d\t%.4f\t%.1f\t%.3g\t\n",
			r.Label, r.Workload, r.Load, r.OfferedLoad, r.AchievedLoad, r.Messages, r.Incomplete,
			r.ShortP50, r.ShortP99, r.P50, r.P99, r.Drops, r.Grants, r.Resends, r.Retransmits,
			r.SimSeconds, r.WallSeconds, r.EventsPerSec)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range results {
		fmt.Fprintf(w, "\n%s %s at %.2f load: slowdown by message size\n", r.Label, r.Workload, r.Load)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "size <=\tcum. fraction\tcount\tp50\tp99\t")
		for _, b := range r.Buckets {
			fmt.Fprintf(tw, "%d\t%.2f\t%d\t%.2f\t%.2f\t\n", b.MaxSize, b.Fraction, b.Count, b.P50, b.P99)
		}
		if b := r.Incast; b != nil {
			fmt.Fprintf(tw, "incast %d\t\t%d\t%.2f\t%.2f\t\n", b.MaxSize, b.Count, b.P50, b.P99)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		var q []string
		for l := range numLayers {
			s := r.Layers[l.String()]
			q = append(q, fmt.Sprintf("%s mean %.0f peak %d drops %d", l, s.MeanQ, s.PeakQ, s.Drops))
		}
		fmt.Fprintf(w, "queues (bytes per port): %s\n", strings.Join(q, "; "))
	}
	return nil
}

// WritePlot draws the slowdown of each result by message size (p50 solid,
// p99 dashed), as the Homa paper's figures do, to an .svg or .png file.
func WritePlot(path, title string, results []*Result) error {
	series := make([]benchplot.Series, 0, len(results))
	for _, r := range results {
		series = append(series, benchplot.Series{Name: fmt.Sprintf("%s %s %.0f%%", r.Label, r.Workload, 100*r.Load), Buckets: r.series})
	}
	return benchplot.WriteSlowdown(path, title, series)
}

package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"
)

// summary is a figure over the runs: its value and how many runs
// measured it; lo..hi is its spread: for a figure, from the worst run to
// the best; for a ratio, the runs' own ratios from the lowest to the
// highest. failed lists the rows with failed calls, "homa: 3 in run
// 2": a figure with any has no value, since a failed call lowers its
// row's rate and leaves its latencies to the calls that succeeded.
type summary struct {
	value  float64
	lo, hi float64
	n      int
	failed []string
}

// summarize reads figure f of measurement j from every run. A figure is
// its metric's best value over the runs; a ratio is the ratio of the
// best values of its two protocols. Any failed call in a row it reads,
// in any run, leaves it without a value.
func summarize(f figure, runs [][]*report, j int) summary {
	var (
		s        summary
		num, den []float64
		ratios   []float64
	)
	for i, run := range runs {
		for _, p := range []string{f.proto, f.den} {
			if x, ok := run[j].row(p); ok && p != "" && x.Failed > 0 {
				s.failed = append(s.failed, fmt.Sprintf("%s: %d in run %d", p, x.Failed, i+1))
			}
		}
	}
	if len(s.failed) > 0 {
		return s
	}
	for _, run := range runs {
		rep := run[j]
		a, ok := rep.row(f.proto)
		if !ok {
			continue
		}
		if f.den == "" {
			num = append(num, f.metric.value(a))
			continue
		}
		b, ok := rep.row(f.den)
		if !ok || f.metric.value(b) <= 0 {
			continue
		}
		num, den = append(num, f.metric.value(a)), append(den, f.metric.value(b))
		ratios = append(ratios, f.metric.value(a)/f.metric.value(b))
	}
	if len(num) == 0 {
		return s
	}
	best := func(v []float64) float64 {
		if f.metric.higher {
			return slices.Max(v)
		}
		return slices.Min(v)
	}
	worst := func(v []float64) float64 {
		if f.metric.higher {
			return slices.Min(v)
		}
		return slices.Max(v)
	}
	if f.den == "" {
		return summary{value: best(num), lo: worst(num), hi: best(num), n: len(num)}
	}
	return summary{value: best(num) / best(den), lo: slices.Min(ratios), hi: slices.Max(ratios), n: len(ratios)}
}

// format writes a value of f the way its metric reads best.
func format(f figure, v float64) string {
	switch {
	case f.den != "":
		return fmt.Sprintf("%.2f", v)
	case f.metric.name == rate.name:
		return fmt.Sprintf("%.0f", v)
	case f.metric.name == gbps.name:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

// writeTable prints the header and the table of every figure of the
// plan.
func writeTable(w io.Writer, plan []measurement, runs [][]*report, head string) {
	fmt.Fprint(w, head)
	fmt.Fprintf(w, "\n| measurement | protocol | figure | best of %d | spread |\n", len(runs))
	fmt.Fprintln(w, "| --- | --- | --- | ---: | ---: |")
	for j, m := range plan {
		for _, f := range m.figures {
			s := summarize(f, runs, j)
			name := f.metric.name
			if f.den != "" {
				name = "ratio of " + name
			}
			best, spread := "-", "-"
			switch {
			case len(s.failed) > 0:
				best, spread = "no figure", "calls failed: "+strings.Join(s.failed, ", ")
			case s.n > 0:
				best = format(f, s.value)
				// Low to high, whichever end is the best.
				spread = format(f, min(s.lo, s.hi)) + " – " + format(f, max(s.lo, s.hi))
				if s.n < len(runs) {
					spread += fmt.Sprintf(" (%d runs)", s.n)
				}
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", m.title, f.label, name, best, spread)
		}
	}
	if notes := skipNotes(runs); len(notes) > 0 {
		fmt.Fprintln(w)
		for _, n := range notes {
			fmt.Fprintf(w, "- skipped %s\n", n)
		}
	}
}

// skipNotes lists the protocols bench skipped, and why, once each.
func skipNotes(runs [][]*report) []string {
	var notes []string
	for _, run := range runs {
		for _, rep := range run {
			for _, s := range rep.Skipped {
				n := s.Protocol + ": " + s.Reason
				if !slices.Contains(notes, n) {
					notes = append(notes, n)
				}
			}
		}
	}
	return notes
}

// header says when, where and how the figures were measured.
func header(o *options, start time.Time, took time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Measured %s by `go run ./scripts/perf` in %v.\n\n", start.UTC().Format("2006-01-02 15:04 MST"), took.Round(time.Second))
	fmt.Fprintf(&b, "Machine: %s.", machine())
	if o.note != "" {
		fmt.Fprintf(&b, " %s.", strings.TrimSuffix(o.note, "."))
	}
	fmt.Fprintf(&b, "\n\nEach figure is the best of %d runs of its measurement, every `homa bench` run with its servers in child "+
		"processes (two processes, as users run them); its spread goes from the worst run to the best. A ratio "+
		"is that of the two best figures of its protocols, measured in the same bench runs; its spread goes "+
		"from the lowest of the runs' own ratios to the highest. A figure has no value if any call it reads failed, in any run. Counts: %d x 1 MB, %d x 100 B one at a time, %d x 100 B outstanding, "+
		"%d x 32 B for erpc, %d x 32 B for the stub, per protocol and run.\n",
		o.repeat, o.mbCount, o.latCount, o.rateCount, o.layerRate, o.stubCount)
	if o.rounds > 1 {
		fmt.Fprintf(&b, "Every `homa bench` run measured its protocols in %d rounds, in turn (`--rounds %d`), its counts split among them.\n",
			o.rounds, o.rounds)
	}
	return b.String()
}

// machine describes this machine: CPU model and count, kernel, Go.
func machine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	kernel := runtime.GOOS
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		kernel = "Linux " + strings.TrimSpace(string(b))
	}
	return fmt.Sprintf("%s, %d CPUs, %s, %s %s/%s", model, runtime.NumCPU(), kernel, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

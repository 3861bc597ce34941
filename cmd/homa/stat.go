package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/homa-go/homa/bench"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// runStat is "homa stat": it scrapes the /metrics of a running command
// (see --metrics) every interval and prints what changed since the
// previous scrape, like top for the transport.
func runStat(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("stat", "[--url URL] [--interval D] [--count N] [--match REGEXP]", stderr)
	target := fs.String("url", "http://127.0.0.1:9100/metrics", "metrics `URL` of a command run with --metrics")
	interval := fs.Duration("interval", time.Second, "time between reports")
	count := fs.Int("count", 0, "reports to print before exiting (0: until interrupted)")
	match := fs.String("match", "^homa_", "show only the metrics whose name matches `REGEXP`")
	var re *regexp.Regexp
	check := func() error {
		var err error
		switch {
		case *interval <= 0:
			return errors.New("--interval must be positive")
		case *count < 0:
			return errors.New("--count must not be negative")
		}
		if u, err := url.Parse(*target); err != nil || (u.Scheme != "http" && u.Scheme != "https") {
			return fmt.Errorf("--url %q: not an http(s) URL", *target)
		}
		re, err = regexp.Compile(*match)
		return err
	}
	if code := parseFlags(fs, args, check); code >= 0 {
		return code
	}
	sc := &scraper{url: *target, client: &http.Client{Timeout: max(*interval, 5*time.Second)}}
	prev, err := sc.scrape(ctx)
	if err != nil {
		return fail(stderr, "stat", bench.RemoteError(*target, err))
	}
	fmt.Fprintf(stdout, "homa stat: %s: %d series, a report every %v\n", *target, len(prev.series), *interval)
	fmt.Fprintln(stdout, quantileNote)
	tick := time.NewTicker(*interval)
	defer tick.Stop()
	for i := 0; *count == 0 || i < *count; i++ {
		select {
		case <-ctx.Done():
			return 0
		case <-tick.C:
		}
		cur, err := sc.scrape(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return 0
			}
			return fail(stderr, "stat", err)
		}
		writeChanges(stdout, prev, cur, re)
		prev = cur
	}
	return 0
}

// scraper reads a metrics endpoint.
type scraper struct {
	url    string
	client *http.Client
}

// snapshot is one scrape: every series by its name and labels.
type snapshot struct {
	at     time.Time
	series map[string]*series
}

// series is one metric with one set of label values.
type series struct {
	name   string // the metric family's name
	labels string // `a="x",b="y"`, sorted by label name
	typ    dto.MetricType
	value  float64 // counters, gauges, untyped
	// Histograms and summaries.
	count   uint64
	sum     float64
	buckets []bucket // histograms: cumulative, ascending bounds
}

type bucket struct {
	upper float64
	count uint64 // cumulative
}

// key names a series: name{labels}.
func (s *series) key() string {
	if s.labels == "" {
		return s.name
	}
	return s.name + "{" + s.labels + "}"
}

// errStatus reports a scrape answered with another status than 200 OK.
type errStatus struct {
	url    string
	status string
}

func (e *errStatus) Error() string { return fmt.Sprintf("GET %s: %s", e.url, e.status) }

// scrape fetches and parses the metrics in the text format.
func (sc *scraper) scrape(ctx context.Context) (*snapshot, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, sc.url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := sc.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, &errStatus{url: sc.url, status: resp.Status}
	}
	return parseMetrics(resp.Body, time.Now())
}

// parseMetrics reads metrics in the Prometheus text format.
func parseMetrics(r io.Reader, at time.Time) (*snapshot, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parse metrics: %w", err)
	}
	snap := &snapshot{at: at, series: make(map[string]*series)}
	for name, mf := range families {
		for _, m := range mf.GetMetric() {
			s := toSeries(name, mf.GetType(), m)
			snap.series[s.key()] = s
		}
	}
	return snap, nil
}

func toSeries(name string, typ dto.MetricType, m *dto.Metric) *series {
	s := &series{name: name, typ: typ, labels: labelString(m.GetLabel())}
	switch typ {
	case dto.MetricType_COUNTER:
		s.value = m.GetCounter().GetValue()
	case dto.MetricType_GAUGE:
		s.value = m.GetGauge().GetValue()
	case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
		h := m.GetHistogram()
		s.count, s.sum = h.GetSampleCount(), h.GetSampleSum()
		for _, b := range h.GetBucket() {
			s.buckets = append(s.buckets, bucket{upper: b.GetUpperBound(), count: b.GetCumulativeCount()})
		}
	case dto.MetricType_SUMMARY:
		s.count, s.sum = m.GetSummary().GetSampleCount(), m.GetSummary().GetSampleSum()
	default:
		s.value = m.GetUntyped().GetValue()
	}
	return s
}

func labelString(pairs []*dto.LabelPair) string {
	l := make([]string, 0, len(pairs))
	for _, p := range pairs {
		l = append(l, fmt.Sprintf("%s=%q", p.GetName(), p.GetValue()))
	}
	slices.Sort(l)
	return strings.Join(l, ",")
}

// change is what happened to one series between two scrapes.
type change struct {
	s     *series
	delta float64 // counters: increase; gauges: difference
	// Histograms and summaries: observations in the interval and the
	// estimates from them.
	count          uint64
	mean, p50, p99 float64
}

// diff compares two scrapes: counters that increased, gauges that are not
// zero or changed, histograms and summaries with new observations. A
// counter that went down was reset (the process restarted): its whole
// value counts as the increase.
func diff(prev, cur *snapshot, re *regexp.Regexp) (counters, gauges, hists []change) {
	for k, s := range cur.series {
		if !re.MatchString(s.name) {
			continue
		}
		p := prev.series[k]
		if p == nil {
			p = &series{}
		}
		switch s.typ {
		case dto.MetricType_COUNTER, dto.MetricType_UNTYPED:
			d := s.value - p.value
			if d < 0 {
				d = s.value
			}
			if d != 0 {
				counters = append(counters, change{s: s, delta: d})
			}
		case dto.MetricType_GAUGE:
			if d := s.value - p.value; s.value != 0 || d != 0 {
				gauges = append(gauges, change{s: s, delta: d})
			}
		default:
			if c, ok := histChange(p, s); ok {
				hists = append(hists, c)
			}
		}
	}
	for _, l := range [][]change{counters, gauges, hists} {
		slices.SortFunc(l, func(a, b change) int {
			return cmp.Or(cmp.Compare(a.s.name, b.s.name), cmp.Compare(a.s.labels, b.s.labels))
		})
	}
	return counters, gauges, hists
}

// histChange is the interval's part of a histogram or summary: the
// difference of its buckets, count and sum. A histogram whose count went
// down was reset, and is taken whole.
func histChange(p, s *series) (change, bool) {
	if s.count < p.count || len(p.buckets) != len(s.buckets) {
		p = &series{buckets: make([]bucket, len(s.buckets))}
	}
	c := change{s: s, count: s.count - p.count}
	if c.count == 0 {
		return c, false
	}
	c.mean = (s.sum - p.sum) / float64(c.count)
	if len(s.buckets) == 0 {
		c.p50, c.p99 = math.NaN(), math.NaN()
		return c, true
	}
	d := make([]bucket, len(s.buckets))
	for i, b := range s.buckets {
		d[i] = bucket{upper: b.upper, count: b.count - min(p.buckets[i].count, b.count)}
	}
	c.p50, c.p99 = quantile(0.5, d, c.count), quantile(0.99, d, c.count)
	return c, true
}

// quantileNote says how the p50 and p99 columns are made: a histogram
// keeps counts per bucket, not the values observed.
const quantileNote = "homa stat: histogram p50 and p99 are estimates from bucket counts, interpolated linearly within a bucket " +
	"(message-size buckets are powers of two, so a size percentile is only good to its bucket)"

// quantile estimates the q-quantile of total observations in cumulative
// buckets, interpolating linearly inside the bucket that holds it, as
// Prometheus' histogram_quantile does. Observations above the highest
// finite bound are reported as that bound.
func quantile(q float64, buckets []bucket, total uint64) float64 {
	rank := q * float64(total)
	lower, below := 0.0, uint64(0)
	for _, b := range buckets {
		if math.IsInf(b.upper, 1) {
			break
		}
		if float64(b.count) >= rank {
			in := b.count - below
			if in == 0 {
				return b.upper
			}
			return lower + (b.upper-lower)*(rank-float64(below))/float64(in)
		}
		lower, below = b.upper, b.count
	}
	return lower
}

// writeChanges prints one report: the counters that moved, with their
// rate, the gauges, and the histograms that got observations.
func writeChanges(w io.Writer, prev, cur *snapshot, re *regexp.Regexp) {
	secs := cur.at.Sub(prev.at).Seconds()
	counters, gauges, hists := diff(prev, cur, re)
	fmt.Fprintf(w, "\n--- %s (%.2fs)\n", cur.at.Format(time.TimeOnly), secs)
	if len(counters)+len(gauges)+len(hists) == 0 {
		fmt.Fprintln(w, "no change")
		return
	}
	width := len("histogram")
	for _, l := range [][]change{counters, gauges, hists} {
		for _, c := range l {
			width = max(width, len(c.s.key()))
		}
	}
	if len(counters) > 0 {
		fmt.Fprintf(w, "%-*s %12s %12s\n", width, "counter", "delta", "/s")
		for _, c := range counters {
			fmt.Fprintf(w, "%-*s %12s %12s\n", width, c.s.key(), number(c.delta), number(c.delta/secs))
		}
	}
	if len(gauges) > 0 {
		fmt.Fprintf(w, "%-*s %12s %12s\n", width, "gauge", "value", "change")
		for _, c := range gauges {
			fmt.Fprintf(w, "%-*s %12s %12s\n", width, c.s.key(), number(c.s.value), signed(c.delta))
		}
	}
	if len(hists) > 0 {
		fmt.Fprintf(w, "%-*s %12s %12s %10s %10s %10s\n", width, "histogram", "count", "/s", "mean", "p50", "p99")
		for _, c := range hists {
			u := unitOf(c.s.name)
			fmt.Fprintf(w, "%-*s %12d %12s %10s %10s %10s\n", width, c.s.key(), c.count, number(float64(c.count)/secs),
				u(c.mean), u(c.p50), u(c.p99))
		}
	}
}

// number prints a value briefly: integers and values from 1,000 up
// whole, others with four significant digits.
func number(v float64) string {
	if a := math.Abs(v); a < 1e15 && (v == math.Trunc(v) || a >= 1000) {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}

func signed(v float64) string {
	if v >= 0 {
		return "+" + number(v)
	}
	return number(v)
}

// unitOf returns how to print the observed values of a metric: seconds
// as durations, anything else as numbers.
func unitOf(name string) func(float64) string {
	if !strings.HasSuffix(name, "_seconds") {
		return func(v float64) string {
			if math.IsNaN(v) {
				return "-"
			}
			return number(v)
		}
	}
	return func(v float64) string {
		if math.IsNaN(v) {
			return "-"
		}
		d := time.Duration(v * 1e9)
		switch {
		case d >= time.Second:
			return d.Round(time.Millisecond).String()
		case d >= time.Millisecond:
			return d.Round(time.Microsecond).String()
		case d >= time.Microsecond:
			return d.Round(100 * time.Nanosecond).String()
		}
		return d.String()
	}
}

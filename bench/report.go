package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/homa-go/homa/internal/tools/benchplot"
	"github.com/homa-go/homa/internal/tools/workload"
)

// Report is the outcome of a run: its configuration, a row for each
// protocol measured, and the protocols left out, as JSON has it.
type Report struct {
	Mode        string  `json:"mode"`
	Size        int     `json:"size,omitempty"`     // fixed request size
	Workload    string  `json:"workload,omitempty"` // or the size distribution
	Count       int     `json:"count,omitempty"`    // RPCs asked for (latency, throughput)
	Warmup      int     `json:"warmup"`
	Calibrate   int     `json:"calibrate,omitempty"`
	Clients     int     `json:"clients"`
	Outstanding int     `json:"outstanding,omitempty"` // per client (throughput)
	LoadMbps    float64 `json:"load_mbps,omitempty"`   // offered (workload)
	OfferedRate float64 `json:"offered_rpcs_per_sec,omitempty"`
	DurationS   float64 `json:"duration_s,omitempty"`
	MaxInFlight int     `json:"max_outstanding,omitempty"` // workload
	ReplySize   int     `json:"reply_size,omitempty"`
	Seed        uint64  `json:"seed"`
	Host        string  `json:"host,omitempty"`   // loopback address of in-process servers
	Target      string  `json:"target,omitempty"` // or the remote server
	Go          string  `json:"go"`
	CPUs        int     `json:"cpus"`
	// ClientCPUs and ServerCPUs are the CPUs each side ran on when
	// they were split (Config.SplitCPUs), as lists such as "0-3".
	ClientCPUs string `json:"client_cpus,omitempty"`
	ServerCPUs string `json:"server_cpus,omitempty"`
	// Servers says where the servers run: "child process", "this
	// process" or "remote"; CPUAccounting what CPU µs/RPC counts.
	Servers       string `json:"servers"`
	CPUAccounting string `json:"cpu_accounting"`
	// RawHomaSockets counts the raw sockets of IP protocol 146 open on
	// the host before the run (see rawHomaSockets).
	RawHomaSockets int `json:"raw_homa_sockets_before,omitempty"`

	Results []Result `json:"results"`
	// Layers are the ratios the RPC layers' goals name, for the pairs of
	// protocols this run measured.
	Layers  []LayerRatio `json:"layers,omitempty"`
	Skipped []Skipped    `json:"skipped,omitempty"`
}

// Skipped is a protocol that was not measured.
type Skipped struct {
	Protocol string `json:"protocol"`
	Reason   string `json:"reason"`
}

// Result is one protocol's row.
type Result struct {
	Protocol    string  `json:"protocol"`
	Description string  `json:"description"`
	Server      string  `json:"server,omitempty"` // the server's address (none for loopback-only protocols)
	Count       int     `json:"count"`            // RPCs measured
	Failed      int     `json:"failed"`
	Dropped     int     `json:"dropped,omitempty"`
	MinUS       float64 `json:"min_us"`
	MedianUS    float64 `json:"median_us"`
	P99US       float64 `json:"p99_us"`
	P999US      float64 `json:"p99_9_us"`
	MaxUS       float64 `json:"max_us"`
	RPCsPerSec  float64 `json:"rpcs_per_sec"`
	// Gbps is request payload per second (the same again comes back
	// from an echo).
	Gbps float64 `json:"gbps"`
	// CPUPerRPCUS is the user+system CPU time per RPC of this process
	// (the client, and the server when it runs here) and of the server's
	// process when it runs in a child (see Report.CPUAccounting).
	CPUPerRPCUS float64  `json:"cpu_us_per_rpc"`
	MedianVsTCP *float64 `json:"median_vs_tcp,omitempty"` // over the TCP baseline's (see compareToTCP); absent without it
	RateVsTCP   *float64 `json:"rate_vs_tcp,omitempty"`
	// RoundRates, with Config.Rounds, is the rate (RPCs/s) of each
	// round, and RoundRatesVsTCP each over its TCP baseline's in the
	// same round.
	RoundRates      []float64 `json:"round_rates,omitempty"`
	RoundRatesVsTCP []float64 `json:"round_rates_vs_tcp,omitempty"`
	// Buckets are by request size; slowdown is RTT over the protocol's
	// own unloaded RTT of the size (latency mode: of this run itself),
	// and the slowdown over the fastest is over the shortest unloaded
	// RTT of the size among the run's protocols (workload.Fastest).
	Buckets []BucketResult `json:"buckets"`
	// ClientStats, with Config.Stats, is what the client sockets counted
	// over the whole run (absent for protocols not over a Homa socket);
	// StatsRPCs is how many RPCs that run made, warmup and calibration
	// included.
	ClientStats *SocketStats `json:"client_stats,omitempty"`
	// ServerStats is the same for the server's socket, wherever it runs
	// (a child process reports it over its pipe); absent against a
	// remote target and for servers not over a Homa socket.
	ServerStats *SocketStats `json:"server_stats,omitempty"`
	StatsRPCs   int          `json:"stats_rpcs,omitempty"`

	buckets []workload.Bucket  // for the plot
	rtts    []time.Duration    // latency mode: every RTT, for the plot
	samples []workload.Sample  // for compareToFastest, which drops them
	base    *workload.Baseline // the unloaded RTTs of the row's run
}

// BucketResult is one size bucket of a row.
type BucketResult struct {
	MaxSize     int     `json:"max_size"`
	Fraction    float64 `json:"fraction"` // of RPCs with sizes up to MaxSize
	Count       int     `json:"count"`
	P50US       float64 `json:"p50_us"`
	P99US       float64 `json:"p99_us"`
	P999US      float64 `json:"p99_9_us"`
	Slowdown50  float64 `json:"slowdown_p50"`
	Slowdown99  float64 `json:"slowdown_p99"`
	Slowdown999 float64 `json:"slowdown_p99_9"`
	// The slowdowns over the fastest unloaded RTT of the run's protocols
	// at each size: one denominator for every row, so that rows compare
	// at a size as their RTTs do.
	Fastest50  float64 `json:"slowdown_vs_fastest_p50"`
	Fastest99  float64 `json:"slowdown_vs_fastest_p99"`
	Fastest999 float64 `json:"slowdown_vs_fastest_p99_9"`
}

func newBenchReport(cfg *Config) *Report {
	r := &Report{
		Mode: cfg.Mode, Size: cfg.Size, Warmup: cfg.Warmup, Clients: cfg.Clients, ReplySize: cfg.ReplySize,
		Seed: cfg.Seed, Go: runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH, CPUs: runtime.NumCPU(),
	}
	if cfg.Size == 0 {
		r.Workload = cfg.Dist.Name()
	}
	if n, ok := rawHomaSockets(); ok {
		r.RawHomaSockets = n
	}
	if cfg.split.clients != nil {
		r.ClientCPUs, r.ServerCPUs = cpuList(cfg.split.clients), cpuList(cfg.split.server)
	}
	switch {
	case cfg.Target != "":
		r.Target = cfg.Target
		r.Servers = ServersRemote
		r.CPUAccounting = "this process's user+system time (getrusage): the client's only, the server being remote"
	case cfg.InProcess:
		r.Host = cfg.Host.String()
		r.Servers = ServersHere
		r.CPUAccounting = "this process's user+system time (getrusage): client and server"
	default:
		r.Host = cfg.Host.String()
		r.Servers = ServersChild
		r.CPUAccounting = "both processes' user+system time: the client's (getrusage of this process) plus the server's " +
			"(getrusage of the child, which it reports over a pipe at the start and end of each phase); " +
			"udp and floor run both ends in this process"
	}
	switch cfg.Mode {
	case Latency:
		r.Count = cfg.Count
	case Throughput:
		r.Count, r.Outstanding, r.Calibrate = cfg.Count, cfg.Outstanding, cfg.Calibrate
		r.DurationS = cfg.Duration.Seconds()
	case Workload:
		r.Calibrate, r.LoadMbps, r.MaxInFlight = cfg.Calibrate, cfg.LoadMbps, cfg.MaxOutstanding
		r.OfferedRate = workload.RatePerSecond(cfg.Dist, cfg.LoadMbps)
		r.DurationS = cfg.Duration.Seconds()
	}
	return r
}

// Where the servers of a run are (Report.Servers).
const (
	ServersChild  = "child process"
	ServersHere   = "this process"
	ServersRemote = "remote"
)

// skip records and announces a protocol left out.
func (r *Report) skip(stderr io.Writer, p Protocol, reason string) {
	r.Skipped = append(r.Skipped, Skipped{Protocol: p.name, Reason: reason})
	fmt.Fprintf(stderr, "homa: %s; skipping %s (%s)\n", reason, p.name, p.desc)
}

// summarize makes the row of a measured protocol.
func summarize(p Protocol, cfg *Config, m measured, base *workload.Baseline) Result {
	lat := newLatencies(len(m.samples))
	for _, s := range m.samples {
		lat.record(s.RTT)
	}
	s := lat.summarize(0, m.elapsed)
	res := Result{
		Protocol: p.name, Description: p.desc, Count: s.Count, Failed: m.failed, Dropped: m.dropped,
		MinUS: micros(s.Min), MedianUS: micros(s.Median), P99US: micros(s.P99), P999US: micros(s.P999),
		MaxUS: micros(s.Max), RPCsPerSec: s.Rate(),
	}
	if secs := m.elapsed.Seconds(); secs > 0 {
		res.Gbps = float64(m.bytes) * 8 / secs / 1e9
	}
	if s.Count > 0 {
		res.CPUPerRPCUS = micros(m.cpu) / float64(s.Count)
	}
	if cfg.Mode == Latency {
		res.rtts = make([]time.Duration, len(m.samples))
		for i, s := range m.samples {
			res.rtts[i] = s.RTT
		}
	}
	res.samples, res.base = m.samples, base
	res.buckets = workload.Summarize(m.samples, workload.Bounds(cfg.Dist, cfg.Buckets), base)
	res.Buckets = make([]BucketResult, len(res.buckets))
	for i, b := range res.buckets {
		res.Buckets[i] = BucketResult{
			MaxSize: b.MaxSize, Fraction: b.Fraction, Count: b.Count,
			P50US: micros(b.P50), P99US: micros(b.P99), P999US: micros(b.P999),
			Slowdown50: b.Slowdown50, Slowdown99: b.Slowdown99, Slowdown999: b.Slowdown999,
		}
	}
	return res
}

// compareToFastest sets every bucket's slowdowns over the fastest
// unloaded RTT of the run's rows at each size (workload.Fastest), as
// the Linux Homa module's cluster benchmarks compute slowdowns: over one
// best-case time for every protocol. A row's own slowdowns divide by
// its own unloaded RTTs, so a transport that is faster unloaded reads a
// larger slowdown than another at the same latency.
func (r *Report) compareToFastest(cfg *Config) {
	var bases []*workload.Baseline
	for _, res := range r.Results {
		if res.base != nil {
			bases = append(bases, res.base)
		}
	}
	fastest := workload.Fastest(bases...)
	bounds := workload.Bounds(cfg.Dist, cfg.Buckets)
	for j := range r.Results {
		res := &r.Results[j]
		for i, b := range workload.Summarize(res.samples, bounds, fastest) {
			if i < len(res.Buckets) {
				res.Buckets[i].Fastest50, res.Buckets[i].Fastest99, res.Buckets[i].Fastest999 = b.Slowdown50, b.Slowdown99, b.Slowdown999
			}
		}
		res.samples = nil
	}
}

// compareToTCP sets every row's median and rate relative to its TCP
// baseline's in the same run: the gRPC stub's rows (stub-*) to
// stub-tcp's, the gRPC streams' (stream-*) to stream-tcp's, the others
// to tcp's; a row whose baseline did not run has none.
func (r *Report) compareToTCP() {
	for j := range r.Results {
		b := &r.Results[j]
		i := slices.IndexFunc(r.Results, func(t Result) bool { return t.Protocol == tcpBaseline(b.Protocol) })
		if i < 0 {
			continue
		}
		tcp := r.Results[i]
		if tcp.MedianUS > 0 {
			ratio := b.MedianUS / tcp.MedianUS
			b.MedianVsTCP = &ratio
		}
		if tcp.RPCsPerSec > 0 {
			ratio := b.RPCsPerSec / tcp.RPCsPerSec
			b.RateVsTCP = &ratio
		}
		b.RoundRatesVsTCP = roundRatios(b.RoundRates, tcp.RoundRates)
	}
}

// roundRatios is each round's rate over den's of the same round; nil
// unless both have every round.
func roundRatios(num, den []float64) []float64 {
	if len(num) == 0 || len(num) != len(den) {
		return nil
	}
	out := make([]float64, len(num))
	for k := range num {
		if den[k] > 0 {
			out[k] = num[k] / den[k]
		}
	}
	return out
}

// writeRounds prints each row's rate by round, and its ratio to its TCP
// baseline's round by round, with the median of those.
func (r *Report) writeRounds(w io.Writer) {
	fmt.Fprintln(w, "by round (RPCs/s; over the TCP baseline's of the same round):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, b := range r.Results {
		fmt.Fprintf(tw, "  %s\t%s", b.Protocol, joinFloats(b.RoundRates, "%.0f"))
		if len(b.RoundRatesVsTCP) > 0 && b.Protocol != tcpBaseline(b.Protocol) {
			fmt.Fprintf(tw, "\t%s\t(median %.2f)", joinFloats(b.RoundRatesVsTCP, "%.2f"), median(b.RoundRatesVsTCP))
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
}

// joinFloats prints vs in format, separated by spaces.
func joinFloats(vs []float64, format string) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = fmt.Sprintf(format, v)
	}
	return strings.Join(s, " ")
}

// median is the middle of vs (the mean of the two middle ones for an
// even count).
func median(vs []float64) float64 {
	s := slices.Sorted(slices.Values(vs))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// tcpBaseline is the protocol over TCP that protocol is compared with.
func tcpBaseline(protocol string) string {
	for _, family := range []string{"stub-", "stream-"} {
		if strings.HasPrefix(protocol, family) {
			return family + "tcp"
		}
	}
	return "tcp"
}

// Write prints the report as JSON or as tables.
func (r *Report) Write(w io.Writer, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	fmt.Fprintf(w, "homa bench: %s\n", r.title())
	fmt.Fprintf(w, "servers: %s; CPU µs/RPC is %s\n", r.serversLine(), r.CPUAccounting)
	if n := r.RawHomaSockets; n > 0 {
		what := fmt.Sprintf("%d raw sockets of IP protocol 146 were", n)
		if n == 1 {
			what = "1 raw socket of IP protocol 146 was"
		}
		fmt.Fprintf(w, "host: %s open before the run; the kernel gives a copy of every Homa packet that arrives over raw IP to each, which slows the raw-IP figures\n", what)
	}
	fmt.Fprintln(w)
	r.writeTable(w)
	if len(r.Results) > 0 && len(r.Results[0].RoundRates) > 1 {
		fmt.Fprintln(w)
		r.writeRounds(w)
	}
	if len(r.Layers) > 0 {
		fmt.Fprintln(w)
		r.writeLayers(w)
	}
	if r.Mode != Latency || r.Workload != "" {
		fmt.Fprintln(w)
		r.writeBuckets(w)
	}
	fmt.Fprintln(w)
	for _, b := range r.Results {
		if b.Server != "" {
			fmt.Fprintf(w, "%s: %s; server %s\n", b.Protocol, b.Description, b.Server)
		} else {
			fmt.Fprintf(w, "%s: %s\n", b.Protocol, b.Description)
		}
	}
	for _, b := range r.Results {
		if b.ClientStats != nil {
			b.ClientStats.write(w, b.Protocol, "client", b.StatsRPCs)
		}
		if b.ServerStats != nil {
			b.ServerStats.write(w, b.Protocol, "server", b.StatsRPCs)
		}
	}
	return nil
}

// title says what was measured, where, and on what.
func (r *Report) title() string {
	sizes := fmt.Sprintf("%d bytes", r.Size)
	if r.Workload != "" {
		sizes = "sizes from " + r.Workload
	}
	if r.ReplySize > 0 {
		sizes += fmt.Sprintf(" (replies of %d bytes)", r.ReplySize)
	}
	where := "on " + r.Host
	if r.Target != "" {
		where = "to " + r.Target
	}
	var what string
	switch r.Mode {
	case Latency:
		what = fmt.Sprintf("latency, %d RPCs of %s, one at a time (RPCs/s and Gbit/s over the time spent in calls), %s (after %d warmup)", r.Count, sizes, where, r.Warmup)
	case Throughput:
		what = fmt.Sprintf("throughput, %d RPCs of %s, %d clients x %d outstanding, %s (after %d warmup, %d to calibrate)",
			r.Count, sizes, r.Clients, r.Outstanding, where, r.Warmup, r.Calibrate)
	default:
		what = fmt.Sprintf("workload, %s at %g Mbit/s (%.0f RPCs/s offered) for %v, %d clients, %s (after %d warmup, %d to calibrate)",
			sizes, r.LoadMbps, r.OfferedRate, time.Duration(r.DurationS*float64(time.Second)), r.Clients, where, r.Warmup, r.Calibrate)
	}
	return fmt.Sprintf("%s; %s, %d CPUs", what, r.Go, r.CPUs)
}

// serversLine says where the servers ran.
func (r *Report) serversLine() string {
	switch r.Servers {
	case ServersChild:
		if r.ClientCPUs != "" {
			return "each in a child process (homa serve), the clients in this one; clients on CPU " + r.ClientCPUs +
				", servers on CPU " + r.ServerCPUs + " (--split-cpus)"
		}
		return "each in a child process (homa serve), the clients in this one"
	case ServersHere:
		return "in this process, with the clients (--in-process)"
	}
	return "remote, at " + r.Target
}

// protocolWidth pads names to one width, so that they read left-aligned
// in a table of right-aligned numbers.
func (r *Report) protocolWidth() int {
	width := len("protocol")
	for _, b := range r.Results {
		width = max(width, len(b.Protocol))
	}
	return width
}

func (r *Report) writeTable(w io.Writer) {
	width := r.protocolWidth()
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-*s\tmedian µs\tp99 µs\tp99.9 µs\tRPCs/s\tGbit/s\tCPU µs/RPC\tmedian/TCP\trate/TCP\t\n", width, "protocol")
	for _, b := range r.Results {
		fmt.Fprintf(tw, "%-*s\t%.1f\t%.1f\t%.1f\t%.0f\t%.3f\t%.1f\t%s\t%s\t\n", width, b.Protocol,
			b.MedianUS, b.P99US, b.P999US, b.RPCsPerSec, b.Gbps, b.CPUPerRPCUS, ratio(b.MedianVsTCP), ratio(b.RateVsTCP))
	}
	tw.Flush()
	for _, b := range r.Results {
		if b.Failed > 0 || b.Dropped > 0 {
			fmt.Fprintf(w, "%s: %d RPCs failed, %d arrivals dropped (too many in flight)\n", b.Protocol, b.Failed, b.Dropped)
		}
	}
}

func ratio(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.2f", *v)
}

// writeBuckets prints the slowdown table: RTT percentiles and slowdowns
// per request size bucket.
func (r *Report) writeBuckets(w io.Writer) {
	base := "the same run"
	if r.Mode != Latency {
		base = fmt.Sprintf("%d RPCs one at a time", r.Calibrate)
	}
	fmt.Fprintf(w, "by request size (slowdown: RTT / the protocol's own unloaded RTT of the size, from %s", base)
	fastest := len(r.Results) > 1
	if fastest {
		fmt.Fprint(w, "; over the fastest: RTT / the shortest unloaded RTT of the size of all the protocols, one denominator for every row")
	}
	fmt.Fprintln(w, "):")
	width := r.protocolWidth()
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-*s\tsize ≤\tcum. %%\tRPCs\tp50 µs\tp99 µs\tp99.9 µs\tslowdown p50\tp99\tp99.9\t", width, "protocol")
	if fastest {
		fmt.Fprint(tw, "over the fastest p50\tp99\t")
	}
	fmt.Fprintln(tw)
	for _, res := range r.Results {
		for _, b := range res.Buckets {
			fmt.Fprintf(tw, "%-*s\t%d\t%.1f\t%d\t%.1f\t%.1f\t%.1f\t%.2f\t%.2f\t%.2f\t", width, res.Protocol,
				b.MaxSize, 100*b.Fraction, b.Count, b.P50US, b.P99US, b.P999US, b.Slowdown50, b.Slowdown99, b.Slowdown999)
			if fastest {
				fmt.Fprintf(tw, "%.2f\t%.2f\t", b.Fastest50, b.Fastest99)
			}
			fmt.Fprintln(tw)
		}
	}
	tw.Flush()
}

// CheckPlot reports whether Plot could write to path, before the run:
// the format (.svg or .png) and that the file may be written.
func CheckPlot(path string) error { return benchplot.CheckPath(path) }

// Plot draws the report into path and says what it drew. In latency mode
// it draws the distribution of RTTs, one CDF per protocol (a latency run
// is its own baseline, so its median slowdown is 1 by definition);
// otherwise slowdown against message size, one series per protocol.
func (r *Report) Plot(path string) (what string, err error) {
	if r.Mode == Latency {
		series := make([]benchplot.CDF, 0, len(r.Results))
		for _, res := range r.Results {
			series = append(series, benchplot.CDF{Name: res.Protocol, RTTs: res.rtts})
		}
		title := "RTT distribution, one RPC at a time"
		if r.Workload == "" {
			title += fmt.Sprintf(", %d-byte requests", r.Size)
		} else {
			title += ", sizes of " + strings.ToUpper(r.Workload)
		}
		return "RTT CDF per protocol", benchplot.WriteCDF(path, title, series)
	}
	series := make([]benchplot.Series, 0, len(r.Results))
	for _, res := range r.Results {
		series = append(series, benchplot.Series{Name: res.Protocol, Buckets: res.buckets})
	}
	title := r.Mode
	switch {
	case r.Mode == Workload:
		title = fmt.Sprintf("%s at %g Mbit/s", strings.ToUpper(r.Workload), r.LoadMbps)
	case r.Mode == Throughput:
		title = fmt.Sprintf("throughput, %d x %d outstanding", r.Clients, r.Outstanding)
	}
	if r.Workload == "" {
		title += fmt.Sprintf(", %d-byte requests", r.Size)
	}
	return "slowdown by message size per protocol", benchplot.WriteSlowdown(path, title, series)
}

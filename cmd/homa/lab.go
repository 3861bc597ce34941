package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/homa-go/homa/internal/tools/benchplot"
	"github.com/homa-go/homa/internal/tools/workload"
	"github.com/homa-go/homa/lab"
	"github.com/homa-go/homa/sock"
)

// labProtos are the protocols "homa lab" can run, as serve and bench name
// them.
var labProtos = []string{"homa", "homa-udp", "tcp", "grpc", "erpc", "erpc-udp", "stub-homa", "stub-homa-udp", "stub-tcp"}

// labIsRoot reports whether the process runs as root, which the lab
// needs; tests replace it.
var labIsRoot = func() bool { return os.Geteuid() == 0 }

// errLabNeedsRoot is why "homa lab" does not start for other users.
var errLabNeedsRoot = errors.New("needs root: it creates network namespaces, veth links and tc queues with ip and tc (iproute2); run it as root (sudo homa lab ...)")

// labExecutable finds the program the lab runs as "homa serve" and
// "homa bench": this one. Tests replace it.
var labExecutable = os.Executable

const labSynopsis = "[--hosts N] [--rate R] [--buffer BYTES] [--mtu N] [--proto homa,tcp] [--workload w4] [--load F] [--duration D] [--plot FILE] [--json] [--keep] | --cleanup"

// labOptions are the flags of "homa lab".
type labOptions struct {
	hosts        int
	rate         lab.Rate
	rateHost1    lab.Rate
	buffer       int
	mtu          int
	protos       []string
	workload     *workload.Dist
	load         float64
	duration     time.Duration
	replySize    int
	unschedBytes int
	polling      string
	calibrate    int
	timeout      time.Duration
	seed         uint64
	port         uint
	dir          string
	plot         string
	json         bool
	keep         bool
	cleanup      bool
}

// parseLab reads the flags; it returns -1 to go on, or an exit code.
func parseLab(args []string, stderr io.Writer) (*labOptions, int) {
	fs := newFlags("lab", labSynopsis, stderr)
	o := &labOptions{rate: 1e9}
	fs.IntVar(&o.hosts, "hosts", 4, "number of hosts: h1 runs the server, h2..hN the clients")
	fs.Var(&o.rate, "rate", "downlink `rate` of every host, as tc writes it (1gbit, 100mbit)")
	fs.Var(&o.rateHost1, "rate-host1", "downlink `rate` of h1, the server, if not --rate")
	fs.IntVar(&o.buffer, "buffer", lab.DefaultBuffer, "`bytes` of buffer of each of the 8 priority queues of a switch port")
	fs.IntVar(&o.mtu, "mtu", lab.DefaultMTU, "MTU of every link in `bytes` (9000: jumbo frames, a sixth of the packets)")
	protos := fs.String("proto", "homa,tcp", "comma-separated `protocols` to measure, one after another: "+strings.Join(labProtos, ","))
	alias(fs, "protos", "proto")
	wl := fs.String("workload", "w4", "message-size `distribution` of the requests: w1..w5")
	fs.Float64Var(&o.load, "load", 0.8, "offered load: request bytes as a `fraction` of h1's downlink rate, shared by the clients")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "length of the loaded phase of each protocol")
	fs.IntVar(&o.replySize, "reply-size", 100, "response `bytes` (0: echo the request)")
	fs.IntVar(&o.unschedBytes, "unsched-bytes", 0, "Homa: `bytes` of each message sent before grants, on every host (0: the engine's default, 40000, sized for 25 Gbit/s links)")
	fs.StringVar(&o.polling, "polling", "never", "Homa: whether receivers spin, on every host: `never` (park at once: the hosts share this machine's CPUs, and a host that spins takes them from the others), adaptive (the engine's default) or always")
	fs.IntVar(&o.calibrate, "calibrate", 2000, "unloaded RPCs, one at a time, behind each protocol's slowdown baseline")
	fs.DurationVar(&o.timeout, "timeout", lab.DefaultTimeout, "a client gives up this long after its phase should have ended (calibration: after this long)")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the clients' sizes and arrivals (client hK uses seed+K)")
	fs.UintVar(&o.port, "port", 4000, "server `port` in h1")
	fs.StringVar(&o.dir, "dir", "", "keep the samples files in `DIR` (default: a temporary directory, removed)")
	fs.StringVar(&o.plot, "plot", "", "write the slowdown figure to `FILE` (.png or .svg)")
	fs.BoolVar(&o.json, "json", false, "print the report as JSON")
	fs.BoolVar(&o.keep, "keep", false, "leave the lab up when done (also when interrupted), and print how to enter it")
	fs.BoolVar(&o.cleanup, "cleanup", false, "only delete the namespaces left by earlier runs, then exit")
	code := parseFlags(fs, args, func() error {
		var err error
		if o.protos, err = parseProtos(*protos); err != nil {
			return err
		}
		if o.workload, err = workload.Named(*wl); err != nil {
			return fmt.Errorf("--workload: %w", err)
		}
		return o.check()
	})
	return o, code
}

// parseProtos reads --proto. An empty list is allowed: with --keep it
// only builds the lab.
func parseProtos(s string) ([]string, error) {
	var out []string
	for p := range strings.SplitSeq(s, ",") {
		p = strings.ToLower(strings.TrimSpace(p))
		switch {
		case p == "":
		case !slices.Contains(labProtos, p):
			return nil, fmt.Errorf("--proto: unknown protocol %q (want %s)", p, strings.Join(labProtos, ","))
		case slices.Contains(out, p):
			return nil, fmt.Errorf("--proto: %s given twice", p)
		default:
			out = append(out, p)
		}
	}
	return out, nil
}

func (o *labOptions) check() error {
	switch {
	case o.hosts < 2 || o.hosts > lab.MaxHosts:
		return fmt.Errorf("--hosts %d: want 2..%d", o.hosts, lab.MaxHosts)
	case !(o.load > 0 && o.load <= 2):
		return fmt.Errorf("--load %g: want a fraction in (0, 2]", o.load)
	case o.duration <= 0:
		return fmt.Errorf("--duration %v: must be positive", o.duration)
	case o.unschedBytes < 0 || o.unschedBytes > workload.MaxMessage:
		return fmt.Errorf("--unsched-bytes %d: want 0..%d", o.unschedBytes, workload.MaxMessage)
	case checkPolling(o.polling) != nil:
		return checkPolling(o.polling)
	case o.replySize < 0 || o.replySize > workload.MaxMessage:
		return fmt.Errorf("--reply-size %d: want 0..%d", o.replySize, workload.MaxMessage)
	case o.timeout <= 0:
		return fmt.Errorf("--timeout %v: must be positive", o.timeout)
	case o.calibrate < 1:
		return fmt.Errorf("--calibrate %d: the slowdown baseline needs at least 1 RPC", o.calibrate)
	case o.port < 1 || o.port > sock.MaxServerPort:
		return fmt.Errorf("--port %d: want 1..%d (Homa server ports)", o.port, sock.MaxServerPort)
	case len(o.protos) == 0 && !o.keep && !o.cleanup:
		return errors.New("--proto is empty: nothing to measure (add --keep to only build the lab)")
	}
	cfg := o.labConfig()
	return cfg.Check()
}

// labConfig is the lab o asks for.
func (o *labOptions) labConfig() lab.Config {
	cfg := lab.Config{Hosts: o.hosts, Link: lab.Link{Rate: o.rate, Buffer: o.buffer, MTU: o.mtu}}
	if o.rateHost1 != 0 {
		cfg.Rates = map[int]lab.Rate{1: o.rateHost1}
	}
	return cfg
}

// serverRate is the downlink rate of h1.
func (o *labOptions) serverRate() lab.Rate {
	if o.rateHost1 != 0 {
		return o.rateHost1
	}
	return o.rate
}

// loadMbps is the offered load into h1 in Mbit/s of request bytes.
func (o *labOptions) loadMbps() float64 { return o.load * o.serverRate().Mbps() }

// runLab is "homa lab": it builds a lab of network namespaces, measures
// each protocol in it, and tears it down.
func runLab(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, code := parseLab(args, stderr)
	if code >= 0 {
		return code
	}
	if !labIsRoot() {
		return fail(stderr, "lab", errLabNeedsRoot)
	}
	if o.cleanup {
		return labCleanup(stdout, stderr)
	}
	if err := lab.Available(); err != nil {
		return fail(stderr, "lab", err)
	}
	exe, err := labExecutable()
	if err != nil {
		return fail(stderr, "lab", err)
	}
	fmt.Fprintf(stderr, "lab: building %d hosts, downlinks %v, MTU %d, %d bytes per priority queue\n", o.hosts, o.rate, o.mtu, o.buffer)
	l, err := lab.New(ctx, o.labConfig())
	if err != nil {
		return fail(stderr, "lab", err)
	}
	sums, err := measureAll(ctx, l, o, exe, stderr)
	if o.keep {
		printKept(stderr, l)
	} else if cerr := l.Close(); cerr != nil {
		err = errors.Join(err, cerr)
	}
	if err != nil {
		return fail(stderr, "lab", err)
	}
	if len(sums) == 0 {
		return 0
	}
	return reportLab(stdout, stderr, o, args, sums)
}

// reportLab prints the report and draws the figure; it returns 1 if a
// protocol's run failed.
func reportLab(stdout, stderr io.Writer, o *labOptions, args []string, sums []lab.Summary) int {
	if err := writeLabReport(stdout, o, args, sums); err != nil {
		return fail(stderr, "lab", err)
	}
	if series := labSeries(sums); o.plot != "" && len(series) > 0 {
		if err := benchplot.WriteSlowdown(o.plot, labTitle(o), series); err != nil {
			return fail(stderr, "lab", err)
		}
		fmt.Fprintf(stderr, "lab: wrote %s\n", o.plot)
	}
	var failed []string
	for _, s := range sums {
		if s.Error != "" {
			failed = append(failed, s.Proto)
		}
	}
	if len(failed) > 0 {
		return fail(stderr, "lab", fmt.Errorf("%s failed (see the report)", strings.Join(failed, ", ")))
	}
	return 0
}

// labCleanup is "homa lab --cleanup".
func labCleanup(stdout, stderr io.Writer) int {
	deleted, err := lab.Cleanup()
	for _, name := range deleted {
		fmt.Fprintf(stdout, "deleted namespace %s\n", name)
	}
	if err != nil {
		return fail(stderr, "lab", err)
	}
	fmt.Fprintf(stdout, "%d namespaces deleted\n", len(deleted))
	return 0
}

// printKept says how to use a lab left up by --keep.
func printKept(w io.Writer, l *lab.Lab) {
	fmt.Fprintf(w, "lab: kept %s: hosts %s..%s at %v..%v, switch %s\n",
		l.Name, l.Hosts[0].NS, l.Hosts[len(l.Hosts)-1].NS, l.Hosts[0].Addr, l.Hosts[len(l.Hosts)-1].Addr, l.Switch)
	fmt.Fprintf(w, "lab: enter a host with:   ip netns exec %s bash\n", l.Hosts[0].NS)
	fmt.Fprintf(w, "lab: queue counters with: tc -n %s -s class show dev %s\n", l.Switch, l.Hosts[0].Port)
	fmt.Fprintf(w, "lab: remove it with:      homa lab --cleanup\n")
}

// measureAll runs every protocol of o in l, one after another, and
// summarizes each (see lab.RunAll).
func measureAll(ctx context.Context, l *lab.Lab, o *labOptions, exe string, stderr io.Writer) ([]lab.Summary, error) {
	return l.RunAll(ctx, lab.Experiment{
		Exe:          exe,
		Workload:     o.workload.Name(),
		Port:         uint16(o.port),
		ReplySize:    o.replySize,
		LinkMbps:     o.serverRate().Mbps(),
		UnschedBytes: o.unschedBytes,
		Polling:      o.polling,
		LoadMbps:     o.loadMbps(),
		Duration:     o.duration,
		Calibrate:    o.calibrate,
		Timeout:      o.timeout,
		Seed:         o.seed,
		Dir:          o.dir,
		Log:          stderr,
	}, o.protos)
}

// labReport is the JSON form of the report.
type labReport struct {
	Command     string           `json:"command"`
	Hosts       int              `json:"hosts"`
	Rate        string           `json:"rate"`
	ServerRate  string           `json:"server_rate"`
	Buffer      int              `json:"buffer_bytes"`
	MTU         int              `json:"mtu"`
	Workload    string           `json:"workload"`
	Load        float64          `json:"load"`
	LoadMbps    float64          `json:"load_mbps"`
	Duration    string           `json:"duration"`
	ReplySize   int              `json:"reply_size"`
	Polling     string           `json:"polling"`
	Results     []lab.Summary    `json:"results"`
	Comparisons []lab.Comparison `json:"comparisons,omitempty"`
}

// writeLabReport prints the results, as tables or JSON.
func writeLabReport(w io.Writer, o *labOptions, args []string, sums []lab.Summary) error {
	r := labReport{
		Command:     "homa lab " + strings.Join(args, " "),
		Hosts:       o.hosts,
		Rate:        o.rate.String(),
		ServerRate:  o.serverRate().String(),
		Buffer:      o.buffer,
		MTU:         o.mtu,
		Workload:    o.workload.Name(),
		Load:        o.load,
		LoadMbps:    o.loadMbps(),
		Duration:    o.duration.String(),
		ReplySize:   o.replySize,
		Polling:     o.polling,
		Results:     sums,
		Comparisons: lab.Comparisons(sums),
	}
	if o.json {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	fmt.Fprintf(w, "%s\n%d hosts, h1 downlink %s (others %s), MTU %d, %d B per priority queue; workload %s at load %g: %.0f Mbit/s of requests into h1 from h2..h%d for %s; Homa polling %s\n",
		r.Command, r.Hosts, r.ServerRate, r.Rate, r.MTU, r.Buffer, r.Workload, r.Load, r.LoadMbps, r.Hosts, r.Duration, r.Polling)
	for _, s := range sums {
		if s.Error != "" {
			fmt.Fprintf(w, "\n%s: FAILED: %s\n", s.Proto, s.Error)
			continue
		}
		fmt.Fprintf(w, "\n%s: %d calibration RPCs, %d RPCs under load, %.1f of %.1f Mbit/s; packets dropped: %d at h1's downlink, %d by h1's sockets\n",
			s.Proto, s.Calibrated, s.Completed, s.AchievedMbps, s.OfferedMbps, s.QueueDrops, s.SocketDrops)
		writeBuckets(w, s)
	}
	fmt.Fprintln(w)
	for _, c := range r.Comparisons {
		fmt.Fprintln(w, headline(c, sums))
	}
	return nil
}

// writeBuckets prints one protocol's table.
func writeBuckets(w io.Writer, s lab.Summary) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "size <=\tcum %\tRPCs\tp50 µs\tp99 µs\tslowdown p50\tp99\t")
	row := func(label string, b workload.Bucket, frac string) {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.0f\t%.0f\t%.2f\t%.2f\t\n", label, frac, b.Count,
			us(b.P50), us(b.P99), b.Slowdown50, b.Slowdown99)
	}
	for _, b := range s.Buckets {
		row(fmt.Sprint(b.MaxSize), b, fmt.Sprintf("%.1f", 100*b.Fraction))
	}
	row(fmt.Sprintf("shortest %.0f%%: %d", 100*lab.ShortFraction, s.Short.MaxSize), s.Short, "")
	tw.Flush()
}

// us is d in microseconds.
func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// headline is the one-line comparison of the shortest messages.
func headline(c lab.Comparison, sums []lab.Summary) string {
	var a, b lab.Summary
	for _, s := range sums {
		switch s.Proto {
		case c.First:
			a = s
		case c.Second:
			b = s
		}
	}
	return fmt.Sprintf("shortest %.0f%% (<= %d B): p50/p99 slowdown, %s %.2f/%.2f vs %s %.2f/%.2f: %s's %.1fx/%.1fx lower (RTT p50/p99 %.0f/%.0f µs vs %.0f/%.0f µs: %.1fx/%.1fx)",
		100*lab.ShortFraction, c.MaxSize, a.Proto, a.Short.Slowdown50, a.Short.Slowdown99, b.Proto, b.Short.Slowdown50, b.Short.Slowdown99,
		a.Proto, c.Slowdown50, c.Slowdown99, us(a.Short.P50), us(a.Short.P99), us(b.Short.P50), us(b.Short.P99), c.RTT50, c.RTT99)
}

// labTitle is the figure's title.
func labTitle(o *labOptions) string {
	t := fmt.Sprintf("%s at %.0f%% load, %d hosts, %v downlink", strings.ToUpper(o.workload.Name()), 100*o.load, o.hosts, o.serverRate())
	if o.mtu != lab.DefaultMTU {
		t += fmt.Sprintf(", MTU %d", o.mtu)
	}
	return t
}

// labSeries turns the summaries into the figure's lines.
func labSeries(sums []lab.Summary) []benchplot.Series {
	var out []benchplot.Series
	for _, s := range sums {
		if s.Error == "" {
			out = append(out, benchplot.Series{Name: s.Proto, Buckets: s.Buckets})
		}
	}
	return out
}

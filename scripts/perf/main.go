// Command perf measures the figures of docs/performance.md in one go:
// the data path (1 MB messages, 100-byte latency, rate with many RPCs
// outstanding, CPU per RPC) and the RPC layers (erpc against bare Homa,
// the gRPC stub over Homa against the same stub over gRPC-go/TCP). Each
// measurement is one "homa bench" run of several protocols, one after the
// other, with every server in a child process, so that the protocols of
// a measurement, and the ratios between them, see the same machine. The
// whole plan runs three times, interleaved, and each figure is the best
// of the three, with the spread. It prints a Markdown table, and writes
// it to a file with --out.
//
//	go run ./scripts/perf                       # about three minutes on two cores
//	go run ./scripts/perf --out perf.md --note "quiet machine"
//	go run ./scripts/perf --repeat 1 --lat-count 2000 --rate-count 20000 ...   # a quick look
//	go run ./scripts/perf --rounds 4           # each bench run's protocols in turn, four rounds
//
// Raw IP needs root (or CAP_NET_RAW); without it bench skips the raw
// protocols and their rows read "-".
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/homa-go/homa/internal/tools/homabin"
)

// options are the command's flags.
type options struct {
	homa      string // the homa binary; "" builds ./cmd/homa
	repeat    int
	rounds    int // of each homa bench run (--rounds), 1 for none
	mbCount   int
	latCount  int
	rateCount int
	layerRate int
	stubCount int
	clients   int // clients of the erpc comparison (one Rpc each)
	timeout   time.Duration
	out       string
	note      string
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "perf: %v\n", err)
		os.Exit(1)
	}
}

// run parses args, measures and prints the table.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parse(args, stderr)
	if err != nil {
		return err
	}
	homa := o.homa
	if homa == "" {
		bin, remove, err := homabin.Build(ctx, stderr)
		if err != nil {
			return err
		}
		defer remove()
		homa = bin
	}
	plan := newPlan(o)
	started := time.Now()
	runs, err := measure(ctx, homa, plan, o, stderr)
	if err != nil {
		return err
	}
	var b bytes.Buffer
	writeTable(&b, plan, runs, header(o, started, time.Since(started)))
	if _, err := stdout.Write(b.Bytes()); err != nil {
		return err
	}
	if o.out != "" {
		return os.WriteFile(o.out, b.Bytes(), 0o644)
	}
	return nil
}

func parse(args []string, stderr io.Writer) (*options, error) {
	fs := flag.NewFlagSet("perf", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &options{}
	fs.StringVar(&o.homa, "homa", "", "the homa `binary` to measure (default: go build ./cmd/homa)")
	fs.IntVar(&o.repeat, "repeat", 3, "runs of the whole plan; each figure is the best of them")
	fs.IntVar(&o.rounds, "rounds", 1, "rounds of each homa bench run (homa bench --rounds): its protocols measured in turn, round by round")
	fs.IntVar(&o.mbCount, "mb-count", 300, "1 MB messages per protocol, one at a time")
	fs.IntVar(&o.latCount, "lat-count", 20000, "100-byte RPCs per protocol, one at a time")
	fs.IntVar(&o.rateCount, "rate-count", 200000, "100-byte RPCs per protocol, 4 clients x 32 outstanding")
	fs.IntVar(&o.layerRate, "layer-count", 100000, "32-byte RPCs per protocol of the erpc comparison, --clients x 32 outstanding")
	fs.IntVar(&o.stubCount, "stub-count", 20000, "32-byte calls per protocol of the stub comparison, one at a time")
	fs.IntVar(&o.clients, "clients", runtime.NumCPU(), "clients of the erpc comparison: one Rpc (and one bare Homa socket) per core")
	fs.DurationVar(&o.timeout, "timeout", 3*time.Minute, "bound on each homa bench run")
	fs.StringVar(&o.out, "out", "", "also write the table to `FILE`")
	fs.StringVar(&o.note, "note", "", "a note on the machine for the table's header (\"shared\", \"quiet\")")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	for name, v := range map[string]int{"repeat": o.repeat, "rounds": o.rounds, "mb-count": o.mbCount, "lat-count": o.latCount,
		"rate-count": o.rateCount, "layer-count": o.layerRate, "stub-count": o.stubCount, "clients": o.clients} {
		if v < 1 {
			return nil, fmt.Errorf("--%s %d: must be at least 1", name, v)
		}
	}
	if o.timeout <= 0 {
		return nil, fmt.Errorf("--timeout %v: must be positive", o.timeout)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return o, nil
}

// A measurement is one homa bench run and the figures read from it.
type measurement struct {
	title   string
	args    []string // of homa bench, without --json
	figures []figure
}

// A figure is one row of the table: a metric of a protocol, or the ratio
// of a metric of two protocols of the same run.
type figure struct {
	proto, label string
	metric       metric
	den          string // for a ratio: the protocol below the line
}

// metric is what a figure reads from a bench row.
type metric struct {
	name   string
	higher bool // higher is better
	value  func(r result) float64
}

var (
	gbps   = metric{"Gbit/s", true, func(r result) float64 { return r.Gbps }}
	median = metric{"median µs", false, func(r result) float64 { return r.MedianUS }}
	p99    = metric{"p99 µs", false, func(r result) float64 { return r.P99US }}
	rate   = metric{"RPCs/s", true, func(r result) float64 { return r.RPCsPerSec }}
	cpu    = metric{"CPU µs/RPC (both processes)", false, func(r result) float64 { return r.CPUPerRPCUS }}
)

// newPlan lists the measurements, with the counts of o.
func newPlan(o *options) []measurement {
	n := strconv.Itoa
	return []measurement{
		{
			title: "1 MB messages, one at a time",
			args:  []string{"--size", "1000000", "--count", n(o.mbCount), "--proto", "homa,homa-udp,tcp,floor"},
			figures: []figure{
				{proto: "homa", label: "homa (raw IP)", metric: gbps},
				{proto: "homa-udp", label: "homa-udp", metric: gbps},
				{proto: "tcp", label: "Go TCP", metric: gbps},
				{proto: "floor", label: "raw-socket floor (one process)", metric: gbps},
				{proto: "homa", label: "homa (raw IP)", metric: median},
				{proto: "tcp", label: "Go TCP", metric: median},
				{proto: "floor", label: "raw-socket floor (one process)", metric: median},
			},
		},
		{
			title: "100 B latency, one at a time",
			args:  []string{"--size", "100", "--count", n(o.latCount), "--proto", "homa,homa-udp,tcp,floor"},
			figures: []figure{
				{proto: "homa", label: "homa (raw IP)", metric: median},
				{proto: "homa", label: "homa (raw IP)", metric: p99},
				{proto: "homa-udp", label: "homa-udp", metric: median},
				{proto: "homa-udp", label: "homa-udp", metric: p99},
				{proto: "tcp", label: "Go TCP", metric: median},
				{proto: "tcp", label: "Go TCP", metric: p99},
				{proto: "floor", label: "raw-socket floor (one process)", metric: median},
				{proto: "floor", label: "raw-socket floor (one process)", metric: p99},
				{proto: "homa", label: "homa (raw IP)", metric: cpu},
				{proto: "tcp", label: "Go TCP", metric: cpu},
			},
		},
		{
			title: "100 B, 4 clients x 32 outstanding",
			args:  []string{"--mode", "throughput", "--size", "100", "--count", n(o.rateCount), "--proto", "homa,homa-udp,tcp,grpc,floor"},
			figures: []figure{
				{proto: "homa", label: "homa (raw IP)", metric: rate},
				{proto: "homa-udp", label: "homa-udp", metric: rate},
				{proto: "tcp", label: "Go TCP", metric: rate},
				{proto: "grpc", label: "gRPC-go (bytes codec)", metric: rate},
				{proto: "floor", label: "raw-socket floor (one process, 64 packets per system call)", metric: rate},
				{proto: "homa", den: "floor", label: "homa (raw IP) / floor", metric: rate},
				{proto: "homa", label: "homa (raw IP)", metric: cpu},
				{proto: "tcp", label: "Go TCP", metric: cpu},
				{proto: "floor", label: "raw-socket floor (one process, 64 packets per system call)", metric: cpu},
			},
		},
		{
			title: fmt.Sprintf("RPC layers: 32 B, %d clients x 32 outstanding", o.clients),
			args: []string{"--mode", "throughput", "--size", "32", "--count", n(o.layerRate), "--clients", n(o.clients),
				"--proto", "homa,erpc,homa-udp,erpc-udp"},
			figures: []figure{
				{proto: "homa", label: "homa (raw IP)", metric: rate},
				{proto: "erpc", label: "erpc (raw IP)", metric: rate},
				{proto: "erpc", den: "homa", label: "erpc / homa (goal >= 0.85)", metric: rate},
				{proto: "homa-udp", label: "homa-udp", metric: rate},
				{proto: "erpc-udp", label: "erpc-udp", metric: rate},
				{proto: "erpc-udp", den: "homa-udp", label: "erpc-udp / homa-udp (goal >= 0.85)", metric: rate},
			},
		},
		{
			title: "RPC layers: the gRPC stub, 32 B, one call at a time",
			args:  []string{"--size", "32", "--count", n(o.stubCount), "--proto", "stub-homa,stub-homa-udp,stub-tcp"},
			figures: []figure{
				{proto: "stub-homa", label: "stub over Homa (raw IP)", metric: median},
				{proto: "stub-homa-udp", label: "stub over Homa (UDP)", metric: median},
				{proto: "stub-tcp", label: "stub over gRPC-go/TCP", metric: median},
				{proto: "stub-homa", label: "stub over Homa (raw IP)", metric: p99},
				{proto: "stub-tcp", label: "stub over gRPC-go/TCP", metric: p99},
				{proto: "stub-tcp", den: "stub-homa", label: "gRPC-go/TCP / Homa (raw IP) (goal >= 2)", metric: median},
				{proto: "stub-tcp", den: "stub-homa-udp", label: "gRPC-go/TCP / Homa (UDP) (goal >= 2)", metric: median},
			},
		},
	}
}

// report is what perf reads of bench's JSON report.
type report struct {
	Servers string   `json:"servers"`
	Results []result `json:"results"`
	Skipped []struct {
		Protocol string `json:"protocol"`
		Reason   string `json:"reason"`
	} `json:"skipped"`
}

type result struct {
	Protocol    string  `json:"protocol"`
	MedianUS    float64 `json:"median_us"`
	P99US       float64 `json:"p99_us"`
	RPCsPerSec  float64 `json:"rpcs_per_sec"`
	Gbps        float64 `json:"gbps"`
	CPUPerRPCUS float64 `json:"cpu_us_per_rpc"`
	Failed      int     `json:"failed"`
}

// row finds a protocol's row.
func (r *report) row(proto string) (result, bool) {
	for _, x := range r.Results {
		if x.Protocol == proto {
			return x, true
		}
	}
	return result{}, false
}

// measure runs the plan o.repeat times, interleaved, and returns the
// reports: runs[i][j] is measurement j of repetition i.
func measure(ctx context.Context, homa string, plan []measurement, o *options, stderr io.Writer) ([][]*report, error) {
	runs := make([][]*report, o.repeat)
	for i := range runs {
		for _, m := range plan {
			t0 := time.Now()
			args := m.args
			if o.rounds > 1 {
				args = append(slices.Clip(args), "--rounds", strconv.Itoa(o.rounds))
			}
			rep, err := bench(ctx, homa, args, o.timeout, stderr)
			if err != nil {
				return nil, fmt.Errorf("%s (run %d of %d): %w", m.title, i+1, o.repeat, err)
			}
			fmt.Fprintf(stderr, "perf: run %d of %d: %s: %.1fs\n", i+1, o.repeat, m.title, time.Since(t0).Seconds())
			runs[i] = append(runs[i], rep)
		}
	}
	return runs, nil
}

// bench runs "homa bench --json args" and reads its report; what bench
// says on stderr (protocols skipped) is passed on.
func bench(ctx context.Context, homa string, args []string, timeout time.Duration, stderr io.Writer) (*report, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	full := append([]string{"bench", "--json", "--timeout", timeout.String()}, args...)
	cmd := exec.CommandContext(ctx, homa, full...)
	var out, errOut bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = io.MultiWriter(&errOut, stderr)
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("homa %s: %w: %s", strings.Join(full, " "), err, strings.TrimSpace(errOut.String()))
	}
	var rep report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		return nil, fmt.Errorf("homa %s: reading its report: %w", strings.Join(full, " "), err)
	}
	return &rep, nil
}

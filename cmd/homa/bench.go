package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/homa-go/homa/sock"
)

// protocol is one row of the bench table.
type protocol struct {
	name string // the table's label and --vs's name
	desc string
	// open starts an echo server on host (a loopback address) and
	// returns a client for it; closing the client stops the server.
	open func(ctx context.Context, host netip.Addr) (pinger, error)
}

// homaProtocol is the row of Homa over transport t.
func homaProtocol(name string, t sock.Transport) protocol {
	return protocol{
		name: name,
		desc: "Homa over " + transportName(t) + ", engine defaults",
		open: func(ctx context.Context, host netip.Addr) (pinger, error) {
			c, err := homaLoopback(ctx, host, t)
			if err != nil {
				return nil, err
			}
			return c, nil
		},
	}
}

// benchResult is one row of the report, as JSON has it.
type benchResult struct {
	Protocol    string   `json:"protocol"`
	Description string   `json:"description"`
	Count       int      `json:"count"`
	MinUS       float64  `json:"min_us"`
	MedianUS    float64  `json:"median_us"`
	P99US       float64  `json:"p99_us"`
	P999US      float64  `json:"p99_9_us"`
	MaxUS       float64  `json:"max_us"`
	RPCsPerSec  float64  `json:"rpcs_per_sec"`
	MedianVsTCP *float64 `json:"median_vs_tcp,omitempty"` // absent without a tcp row
}

// benchReport is the whole report.
type benchReport struct {
	Size    int           `json:"size"`
	Count   int           `json:"count"`
	Warmup  int           `json:"warmup"`
	Host    string        `json:"host"`
	Go      string        `json:"go"`
	CPUs    int           `json:"cpus"`
	Results []benchResult `json:"results"`
}

// runBench is "homa bench": round-trip latency of Homa over raw IP and over
// UDP, and of the baselines named by --vs, measured one after another on
// loopback in this process.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("bench", "[--vs tcp,udp] [--size N] [--count N] [--warmup N] [--timeout D] [--addr-family 4|6] [--json]", stderr)
	vs := fs.String("vs", "tcp,udp", "comma-separated `baselines` to compare with: "+baselineNames())
	family := fs.Int("addr-family", 4, "IP version of the loopback address: 4 or 6")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	var load loadFlags
	load.register(fs, 10000)
	var protos []protocol
	check := func() error {
		if *family != 4 && *family != 6 {
			return fmt.Errorf("--addr-family %d: must be 4 or 6", *family)
		}
		var err error
		protos, err = selectProtocols(*vs)
		return errors.Join(err, load.check())
	}
	if code := parseFlags(fs, args, check); code >= 0 {
		return code
	}
	host := netip.IPv6Loopback()
	if *family == 4 {
		host = netip.MustParseAddr("127.0.0.1")
	}
	rep := benchReport{Size: load.size, Count: load.count, Warmup: load.warmup, Host: host.String(),
		Go: runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH, CPUs: runtime.NumCPU()}
	for _, p := range protos {
		s, err := benchOne(ctx, p, host, load)
		if errors.Is(err, sock.ErrPermission) {
			fmt.Fprintf(stderr, "homa: %s; skipping %s (%s)\n", noRaw, p.name, p.desc)
			continue
		}
		if err != nil {
			return fail(stderr, "bench", fmt.Errorf("%s: %w", p.name, err))
		}
		rep.Results = append(rep.Results, benchResult{
			Protocol: p.name, Description: p.desc, Count: s.Count,
			MinUS: micros(s.Min), MedianUS: micros(s.Median), P99US: micros(s.P99),
			P999US: micros(s.P999), MaxUS: micros(s.Max), RPCsPerSec: s.rate(),
		})
	}
	rep.compareToTCP()
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return fail(stderr, "bench", err)
		}
		return 0
	}
	rep.writeTable(stdout)
	return 0
}

// benchOne measures one protocol with a fresh server and client.
func benchOne(ctx context.Context, p protocol, host netip.Addr, load loadFlags) (summary, error) {
	c, err := p.open(ctx, host)
	if err != nil {
		return summary{}, err
	}
	s, err := measure(ctx, c, load)
	return s, errors.Join(err, c.close())
}

// selectProtocols returns Homa over raw IP and over UDP, then the
// baselines listed in vs.
func selectProtocols(vs string) ([]protocol, error) {
	protos := []protocol{homaProtocol("homa", sock.Raw), homaProtocol("homa-udp", sock.UDP)}
	for name := range strings.SplitSeq(vs, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		i := slices.IndexFunc(baselines, func(p protocol) bool { return p.name == name })
		if i < 0 {
			return nil, fmt.Errorf("--vs: unknown baseline %q (have %s)", name, baselineNames())
		}
		if !slices.ContainsFunc(protos, func(p protocol) bool { return p.name == name }) {
			protos = append(protos, baselines[i])
		}
	}
	return protos, nil
}

func baselineNames() string {
	names := make([]string, len(baselines))
	for i, p := range baselines {
		names[i] = p.name
	}
	return strings.Join(names, ",")
}

// compareToTCP sets every row's median relative to the tcp row's.
func (r *benchReport) compareToTCP() {
	i := slices.IndexFunc(r.Results, func(b benchResult) bool { return b.Protocol == "tcp" })
	if i < 0 || r.Results[i].MedianUS <= 0 {
		return
	}
	tcp := r.Results[i].MedianUS
	for j := range r.Results {
		ratio := r.Results[j].MedianUS / tcp
		r.Results[j].MedianVsTCP = &ratio
	}
}

func (r *benchReport) writeTable(w io.Writer) {
	fmt.Fprintf(w, "homa bench: %d round trips of %d bytes each, one at a time, on %s (after %d warmup); %s, %d CPUs\n\n",
		r.Count, r.Size, r.Host, r.Warmup, r.Go, r.CPUs)
	// Names are padded to one width so that they read left-aligned in a
	// table of right-aligned numbers.
	width := len("protocol")
	for _, b := range r.Results {
		width = max(width, len(b.Protocol))
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-*s\tmedian µs\tp99 µs\tp99.9 µs\tRPCs/s\tmedian/TCP\t\n", width, "protocol")
	for _, b := range r.Results {
		ratio := "-"
		if b.MedianVsTCP != nil {
			ratio = fmt.Sprintf("%.2f", *b.MedianVsTCP)
		}
		fmt.Fprintf(tw, "%-*s\t%.1f\t%.1f\t%.1f\t%.0f\t%s\t\n", width, b.Protocol, b.MedianUS, b.P99US, b.P999US, b.RPCsPerSec, ratio)
	}
	tw.Flush()
	fmt.Fprintln(w)
	for _, b := range r.Results {
		fmt.Fprintf(w, "%s: %s\n", b.Protocol, b.Description)
	}
}

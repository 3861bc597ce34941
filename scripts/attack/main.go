// Command attack forges Homa packets from raw sockets against a real
// "homa serve" process on loopback and checks that the server stays
// within its bounds, measuring its memory as the OS sees it (VmRSS and
// VmHWM from /proc) and reading its Prometheus metrics:
//
//	a. claims: forged first DATA packets from one source, each claiming
//	   a 1,000,000-byte message and carrying 1,400 bytes of it (2,000
//	   and 10,000 of them): resident memory may grow by less than
//	   256 MiB and receive memory stays within the host's 16 MiB share;
//	b. sources: claims from many forged sources while a real client
//	   makes 100-byte RPCs: every RPC succeeds;
//	c. resend: a forged client receives a 1 MB response without
//	   acknowledging it, then sends 20 RESENDs for all of it within
//	   100 ms: the server sends back at most 1.1 copies;
//	d. peers: one claim from each of 50,000 sources (more than the peer
//	   table's 16,384): the server evicts peers, and every call of a real
//	   client from a new address is answered.
//
// Forged sources are inside 127.64.0.0/10, which the kernel delivers on
// the loopback device; nothing leaves the machine. Each scenario has its
// own server process, stopped at its end. The command prints a Markdown
// table, a row per scenario with the bound it checks, and exits 1 if
// any fails. It needs root (raw sockets that write their own IP header).
//
//	go run ./scripts/attack
//	go run ./scripts/attack --homa ./homa --claims 500 --peers 17000   # a quick look
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/homa-go/homa/internal/tools/homabin"
)

// options are the command's flags.
type options struct {
	homa      string // the homa binary; "" builds ./cmd/homa
	run       string // the scenarios to run, by letter
	claims    []int  // flood sizes of scenario a
	sources   int
	perSource int
	peers     int
	rpcs      int // real RPCs before a flood (b) and after it (d)
	rate      int // forged packets per second; 0 unpaced
	after     time.Duration
	timeout   time.Duration
}

// exitNotRoot is the exit status without the privilege to forge packets.
const exitNotRoot = 2

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run parses args, runs the scenarios, prints the table and returns the
// exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "attack: %v\n", err)
		return 2
	}
	if err := canForge(); errors.Is(err, errNoRawIP) {
		fmt.Fprintf(stderr, "attack: %v\n", err)
		return exitNotRoot
	} else if err != nil {
		fmt.Fprintf(stderr, "attack: %v\n", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	if o.homa == "" {
		bin, remove, err := homabin.Build(ctx, stderr)
		if err != nil {
			fmt.Fprintf(stderr, "attack: %v\n", err)
			return 1
		}
		defer remove()
		o.homa = bin
	}
	results := scenarios(ctx, o, stderr)
	writeTable(stdout, o, results)
	for _, r := range results {
		if !r.pass {
			return 1
		}
	}
	return 0
}

func parse(args []string, stderr io.Writer) (*options, error) {
	fs := flag.NewFlagSet("attack", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &options{}
	claims := fs.String("claims", "2000,10000", "scenario a: `N,...` forged 1 MB claims from one source, a run per N")
	fs.StringVar(&o.run, "run", "abcd", "the `scenarios` to run, by letter")
	fs.StringVar(&o.homa, "homa", "", "the homa `binary` to attack (default: go build ./cmd/homa into a temporary directory)")
	fs.IntVar(&o.sources, "sources", 1000, "scenario b: forged sources")
	fs.IntVar(&o.perSource, "per-source", 10, "scenario b: claims per source")
	fs.IntVar(&o.peers, "peers", 50000, "scenario d: forged sources, one claim each (16,385 to 65,534: more than the peer table)")
	fs.IntVar(&o.rpcs, "rpcs", 200, "real 100-byte RPCs before the flood (b) and after it (d)")
	fs.IntVar(&o.rate, "rate", 20000, "forged packets per second (0: as fast as the socket takes them)")
	fs.DurationVar(&o.after, "after", 5*time.Second, "scenario a: how long after the flood to read RSS again")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Minute, "bound on the whole run")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if strings.Trim(o.run, "abcd") != "" || o.run == "" {
		return nil, fmt.Errorf("--run %q: letters of the scenarios a, b, c, d", o.run)
	}
	for _, f := range strings.Split(*claims, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 1_000_000 {
			return nil, fmt.Errorf("--claims %q: want counts 1..1000000, comma-separated", *claims)
		}
		o.claims = append(o.claims, n)
	}
	for name, v := range map[string]int{"sources": o.sources, "per-source": o.perSource, "peers": o.peers, "rpcs": o.rpcs} {
		if v < 1 {
			return nil, fmt.Errorf("--%s %d: must be at least 1", name, v)
		}
	}
	switch {
	case o.sources > 0xfffe || o.peers > 0xfffe:
		return nil, fmt.Errorf("--sources and --peers: at most %d (one /16 of forged addresses)", 0xfffe)
	case o.peers <= peerTable:
		return nil, fmt.Errorf("--peers %d: more than the peer table's %d, or nothing is evicted", o.peers, peerTable)
	case o.perSource > 1_000_000:
		return nil, fmt.Errorf("--per-source %d: at most 1000000", o.perSource)
	case o.rate < 0:
		return nil, fmt.Errorf("--rate %d: must not be negative", o.rate)
	case o.after < 0 || o.timeout <= 0:
		return nil, errors.New("--after must not be negative and --timeout must be positive")
	}
	return o, nil
}

// result is one scenario's row.
type result struct {
	name     string
	measured string
	bound    string
	pass     bool
	// figures are the numbers the row was judged on, for tests.
	figures map[string]float64
}

// failed marks the scenario failed by err.
func (r result) failed(err error) result {
	r.measured = "error: " + err.Error()
	r.pass = false
	return r
}

// scenarios runs every scenario, one after the other, saying each on
// stderr as it starts.
func scenarios(ctx context.Context, o *options, stderr io.Writer) []result {
	var runs []func() result
	if strings.Contains(o.run, "a") {
		for _, n := range o.claims {
			runs = append(runs, func() result { return claims(ctx, o, n) })
		}
	}
	for _, s := range []struct {
		letter string
		run    func(context.Context, *options) result
	}{{"b", sources}, {"c", resend}, {"d", peers}} {
		if strings.Contains(o.run, s.letter) {
			runs = append(runs, func() result { return s.run(ctx, o) })
		}
	}
	var results []result
	for _, f := range runs {
		r := f()
		fmt.Fprintf(stderr, "attack: %s: %s\n", r.name, verdict(r.pass))
		results = append(results, r)
	}
	return results
}

func verdict(pass bool) string {
	if pass {
		return "PASS"
	}
	return "FAIL"
}

// writeTable prints the results as a Markdown table, after a line that
// says what was run where.
func writeTable(w io.Writer, o *options, results []result) {
	fmt.Fprintf(w, "%s, %d CPUs, %s/%s; forged packets at %s\n\n", time.Now().Format("2006-01-02"),
		runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, rateString(o.rate))
	fmt.Fprintln(w, "| scenario | measured | bound | result |")
	fmt.Fprintln(w, "|---|---|---|---|")
	cell := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
	for _, r := range results {
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", cell(r.name), cell(r.measured), cell(r.bound), verdict(r.pass))
	}
}

func rateString(rate int) string {
	if rate <= 0 {
		return "full speed"
	}
	return fmt.Sprintf("%d/s", rate)
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/homa-go/homa/bench"
	"github.com/homa-go/homa/internal/tools/workload"
)

func TestBenchBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--mode", "bogus"},
		{"--proto", "quic"},
		{"--proto", ","},
		{"--proto", "tcp", "--vs", "udp"},
		{"--size", "0"},
		{"--size", "8388609"}, // beyond every protocol, erpc's large messages too
		{"--size", "100", "--workload", "w1"},
		{"--workload", "w9"},
		{"--count", "0"},
		{"--clients", "2"},     // latency mode
		{"--outstanding", "2"}, // latency mode
		{"--load-mbps", "10"},  // latency mode
		{"--mode", "throughput", "--clients", "0"},
		{"--mode", "throughput", "--outstanding", "-3"},
		{"--mode", "throughput", "--proto", "udp"},
		{"--mode", "workload", "--load-mbps", "1", "--vs", "floor"},
		{"--mode", "throughput", "--load-mbps", "5"},
		{"--mode", "workload"}, // no load
		{"--mode", "workload", "--load-mbps", "-1", "--duration", "0"},
		{"--mode", "workload", "--load-mbps", "1", "--outstanding", "4"},
		{"--mode", "workload", "--load-mbps", "1", "--max-outstanding", "0"},
		{"--mode", "workload", "--load-mbps", "1", "--duration", "-2s"},
		{"--mode", "throughput", "--calibrate", "-1"},
		{"--calibrate", "10"}, // latency mode
		{"--reply-size", "-1"},
		{"--reply-size", "1000001"},
		{"--conns", "0"},
		{"--buckets", "0"},
		{"--plot", "out.pdf"},
		{"--progress-interval", "0s"},
		{"--target", "127.0.0.1:4000", "--proto", "homa,tcp"}, // two
		{"--target", "127.0.0.1:40000"},                       // a client port
		{"--target", "127.0.0.1:4000", "--proto", "floor"},    // no remote server
		{"--target", "127.0.0.1", "--proto", "tcp"},           // no port
		{"--target", "127.0.0.1:4000", "--proto", "tcp", "--in-process"},
		{"--split-cpus", "--in-process"},
		{"--split-cpus", "--target", "127.0.0.1:4000", "--proto", "tcp"},
		{"--proto", "layers,quic"},
		{"--json", "extra"},
	} {
		code, _, errOut := runHoma(context.Background(), append([]string{"bench"}, args...)...)
		checkUsageError(t, "bench", args, code, errOut, "")
	}
}

// benchJSON runs bench with --json and returns its report.
func benchJSON(t *testing.T, args ...string) (*bench.Report, string) {
	t.Helper()
	code, out, errOut := runHoma(context.Background(), append([]string{"bench", "--json"}, args...)...)
	if code != 0 {
		t.Fatalf("bench %v: exit %d, stderr:\n%s", args, code, errOut)
	}
	var rep bench.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v in:\n%s", err, out)
	}
	return &rep, errOut
}

// checkRows checks that rep has a plausible row for each of protos that
// may run here, in order, each with count RPCs (count < 0: at least
// one) and buckets whose counts add up.
func checkRows(t *testing.T, rep *bench.Report, protos []string, count int) {
	t.Helper()
	if !rawPermitted(t) {
		protos = slices.DeleteFunc(slices.Clone(protos), func(name string) bool {
			p, ok := bench.LookupProtocol(name)
			if !ok {
				t.Fatalf("no protocol %q", name)
			}
			return p.Raw()
		})
	}
	var got []string
	for _, r := range rep.Results {
		got = append(got, r.Protocol)
		if count >= 0 && r.Count != count || r.Count < 1 || r.Failed != 0 {
			t.Errorf("%s: %d RPCs, %d failed; want %d and 0", r.Protocol, r.Count, r.Failed, count)
		}
		if r.MedianUS <= 0 || r.P999US < r.MedianUS || r.RPCsPerSec <= 0 || r.Gbps <= 0 {
			t.Errorf("implausible row %+v", r)
		}
		n := 0
		for _, b := range r.Buckets {
			n += b.Count
		}
		if len(r.Buckets) == 0 || n != r.Count || r.Buckets[len(r.Buckets)-1].Fraction != 1 {
			t.Errorf("%s: buckets %+v do not hold its %d RPCs", r.Protocol, r.Buckets, r.Count)
		}
	}
	if !slices.Equal(got, protos) {
		t.Errorf("rows %v, want %v", got, protos)
	}
}

func TestBenchLatencyAll(t *testing.T) {
	rep, _ := benchJSON(t, "--count", "50", "--warmup", "5")
	checkRows(t, rep, []string{"homa", "homa-udp", "tcp", "grpc", "udp", "floor"}, 50)
	if rep.Mode != bench.Latency || rep.Size != 100 || rep.Count != 50 {
		t.Errorf("report header %+v", rep)
	}
	for _, r := range rep.Results {
		if r.MedianVsTCP == nil || r.RateVsTCP == nil || len(r.Buckets) != 1 || r.Buckets[0].MaxSize != 100 {
			t.Errorf("%s: ratios %v %v, buckets %+v", r.Protocol, r.MedianVsTCP, r.RateVsTCP, r.Buckets)
		}
		// The run is its own baseline: its median slowdown is 1.
		if s := r.Buckets[0].Slowdown50; s < 0.99 || s > 1.01 {
			t.Errorf("%s: median slowdown %v of its own baseline", r.Protocol, s)
		}
	}
}

func TestBenchLatencyWorkloadSizes(t *testing.T) {
	rep, _ := benchJSON(t, "--proto", "tcp,homa-udp", "--workload", "w2", "--count", "60", "--warmup", "0", "--buckets", "4")
	checkRows(t, rep, []string{"tcp", "homa-udp"}, 60)
	if rep.Workload != "w2" || rep.Size != 0 {
		t.Errorf("workload %q, size %d; want w2 and none", rep.Workload, rep.Size)
	}
	for _, r := range rep.Results {
		if len(r.Buckets) != 4 {
			t.Errorf("%s: %d buckets, want 4", r.Protocol, len(r.Buckets))
		}
	}
}

func TestBenchThroughput(t *testing.T) {
	rep, _ := benchJSON(t, "--mode", "throughput", "--count", "300", "--clients", "2", "--outstanding", "4",
		"--calibrate", "20", "--warmup", "5", "--size", "2000")
	checkRows(t, rep, []string{"homa", "homa-udp", "tcp", "grpc", "floor"}, 300)
	if rep.Clients != 2 || rep.Outstanding != 4 || rep.Calibrate != 20 {
		t.Errorf("report header %+v", rep)
	}
	for _, r := range rep.Results {
		if b := r.Buckets[0]; b.Slowdown50 <= 0 || b.Slowdown99 < b.Slowdown50 {
			t.Errorf("%s: slowdowns %+v", r.Protocol, b)
		}
	}
	if !rawPermitted(t) {
		return
	}
	// The floor carries 8192 bytes at most in throughput mode.
	_, errOut := benchJSON(t, "--mode", "throughput", "--proto", "tcp,floor", "--size", "9000", "--count", "3", "--warmup", "0")
	if want := "homa: 9000-byte messages exceed its 8192-byte limit; skipping floor ("; !strings.HasPrefix(errOut, want) {
		t.Errorf("stderr %q does not say %q", errOut, want)
	}
}

func TestBenchWorkload(t *testing.T) {
	rep, _ := benchJSON(t, "--mode", "workload", "--workload", "w1", "--load-mbps", "1", "--duration", "150ms",
		"--calibrate", "20", "--warmup", "5", "--clients", "2")
	checkRows(t, rep, []string{"homa", "homa-udp", "tcp", "grpc"}, -1)
	if rep.LoadMbps != 1 || rep.OfferedRate <= 0 || rep.DurationS != 0.15 || rep.MaxInFlight != defaultMaxOutstanding {
		t.Errorf("report header %+v", rep)
	}
}

// TestBenchWorkloadTable checks the table output of a workload run and
// its plot.
func TestBenchWorkloadTable(t *testing.T) {
	plot := filepath.Join(t.TempDir(), "slowdown.svg")
	code, out, errOut := runHoma(context.Background(), "bench", "--mode", "workload", "--proto", "tcp,grpc",
		"--workload", "w3", "--buckets", "5", "--load-mbps", "2", "--duration", "100ms", "--calibrate", "30",
		"--warmup", "0", "--plot", plot)
	if code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, errOut)
	}
	for _, want := range []string{
		"homa bench: workload, sizes from w3 at 2 Mbit/s",
		"by request size (slowdown: RTT / the protocol's own unloaded RTT of the size, from 30 RPCs one at a time; over the fastest:",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
	rows := regexp.MustCompile(`(?m)^ *(tcp|grpc) +\d+ +[\d.]+ +\d+( +[\d.]+){8} *$`).FindAllString(out, -1)
	if len(rows) != 10 {
		t.Errorf("%d bucket rows, want 5 per protocol, in:\n%s", len(rows), out)
	}
	// The fastest unloaded RTT of a size is at most a row's own, so each
	// of its slowdowns over the fastest is at least its own.
	for _, row := range rows {
		f := strings.Fields(row)
		own50, _ := strconv.ParseFloat(f[7], 64)
		own99, _ := strconv.ParseFloat(f[8], 64)
		fast50, _ := strconv.ParseFloat(f[10], 64)
		fast99, _ := strconv.ParseFloat(f[11], 64)
		if fast50 < own50 || fast99 < own99 {
			t.Errorf("row %q: slowdowns over the fastest below its own", row)
		}
	}
	svg, err := os.ReadFile(plot)
	if err != nil || !bytes.Contains(svg, []byte("<svg")) || !bytes.Contains(svg, []byte("Slowdown")) {
		t.Errorf("plot: %v, %.100q", err, svg)
	}
	if want := "homa bench: wrote " + plot + " (slowdown by message size per protocol)\n"; !strings.Contains(errOut, want) {
		t.Errorf("stderr %q lacks %q", errOut, want)
	}
}

// TestBenchLatencyPlot: in latency mode the plot is the RTT distribution
// of each protocol, and bench says where it wrote it; a path it cannot
// write is refused before the run.
func TestBenchLatencyPlot(t *testing.T) {
	dir := t.TempDir()
	plot := filepath.Join(dir, "rtt.svg")
	code, _, errOut := runHoma(context.Background(), "bench", "--proto", "tcp,udp", "--count", "50", "--warmup", "0", "--plot", plot)
	if code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, errOut)
	}
	svg, err := os.ReadFile(plot)
	if err != nil || !bytes.Contains(svg, []byte("Round-trip time")) || !bytes.Contains(svg, []byte("Fraction of RPCs")) {
		t.Errorf("plot: %v, %.100q", err, svg)
	}
	if want := "homa bench: wrote " + plot + " (RTT CDF per protocol)\n"; !strings.HasSuffix(errOut, want) {
		t.Errorf("stderr %q does not end with %q", errOut, want)
	}
	missing := filepath.Join(dir, "no", "such", "rtt.svg")
	code, out, errOut := runHoma(context.Background(), "bench", "--proto", "tcp", "--count", "5", "--plot", missing)
	checkUsageError(t, "bench", []string{"--plot", missing}, code, errOut, "--plot "+missing+": cannot create a file in")
	if out != "" {
		t.Errorf("ran before refusing the path: %q", out)
	}
}

// TestBenchSkips: protocols that cannot carry the messages, or cannot
// open raw sockets, are skipped with a message, not failed, while another
// protocol runs; with none left the run fails without a report.
func TestBenchSkips(t *testing.T) {
	refuseRaw(t)
	rep, errOut := benchJSON(t, "--proto", "homa,tcp,floor", "--count", "3", "--warmup", "0")
	checkRows(t, rep, []string{"tcp"}, 3)
	for _, want := range []string{
		"homa: raw IP sockets not permitted (need CAP_NET_RAW); skipping homa (Homa over raw IP",
		"homa: raw IP sockets not permitted (need CAP_NET_RAW); skipping floor (raw IP protocol 253",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr %q does not say %q", errOut, want)
		}
	}
	rep, errOut = benchJSON(t, "--proto", "tcp,udp", "--size", "70000", "--count", "3", "--warmup", "0")
	checkRows(t, rep, []string{"tcp"}, 3)
	if want := "homa: 70000-byte messages exceed its 65507-byte limit; skipping udp ("; !strings.HasPrefix(errOut, want) {
		t.Errorf("stderr %q does not say %q", errOut, want)
	}
	if len(rep.Skipped) != 1 || rep.Skipped[0].Protocol != "udp" {
		t.Errorf("skipped %+v, want udp", rep.Skipped)
	}

	code, out, errOut := runHoma(context.Background(), "bench", "--proto", "udp", "--size", "70000", "--count", "3")
	if code != 1 || out != "" || !strings.HasSuffix(errOut, "homa bench: no protocol could be measured\n") {
		t.Errorf("nothing measurable: exit %d, stdout %q, stderr %q; want 1 and no report", code, out, errOut)
	}
}

func TestBenchProgress(t *testing.T) {
	args := []string{"--proto", "tcp", "--count", "3000", "--warmup", "0", "--progress-interval", "5ms"}
	_, errOut := benchJSON(t, append(args, "--progress")...)
	if !regexp.MustCompile(`(?m)^homa bench: tcp latency: [\d.]+s, \d+ RPCs, \d+ RPCs/s$`).MatchString(errOut) {
		t.Errorf("no progress line in stderr:\n%s", errOut)
	}
	if _, errOut := benchJSON(t, args...); errOut != "" {
		t.Errorf("--json without --progress printed:\n%s", errOut)
	}
	_, errOut = benchJSON(t, "--mode", "workload", "--proto", "tcp", "--load-mbps", "1", "--duration", "50ms",
		"--calibrate", "0", "--warmup", "0", "--progress", "--progress-interval", "5ms")
	if !regexp.MustCompile(`(?m)^homa bench: tcp workload: .*, \d+ in flight, \d+ dropped$`).MatchString(errOut) {
		t.Errorf("no workload progress line in stderr:\n%s", errOut)
	}
}

// startServe runs "homa serve" with args until the test ends and returns
// the address it announced and a function that stops it and returns its
// output.
func startServe(t *testing.T, args ...string) (netip.AddrPort, func() string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := &syncBuffer{written: make(chan struct{})}
	var errOut bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, append([]string{"serve"}, args...), out, &errOut) }()
	select {
	case <-out.written:
	case code := <-done:
		cancel()
		t.Fatalf("serve %v exited %d before starting: %s", args, code, errOut.String())
	}
	m := regexp.MustCompile(`^homa: \S+ server on (\S+)\n`).FindStringSubmatch(out.String())
	if m == nil {
		cancel()
		<-done
		t.Fatalf("serve %v printed %q", args, out.String())
	}
	addr := netip.MustParseAddrPort(m[1])
	stopped := false
	stop := func() string {
		if !stopped {
			stopped = true
			cancel()
			if code := <-done; code != 0 {
				t.Errorf("serve %v: exit %d, stderr %s", args, code, errOut.String())
			}
		}
		return out.String()
	}
	t.Cleanup(func() { stop() })
	return addr, stop
}

// serveProtos are the protocols serve --proto offers that may run here.
func serveProtos(t *testing.T) []string {
	var protos []string
	raw := rawPermitted(t)
	for _, name := range strings.Split(bench.ProtocolNames(remote), ",") {
		if p, _ := bench.LookupProtocol(name); raw || !p.Raw() {
			protos = append(protos, name)
		}
	}
	return protos
}

// TestServeProto answers a client of each protocol with --reply-size
// semantics: cut to N bytes, or zero-padded to N. The Homa ends send
// only 3 bytes of each message unscheduled, so the rest moves under
// grants.
func TestServeProto(t *testing.T) {
	for _, name := range serveProtos(t) {
		t.Run(name, func(t *testing.T) {
			addr, stop := startServe(t, "--proto", name, "--addr", fmt.Sprintf("127.0.0.1:%d", freePort(t)),
				"--reply-size", "10", "--link-mbps", "10000", "--unsched-bytes", "3")
			// One request cut to 10 bytes, one padded to them; bench
			// checks every byte of each reply.
			for _, size := range []string{"16", "5"} {
				code, _, errOut := runHoma(context.Background(), "bench", "--proto", name, "--target", addr.String(),
					"--size", size, "--count", "1", "--warmup", "0", "--reply-size", "10", "--unsched-bytes", "3", "--json")
				if code != 0 {
					t.Errorf("%s-byte request: exit %d, stderr %q", size, code, errOut)
				}
			}
			want := fmt.Sprintf("homa: %s server on %v\nhoma: %s server stopped after 2 requests\n", name, addr, name)
			if out := stop(); out != want {
				t.Errorf("serve printed %q, want %q", out, want)
			}
		})
	}
}

// TestWorkloadRemote runs the workload client of lab against a server
// of each protocol in this process, as two instances of the command.
func TestWorkloadRemote(t *testing.T) {
	for _, name := range serveProtos(t) {
		t.Run(name, func(t *testing.T) {
			addr, stop := startServe(t, "--proto", name, "--addr", fmt.Sprintf("127.0.0.1:%d", freePort(t)), "--reply-size", "100")
			samples := filepath.Join(t.TempDir(), "samples.csv")
			rep, _ := benchJSON(t, "--mode", "workload", "--proto", name, "--target", addr.String(),
				"--workload", "w2", "--load-mbps", "1", "--duration", "200ms", "--calibrate", "25", "--warmup", "0",
				"--samples", samples, "--seed", "7", "--reply-size", "100")
			checkRows(t, rep, []string{name}, -1)
			if rep.Target != addr.String() || rep.Host != "" || rep.Seed != 7 || rep.ReplySize != 100 {
				t.Errorf("report header %+v", rep)
			}
			measured := readSamplesFile(t, samples)
			calib := readSamplesFile(t, samples+".calib")
			if len(calib) != 25 || len(measured) != rep.Results[0].Count {
				t.Errorf("%d calibration and %d measured samples, want 25 and %d", len(calib), len(measured), rep.Results[0].Count)
			}
			wantServed := fmt.Sprintf("stopped after %d requests", 25+len(measured))
			if out := stop(); !strings.Contains(out, wantServed) {
				t.Errorf("server output %q, want %q", out, wantServed)
			}
		})
	}
}

// TestWorkloadRemoteMismatch: a client that expects other replies than
// the server sends fails, naming the lengths.
func TestWorkloadRemoteMismatch(t *testing.T) {
	addr, _ := startServe(t, "--proto", "tcp", "--addr", "127.0.0.1:0", "--reply-size", "100")
	code, _, errOut := runHoma(context.Background(), "bench", "--mode", "workload", "--proto", "tcp",
		"--target", addr.String(), "--size", "300", "--load-mbps", "1", "--duration", "0", "--calibrate", "5", "--warmup", "0")
	if code != 1 || !strings.Contains(errOut, "a 300-byte request got 100 bytes back, want 300") {
		t.Errorf("exit %d, stderr %q; want 1 and the lengths", code, errOut)
	}
}

func readSamplesFile(t *testing.T, path string) []workload.Sample {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s, err := workload.ReadSamples(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return s
}

// TestBenchTargetDefault: --target without --proto measures a server of
// homa serve's default protocol, homa.
func TestBenchTargetDefault(t *testing.T) {
	requireRaw(t)
	addr, _ := startServe(t, "--proto", "homa", "--addr", fmt.Sprintf("127.0.0.1:%d", freePort(t)))
	rep, _ := benchJSON(t, "--target", addr.String(), "--count", "3", "--warmup", "0")
	checkRows(t, rep, []string{"homa"}, 3)
}

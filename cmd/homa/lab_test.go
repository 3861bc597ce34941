package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/homa-go/homa/internal/tools/workload"
	"github.com/homa-go/homa/lab"
)

// labChildEnv, when set, makes the test binary act as the homa command:
// the lab's end-to-end test runs it as "homa serve" and "homa bench"
// inside the namespaces.
const labChildEnv = "HOMA_LAB_TEST_CHILD"

func init() {
	if os.Getenv(labChildEnv) == "" {
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func TestLabUsage(t *testing.T) {
	for _, args := range [][]string{
		{"--hosts", "1"},
		{"--hosts", "65"},
		{"--rate", "1000"},
		{"--rate", "1gbps"},
		{"--proto", "homa,quic"},
		{"--proto", "tcp,tcp"},
		{"--proto", ""},
		{"--workload", "w9"},
		{"--load", "0"},
		{"--load", "NaN"},
		{"--duration", "0s"},
		{"--calibrate", "0"},
		{"--timeout", "0s"},
		{"--port", "40000"},
		{"--reply-size", "-1"},
		{"--mtu", "100"},
		{"--buffer", "1000"},
		{"--polling", "sometimes"},
		{"--polling", ""},
		{"extra"},
	} {
		code, _, stderr := runHoma(context.Background(), append([]string{"lab"}, args...)...)
		checkUsageError(t, "lab", args, code, stderr, "")
	}
	if code, _, stderr := runHoma(context.Background(), "lab", "-h"); code != 0 || !strings.Contains(stderr, "--cleanup") ||
		!strings.Contains(stderr, "\n  --proto protocols\n") || strings.Contains(stderr, "--protos") {
		t.Errorf("lab -h: exit %d, stderr %q; want the flags, --proto among them and not its older spelling", code, stderr)
	}
	// --protos, the older spelling, still works.
	if o, code := parseLab([]string{"--protos", "grpc,homa"}, &bytes.Buffer{}); code >= 0 || !slices.Equal(o.protos, []string{"grpc", "homa"}) {
		t.Errorf("--protos grpc,homa: parsed %v (exit %d)", o.protos, code)
	}
	o, code := parseLab([]string{"--proto", "HOMA, grpc", "--rate", "10gbit", "--rate-host1", "1gbit", "--load", "0.5"}, &bytes.Buffer{})
	if code >= 0 || !slices.Equal(o.protos, []string{"homa", "grpc"}) || o.loadMbps() != 500 || o.rate != 10e9 || o.polling != "never" {
		t.Errorf("parsed %+v (exit %d)", o, code)
	}
	if o, code := parseLab([]string{"--polling", "always"}, &bytes.Buffer{}); code >= 0 || o.polling != "always" {
		t.Errorf("--polling always: parsed %q (exit %d)", o.polling, code)
	}
}

// fakeSummary is a protocol's summary with the given slowdowns and RTTs
// for the shortest messages.
func fakeSummary(proto string, s50, s99 float64, r50, r99 time.Duration) lab.Summary {
	short := workload.Bucket{MaxSize: 1000, Count: 10, P50: r50, P99: r99, Slowdown50: s50, Slowdown99: s99}
	return lab.Summary{Proto: proto, Workload: "w4", Calibrated: 5, Completed: 10,
		Buckets: []workload.Bucket{short, {MaxSize: 1_000_000, Fraction: 1}}, Short: short}
}

func TestLabReport(t *testing.T) {
	o, code := parseLab([]string{"--proto", "tcp,homa,grpc"}, &bytes.Buffer{})
	if code >= 0 {
		t.Fatalf("exit %d", code)
	}
	sums := []lab.Summary{
		fakeSummary("tcp", 6, 80, 300*time.Microsecond, 8*time.Millisecond),
		fakeSummary("homa", 2, 4, 100*time.Microsecond, 400*time.Microsecond),
		fakeSummary("grpc", 8, 100, 400*time.Microsecond, 10*time.Millisecond),
	}
	var out bytes.Buffer
	if err := writeLabReport(&out, o, []string{"--proto", "tcp,homa,grpc"}, sums); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{
		"homa lab --proto tcp,homa,grpc\n",
		"shortest 20% (<= 1000 B): p50/p99 slowdown, homa 2.00/4.00 vs tcp 6.00/80.00: homa's 3.0x/20.0x lower (RTT p50/p99 100/400 µs vs 300/8000 µs: 3.0x/20.0x)",
		"homa 2.00/4.00 vs grpc 8.00/100.00: homa's 4.0x/25.0x lower",
		"; Homa polling never\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q:\n%s", want, text)
		}
	}
	// A failed protocol is reported, and left out of the comparisons.
	failed := append(sums, lab.Failed("homa-udp", o.workload, 800, errors.New("h2: bench: exit status 1")))
	out.Reset()
	if err := writeLabReport(&out, o, nil, failed); err != nil {
		t.Fatal(err)
	}
	if text := out.String(); !strings.Contains(text, "homa-udp: FAILED: h2: bench: exit status 1\n") || strings.Contains(text, "vs homa-udp") {
		t.Errorf("report with a failed run:\n%s", text)
	}
	if c := lab.Comparisons([]lab.Summary{failed[3], sums[0], sums[2]}); len(c) != 1 || c[0].First != "tcp" || c[0].Second != "grpc" {
		t.Errorf("comparisons without a successful homa run: %+v", c)
	}
	o.json = true
	out.Reset()
	if err := writeLabReport(&out, o, nil, sums); err != nil {
		t.Fatal(err)
	}
	var r labReport
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("%v:\n%s", err, out.String())
	}
	if len(r.Results) != 3 || len(r.Comparisons) != 2 || r.Comparisons[0].Second != "tcp" || r.Comparisons[0].Slowdown99 != 20 || r.LoadMbps != 800 {
		t.Errorf("JSON report %+v", r)
	}
}

// requireLab skips the test where labs cannot be made.
func requireLab(t *testing.T) {
	t.Helper()
	if err := lab.Available(); errors.Is(err, lab.ErrUnavailable) {
		t.Skipf("skipping: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
}

// ourNamespaces lists the lab namespaces of this process.
func ourNamespaces(t *testing.T) []string {
	t.Helper()
	names, err := lab.ListNamespaces()
	if err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("%s%d-", lab.Prefix, os.Getpid())
	var ours []string
	for _, n := range names {
		if strings.HasPrefix(n, prefix) {
			ours = append(ours, n)
		}
	}
	return ours
}

// lockedBuffer is a bytes.Buffer safe for concurrent writers that can
// call a function on each write.
type lockedBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	onWrite func(all string)
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(p)
	if b.onWrite != nil {
		b.onWrite(b.buf.String())
	}
	return len(p), nil
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// useLabExecutable makes the lab run exe for serve and bench while t runs.
func useLabExecutable(t *testing.T, exe string) {
	old := labExecutable
	labExecutable = func() (string, error) { return exe, nil }
	t.Cleanup(func() { labExecutable = old })
}

// fakeHoma writes a script that plays "homa serve" (prints the ready
// line) and "homa bench" (never finishes): enough to test teardown
// without the real programs.
func fakeHoma(t *testing.T) string {
	path := filepath.Join(t.TempDir(), "fakehoma")
	script := "#!/bin/sh\nif [ \"$1\" = serve ]; then echo \"homa: $3 server on $5\"; fi\nexec sleep 60\n"
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestLabTeardown runs the lab with a program that fails at once and with
// one that is cancelled (Ctrl-C) during calibration: both times no
// namespace of the run is left, and no process.
func TestLabTeardown(t *testing.T) {
	requireLab(t)
	if left := ourNamespaces(t); len(left) > 0 {
		t.Fatalf("namespaces before the test: %v", left)
	}
	useLabExecutable(t, "/nonexistent/homa")
	code, _, stderr := runHoma(context.Background(), "lab", "--hosts", "2", "--proto", "tcp")
	if code != 1 || !strings.Contains(stderr, "exited before it was ready") {
		t.Errorf("with a missing program: exit %d, stderr:\n%s", code, stderr)
	}
	if left := ourNamespaces(t); len(left) > 0 {
		t.Errorf("namespaces left after a failed run: %v", left)
	}

	useLabExecutable(t, fakeHoma(t))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errOut := &lockedBuffer{onWrite: func(all string) {
		if strings.Contains(all, "calibrating") {
			cancel()
		}
	}}
	var out bytes.Buffer
	code = runLab(ctx, []string{"--hosts", "3", "--proto", "homa"}, &out, errOut)
	if code != 1 || !strings.Contains(errOut.String(), "context canceled") {
		t.Errorf("cancelled run: exit %d, stderr:\n%s", code, errOut.String())
	}
	if left := ourNamespaces(t); len(left) > 0 {
		t.Errorf("namespaces left after a cancelled run: %v", left)
	}
	if out, err := exec.Command("pgrep", "-P", fmt.Sprint(os.Getpid())).Output(); err == nil && len(out) > 0 {
		t.Errorf("child processes left: %s", out)
	}
}

// TestLabCleanup deletes the namespaces of a lab whose process has died.
func TestLabCleanup(t *testing.T) {
	requireLab(t)
	left, err := lab.Stale()
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Skipf("skipping: it would delete the labs left by earlier runs, %v; homa lab --cleanup deletes them", left)
	}
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	stale := fmt.Sprintf("%s%d-1-sw", lab.Prefix, dead.Process.Pid)
	if out, err := exec.Command("ip", "netns", "add", stale).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", stale).Run() })
	code, stdout, stderr := runHoma(context.Background(), "lab", "--cleanup")
	if code != 0 || !strings.Contains(stdout, "deleted namespace "+stale+"\n") {
		t.Errorf("lab --cleanup: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

// TestLabRun is a short end-to-end run: three hosts, Homa and TCP, a
// light load (20 Mbit/s) of small messages for two seconds each, the
// figure written and the lab gone afterwards. The test binary plays the
// homa command.
func TestLabRun(t *testing.T) {
	requireLab(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(labChildEnv, "1")
	useLabExecutable(t, exe)
	plot := filepath.Join(t.TempDir(), "lab.svg")
	args := []string{"lab", "--hosts", "3", "--rate", "1gbit", "--proto", "homa,tcp", "--workload", "w3",
		"--load", "0.02", "--duration", "2s", "--calibrate", "200", "--timeout", "20s", "--json", "--plot", plot}
	code, stdout, stderr := runHoma(context.Background(), args...)
	if code != 0 {
		t.Fatalf("%q: exit %d, stderr:\n%s", args, code, stderr)
	}
	var r labReport
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("%v:\n%s", err, stdout)
	}
	if len(r.Results) != 2 || len(r.Comparisons) != 1 {
		t.Fatalf("report %+v", r)
	}
	for _, s := range r.Results {
		if s.Calibrated != 200 || s.Completed == 0 || s.Short.Count == 0 || s.Short.Slowdown50 <= 0 {
			t.Errorf("%s: %+v", s.Proto, s)
		}
	}
	if st, err := os.Stat(plot); err != nil || st.Size() == 0 {
		t.Errorf("plot: %v", err)
	}
	if left := ourNamespaces(t); len(left) > 0 {
		t.Errorf("namespaces left after the run: %v", left)
	}
	t.Logf("stderr:\n%s", stderr)
}

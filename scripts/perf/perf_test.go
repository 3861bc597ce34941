package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	homabench "github.com/homa-go/homa/bench"
	"github.com/homa-go/homa/internal/testkit/socktest"
)

// rows makes a report of the given rows.
func rows(rs ...result) *report { return &report{Results: rs} }

// TestSummarize: a figure is the best value of the runs, with the worst
// to the best as its spread; a ratio is that of the best values, spread
// over the runs' own ratios; missing rows do not count, and a failed
// call in any run of a row leaves every figure that reads it without a
// value, naming the rows.
func TestSummarize(t *testing.T) {
	runs := [][]*report{
		{rows(result{Protocol: "homa", RPCsPerSec: 100, MedianUS: 12}, result{Protocol: "erpc", RPCsPerSec: 90, MedianUS: 14},
			result{Protocol: "tcp", RPCsPerSec: 50})},
		{rows(result{Protocol: "homa", RPCsPerSec: 120, MedianUS: 10}, result{Protocol: "erpc", RPCsPerSec: 96, MedianUS: 15})},
		{rows(result{Protocol: "tcp", RPCsPerSec: 500, MedianUS: 1, Failed: 3}, result{Protocol: "grpc", Failed: 1})},
	}
	tcpFailed := []string{"tcp: 3 in run 3"}
	for _, tt := range []struct {
		f    figure
		want summary
	}{
		{figure{proto: "homa", metric: rate}, summary{value: 120, lo: 100, hi: 120, n: 2}},
		{figure{proto: "homa", metric: median}, summary{value: 10, lo: 12, hi: 10, n: 2}},
		{figure{proto: "erpc", den: "homa", metric: rate}, summary{value: 0.8, lo: 0.8, hi: 0.9, n: 2}},
		{figure{proto: "floor", metric: median}, summary{}},
		{figure{proto: "tcp", metric: rate}, summary{failed: tcpFailed}},
		{figure{proto: "homa", den: "tcp", metric: rate}, summary{failed: tcpFailed}},
		{figure{proto: "grpc", den: "tcp", metric: rate}, summary{failed: []string{"grpc: 1 in run 3", "tcp: 3 in run 3"}}},
	} {
		got := summarize(tt.f, runs, 0)
		if !slices.Equal(got.failed, tt.want.failed) {
			t.Errorf("%s %s/%s: failed %q, want %q", tt.f.metric.name, tt.f.proto, tt.f.den, got.failed, tt.want.failed)
		}
		if d := got.value - tt.want.value; d > 1e-9 || d < -1e-9 || got.n != tt.want.n ||
			abs(got.lo-tt.want.lo) > 1e-9 || abs(got.hi-tt.want.hi) > 1e-9 {
			t.Errorf("%s %s/%s: %+v, want %+v", tt.f.metric.name, tt.f.proto, tt.f.den, got, tt.want)
		}
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// TestWriteTable: one line per figure, "-" where nothing was measured,
// the runs counted where some missed, and the skipped protocols listed
// once.
func TestWriteTable(t *testing.T) {
	plan := []measurement{{title: "T", figures: []figure{
		{proto: "homa", label: "homa", metric: gbps},
		{proto: "floor", label: "floor", metric: p99},
		{proto: "homa", label: "homa", metric: median},
		{proto: "tcp", label: "tcp", metric: rate},
		{proto: "tcp", den: "homa", label: "tcp / homa", metric: gbps},
		{proto: "erpc", den: "homa", label: "erpc / homa (goal >= 0.85)", metric: rate},
	}}}
	skipped := rows(result{Protocol: "homa", Gbps: 2.5, MedianUS: 254}, result{Protocol: "tcp", Gbps: 5, RPCsPerSec: 1234.4})
	skipped.Skipped = append(skipped.Skipped, struct {
		Protocol string `json:"protocol"`
		Reason   string `json:"reason"`
	}{"floor", "no raw sockets"})
	runs := [][]*report{{skipped}, {rows(result{Protocol: "homa", Gbps: 2, MedianUS: 266}, result{Protocol: "erpc", RPCsPerSec: 1e6, Failed: 2})}, {skipped}}
	var b bytes.Buffer
	writeTable(&b, plan, runs, "head\n")
	want := "head\n\n| measurement | protocol | figure | best of 3 | spread |\n| --- | --- | --- | ---: | ---: |\n" +
		"| T | homa | Gbit/s | 2.50 | 2.00 – 2.50 |\n" +
		"| T | floor | p99 µs | - | - |\n" +
		"| T | homa | median µs | 254.0 | 254.0 – 266.0 |\n" +
		"| T | tcp | RPCs/s | 1234 | 1234 – 1234 (2 runs) |\n" +
		"| T | tcp / homa | ratio of Gbit/s | 2.00 | 2.00 – 2.00 (2 runs) |\n" +
		"| T | erpc / homa (goal >= 0.85) | ratio of RPCs/s | no figure | calls failed: erpc: 2 in run 2 |\n" +
		"\n- skipped floor: no raw sockets\n"
	if b.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", b.String(), want)
	}
}

// TestPlan: every measurement runs the protocols its figures read, and
// takes its count from its flag.
func TestPlan(t *testing.T) {
	o, err := parse([]string{"--mb-count", "7", "--lat-count", "8", "--rate-count", "9", "--layer-count", "10",
		"--stub-count", "11", "--clients", "3"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	counts := []string{"7", "8", "9", "10", "11"}
	for j, m := range newPlan(o) {
		args := strings.Join(m.args, " ")
		if !strings.Contains(args, "--count "+counts[j]+" ") {
			t.Errorf("%s: %q does not count %s", m.title, args, counts[j])
		}
		protos := regexp.MustCompile(`--proto (\S+)`).FindStringSubmatch(args)
		if protos == nil {
			t.Fatalf("%s: no --proto in %q", m.title, args)
		}
		for _, f := range m.figures {
			for _, p := range []string{f.proto, f.den} {
				if p != "" && !strings.Contains(","+protos[1]+",", ","+p+",") {
					t.Errorf("%s: figure of %s, not in --proto %s", m.title, p, protos[1])
				}
			}
		}
	}
	for _, bad := range [][]string{{"--repeat", "0"}, {"--rounds", "0"}, {"--lat-count", "-1"}, {"--timeout", "0s"}, {"extra"}} {
		if _, err := parse(bad, io.Discard); err == nil {
			t.Errorf("parse(%q) accepted", bad)
		}
	}
	if _, err := parse([]string{"-h"}, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v", err)
	}
}

// TestRun measures the whole plan once with a handful of RPCs, with the
// homa command built from this module, and checks that every figure of
// the protocols that can run here has a value. It needs a few seconds
// and the go command.
func TestRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the homa command and runs every measurement (-short)")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("needs the go command to build homa")
	}
	dir := t.TempDir()
	homa := filepath.Join(dir, "homa")
	build := exec.Command(goBin, "build", "-o", homa, "../../cmd/homa")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out := filepath.Join(dir, "perf.md")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	args := []string{"--homa", homa, "--repeat", "2", "--rounds", "2", "--mb-count", "3", "--lat-count", "50", "--rate-count", "300",
		"--layer-count", "300", "--stub-count", "50", "--out", out, "--note", "test"}
	err = run(ctx, args, &stdout, &stderr)
	if err != nil {
		t.Fatalf("%v\nstderr:\n%s", err, stderr.String())
	}
	written, err := os.ReadFile(out)
	if err != nil || !bytes.Equal(written, stdout.Bytes()) {
		t.Errorf("--out file differs from stdout (%v)", err)
	}
	table := stdout.String()
	lines := regexp.MustCompile(`(?m)^\| [^-|].*\|$`).FindAllString(table, -1)[1:] // after the column names
	// A figure has no value only where it reads a protocol that needs
	// raw sockets, which this process may not open.
	o, err := parse(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	raw := socktest.RawPermitted(t)
	n := 0
	for _, m := range newPlan(o) {
		for _, f := range m.figures {
			if n >= len(lines) {
				break
			}
			line := lines[n]
			n++
			if strings.Contains(line, "| - |") && (raw || !needsRaw(t, f.proto) && !needsRaw(t, f.den)) {
				t.Errorf("no value: %s", line)
			}
		}
	}
	if want := 39; n != want || len(lines) != want {
		t.Errorf("%d figures planned, %d in the table, want %d:\n%s", n, len(lines), want, table)
	}
	if !strings.Contains(table, "best of 2") || !strings.Contains(table, ". test.") || !strings.Contains(table, "in 2 rounds") || strings.Count(stderr.String(), "perf: run ") != 10 {
		t.Errorf("table:\n%s\nstderr:\n%s", table, stderr.String())
	}
}

// needsRaw reports whether the protocol named (none: "") needs raw IP
// sockets.
func needsRaw(t *testing.T, name string) bool {
	t.Helper()
	if name == "" {
		return false
	}
	p, ok := homabench.LookupProtocol(name)
	if !ok {
		t.Fatalf("no protocol %q", name)
	}
	return p.Raw()
}

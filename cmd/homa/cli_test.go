package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/homa-go/homa/bench"
	"github.com/homa-go/homa/internal/testkit/socktest"
)

func TestMain(m *testing.M) {
	// bench starts its servers as child processes of this program: the
	// test binary, which plays the homa command when this is set (see
	// lab_test.go).
	os.Setenv(labChildEnv, "1")
	os.Exit(socktest.RunChecked(m))
}

// runHoma runs the command with args and returns its exit code and output.
func runHoma(ctx context.Context, args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = run(ctx, args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// rawPermitted reports whether this process may open raw IP sockets;
// any error but a refused permission fails t.
func rawPermitted(t *testing.T) bool { return socktest.RawPermitted(t) }

// requireRaw skips the test unless this process may open raw IP sockets.
func requireRaw(t *testing.T) { socktest.RequireRaw(t) }

// refuseRaw makes every raw socket open (Homa's and the floor's) fail as
// it does without CAP_NET_RAW, for the rest of the test.
func refuseRaw(t *testing.T) {
	t.Cleanup(bench.DenyRaw())
}

// freePort returns a Homa server port whose UDP port is free now.
func freePort(t *testing.T) uint16 {
	for range 100 {
		p := uint16(10000 + rand.IntN(20000))
		c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), p)))
		if err == nil {
			c.Close()
			return p
		}
	}
	t.Fatal("no free port")
	return 0
}

// pingReportRE matches the report of ping and demo.
var pingReportRE = regexp.MustCompile(`homa: (\d+) round trips of 100 bytes to 127\.0\.0\.1:\d+ over (.+)\n` +
	`rtt µs: min [\d.]+  median [\d.]+  p99 [\d.]+  p99\.9 [\d.]+  max [\d.]+\n` +
	`throughput: \d+ RPCs/s, [\d.]+ Mbit/s of payload each way\n$`)

// checkReport checks a ping or demo report of count round trips over
// transport.
func checkReport(t *testing.T, stdout string, count int, transport string) {
	t.Helper()
	m := pingReportRE.FindStringSubmatch(stdout)
	if m == nil {
		t.Fatalf("no report in output:\n%s", stdout)
	}
	if m[1] != fmt.Sprint(count) || m[2] != transport {
		t.Errorf("report of %s round trips over %q, want %d over %q", m[1], m[2], count, transport)
	}
}

func TestUsage(t *testing.T) {
	ctx := context.Background()
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}} {
		code, out, _ := runHoma(ctx, args...)
		if code != 0 || !strings.HasPrefix(out, "usage: homa <command>") {
			t.Errorf("%v: exit %d, output %q; want 0 and the usage", args, code, out)
		}
		for name := range commands {
			if !strings.Contains(out, "\n  "+name+" ") {
				t.Errorf("%v: usage does not list %q", args, name)
			}
		}
	}
	if code, _, errOut := runHoma(ctx); code != 2 || !strings.Contains(errOut, "usage: homa <command>") {
		t.Errorf("no command: exit %d, stderr %q; want 2 and the usage", code, errOut)
	}
	// An unknown command is one line: what is wrong, the commands, and
	// where the usage is.
	code, _, errOut := runHoma(ctx, "frobnicate")
	if want := `homa: unknown command "frobnicate" (`; code != 2 || !strings.HasPrefix(errOut, want) ||
		strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "serve") || !strings.Contains(errOut, "run 'homa help'") {
		t.Errorf("unknown command: exit %d, stderr %q; want 2 and one line naming the commands", code, errOut)
	}
	if code, _, errOut := runHoma(ctx, "ping", "-h"); code != 0 || !strings.Contains(errOut, "-count") {
		t.Errorf("ping -h: exit %d, stderr %q; want 0 and the flags", code, errOut)
	}
}

// TestHelpSpelling: every command's help writes its flags one way,
// --name, and lists none of the older spellings kept for scripts.
func TestHelpSpelling(t *testing.T) {
	oneDash := regexp.MustCompile(`(?m)^\s+-[a-z]`)
	for name := range commands {
		code, _, errOut := runHoma(context.Background(), name, "-h")
		if code != 0 || !strings.Contains(errOut, "\n  --") {
			t.Errorf("%s -h: exit %d, stderr %q; want 0 and the flags", name, code, errOut)
		}
		if m := oneDash.FindString(errOut); m != "" {
			t.Errorf("%s -h lists a flag with one dash (%q):\n%s", name, m, errOut)
		}
		for _, old := range []string{"--protos", "--vs", "older spelling"} {
			if strings.Contains(errOut, old) {
				t.Errorf("%s -h lists %s:\n%s", name, old, errOut)
			}
		}
	}
}

func TestBadFlags(t *testing.T) {
	for _, tt := range []struct {
		args []string
		flag string // what the error line names
	}{
		{[]string{"ping", "--size", "0"}, "--size 0"},
		{[]string{"ping", "--count", "0"}, "--count 0"},
		{[]string{"ping", "--nosuchflag"}, "unknown flag --nosuchflag"},
		{[]string{"ping", "--count"}, "--count needs a value"},
		{[]string{"ping", "-count", "many"}, `--count: invalid value "many"`},
		{[]string{"demo", "extra"}, `unexpected argument "extra"`},
		{[]string{"bench", "--vs", "quic"}, "quic"},
		{[]string{"bench", "--addr-family", "5"}, "--addr-family 5"},
		{[]string{"serve", "--proto", "quic"}, "quic"},
		{[]string{"serve", "--proto", "udp"}, "udp"},
		{[]string{"serve", "--proto", "tcp", "--udp"}, "--udp"},
		{[]string{"serve", "--reply-size", "-1"}, "--reply-size -1"},
		{[]string{"serve", "--link-mbps", "-5"}, "--link-mbps -5"},
		{[]string{"serve", "--unsched-bytes", "-1"}, "--unsched-bytes -1"},
		{[]string{"bench", "--unsched-bytes", "1000001"}, "--unsched-bytes 1000001"},
		{[]string{"lab", "--unsched-bytes", "-1"}, "--unsched-bytes -1"},
		{[]string{"bench", "--peer-timeout", "-1s"}, "--peer-timeout -1s"},
	} {
		code, _, errOut := runHoma(context.Background(), tt.args...)
		checkUsageError(t, tt.args[0], tt.args[1:], code, errOut, tt.flag)
	}
}

// TestUnknownFlags: every command answers an unknown flag, with one dash
// or two, in one line naming it, then how to list the flags.
func TestUnknownFlags(t *testing.T) {
	for name := range commands {
		for _, bogus := range []string{"--bogus", "-bogus", "--bogus=1"} {
			code, _, errOut := runHoma(context.Background(), name, bogus)
			checkUsageError(t, name, []string{bogus}, code, errOut, "unknown flag --bogus")
		}
	}
}

// isUsageError reports whether a command's exit code and stderr are
// those of a usage error: exit 2, one line naming the command, then how
// to list its flags.
func isUsageError(cmd string, code int, stderr string) bool {
	lines := strings.Split(stderr, "\n")
	return code == 2 && len(lines) == 3 && lines[2] == "" && strings.HasPrefix(lines[0], "homa "+cmd+": ") &&
		lines[1] == "run 'homa "+cmd+" --help'"
}

// checkUsageError checks that a command's run with args was a usage
// error (see isUsageError) whose line names flag (if not "").
func checkUsageError(t *testing.T, cmd string, args []string, code int, stderr, flag string) {
	t.Helper()
	if !isUsageError(cmd, code, stderr) || !strings.Contains(strings.SplitN(stderr, "\n", 2)[0], flag) {
		t.Errorf("%s %q: exit %d, stderr %q; want 2, one line naming %q, and run 'homa %s --help'", cmd, args, code, stderr, flag, cmd)
	}
}

// TestDemoUDP: with --udp the demo runs over UDP without a word about
// raw sockets.
func TestDemoUDP(t *testing.T) {
	code, out, errOut := runHoma(context.Background(), "demo", "--udp", "--count", "20")
	if code != 0 || errOut != "" || !strings.Contains(out, "(UDP encapsulation)") {
		t.Errorf("exit %d, stdout %q, stderr %q; want 0, UDP and nothing on stderr", code, out, errOut)
	}
}

// TestDemo runs the demo with whatever this process may open.
func TestDemo(t *testing.T) {
	code, out, errOut := runHoma(context.Background(), "demo", "--count", "50")
	if code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, errOut)
	}
	transport := "raw IP protocol 146"
	if errOut != "" {
		transport = "UDP encapsulation"
	}
	if !strings.HasPrefix(out, "homa: echo server on 127.0.0.1:") {
		t.Errorf("no server line in output:\n%s", out)
	}
	checkReport(t, out, 50, transport)
}

func TestDemoFallsBackToUDP(t *testing.T) {
	refuseRaw(t)
	code, out, errOut := runHoma(context.Background(), "demo", "--count", "50")
	if code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, errOut)
	}
	const want = "homa: raw IP sockets not permitted (need CAP_NET_RAW); falling back to UDP encapsulation\n"
	if errOut != want {
		t.Errorf("stderr %q, want %q", errOut, want)
	}
	checkReport(t, out, 50, "UDP encapsulation")
}

func TestRawRefused(t *testing.T) {
	refuseRaw(t)
	for _, cmd := range []string{"serve", "ping"} {
		code, out, errOut := runHoma(context.Background(), cmd, "--addr", "127.0.0.1:4000")
		if code != 1 || out != "" || strings.Count(errOut, "\n") != 1 ||
			!strings.Contains(errOut, "--udp") || !strings.Contains(errOut, "CAP_NET_RAW") {
			t.Errorf("%s without raw sockets: exit %d, stdout %q, stderr %q; want 1 and one line naming --udp and CAP_NET_RAW",
				cmd, code, out, errOut)
		}
	}
}

// syncBuffer is an output written by one goroutine while another waits
// for its first line.
type syncBuffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	once    sync.Once
	written chan struct{}
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.once.Do(func() { close(s.written) })
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// watchedBuffer is an output written by one goroutine while another
// waits for it to say something.
type watchedBuffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	changed chan struct{} // a token after each write
}

func newWatchedBuffer() *watchedBuffer {
	return &watchedBuffer{changed: make(chan struct{}, 1)}
}

func (w *watchedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	n, err := w.b.Write(p)
	w.mu.Unlock()
	select {
	case w.changed <- struct{}{}:
	default:
	}
	return n, err
}

func (w *watchedBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// waitFor waits until cond holds for what was written, checking after
// every write; false if ctx ends first.
func (w *watchedBuffer) waitFor(ctx context.Context, cond func(string) bool) bool {
	for !cond(w.String()) {
		select {
		case <-w.changed:
		case <-ctx.Done():
			return cond(w.String())
		}
	}
	return true
}

// servePing runs serve in a goroutine and ping against it.
func servePing(t *testing.T, transport string, flags ...string) {
	servePingWith(t, transport, transport, nil, flags...)
}

// servePingWith is servePing with flags of serve's own (serveOnly) too,
// and what serve says of its server after the transport (announced).
func servePingWith(t *testing.T, transport, announced string, serveOnly []string, flags ...string) {
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	ctx, cancel := context.WithCancel(context.Background())
	out := &syncBuffer{written: make(chan struct{})}
	var errOut bytes.Buffer
	done := make(chan int)
	serveArgs := append(append([]string{"serve", "--addr", addr}, serveOnly...), flags...)
	go func() { done <- run(ctx, serveArgs, out, &errOut) }()
	select {
	case <-out.written:
	case code := <-done:
		cancel()
		t.Fatalf("serve exited %d before starting: %s", code, errOut.String())
	}
	code, pingOut, pingErr := runHoma(context.Background(), append([]string{"ping", "--addr", addr, "--count", "50", "--warmup", "5"}, flags...)...)
	cancel()
	serveCode := <-done
	if code != 0 {
		t.Errorf("ping exited %d: %s", code, pingErr)
	}
	checkReport(t, pingOut, 50, transport)
	want := fmt.Sprintf("homa: echo server on %s (%s)\nhoma: echo server stopped after 55 requests\n", addr, announced)
	if serveCode != 0 || out.String() != want {
		t.Errorf("serve: exit %d, output %q, stderr %q; want 0 and %q", serveCode, out.String(), errOut.String(), want)
	}
}

func TestServePingUDP(t *testing.T) { servePing(t, "UDP encapsulation", "--udp") }

func TestServePingRaw(t *testing.T) {
	requireRaw(t)
	servePing(t, "raw IP protocol 146")
}

// TestServeShards serves on a socket of three shards, over UDP and raw
// IP, and refuses shards to a server that has no Homa socket.
func TestServeShards(t *testing.T) {
	servePingWith(t, "UDP encapsulation", "UDP encapsulation, 3 shards", []string{"--shards", "3"}, "--udp")
	if rawPermitted(t) {
		servePingWith(t, "raw IP protocol 146", "raw IP protocol 146, 2 shards", []string{"--shards", "2"})
	}
	for _, args := range [][]string{
		{"serve", "--proto", "tcp", "--shards", "2"},
		{"serve", "--shards", "-1"},
		{"serve", "--udp", "--shards", "257"},
	} {
		code, _, errOut := runHoma(context.Background(), args...)
		if code != 2 || !strings.Contains(errOut, "--shards") {
			t.Errorf("%q: exit %d, stderr %q; want 2 and the flag named", args, code, errOut)
		}
	}
}

func TestBench(t *testing.T) {
	code, out, errOut := runHoma(context.Background(), "bench", "--vs", "tcp,udp", "--count", "200")
	if code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, errOut)
	}
	if !regexp.MustCompile(`(?m)^ *protocol +median µs +p99 µs +p99\.9 µs +RPCs/s +Gbit/s +CPU µs/RPC +median/TCP +rate/TCP *$`).MatchString(out) {
		t.Errorf("no table header in:\n%s", out)
	}
	protos := []string{"homa", "homa-udp", "tcp", "udp"}
	if !rawPermitted(t) { // no Homa-over-IP row
		protos = protos[1:]
	}
	for _, p := range protos {
		ratio := `\d+\.\d\d +\d+\.\d\d`
		if p == "tcp" {
			ratio = `1\.00 +1\.00`
		}
		row := regexp.MustCompile(`(?m)^ *` + p + `( +[\d.]+){6} +` + ratio + ` *$`)
		if !row.MatchString(out) {
			t.Errorf("no row for %s in:\n%s", p, out)
		}
	}
	if strings.Contains(out, "by request size") {
		t.Errorf("a latency run of one size printed the size table:\n%s", out)
	}
}

func TestBenchJSON(t *testing.T) {
	refuseRaw(t)
	code, out, errOut := runHoma(context.Background(), "bench", "--vs", "tcp", "--count", "100", "--json", "--addr-family", "4")
	if code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, errOut)
	}
	if !strings.Contains(errOut, "skipping homa (Homa over raw IP") {
		t.Errorf("stderr %q does not say the raw row is skipped", errOut)
	}
	var rep bench.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v in:\n%s", err, out)
	}
	if len(rep.Results) != 2 || rep.Results[0].Protocol != "homa-udp" || rep.Results[1].Protocol != "tcp" {
		t.Fatalf("results %+v, want homa-udp and tcp", rep.Results)
	}
	for _, r := range rep.Results {
		if r.Count != 100 || r.MedianUS <= 0 || r.P999US < r.MedianUS || r.MedianVsTCP == nil {
			t.Errorf("implausible row %+v", r)
		}
	}
	if r := rep.Results[1]; *r.MedianVsTCP != 1 {
		t.Errorf("tcp median is %v of itself, want 1", *r.MedianVsTCP)
	}
}

// TestPingReplySize: ping against a server that replies a fixed size
// says so, and names --reply-size.
func TestPingReplySize(t *testing.T) {
	addr, _ := startServe(t, "--proto", "homa-udp", "--addr", fmt.Sprintf("127.0.0.1:%d", freePort(t)), "--reply-size", "10")
	code, _, errOut := runHoma(context.Background(), "ping", "--udp", "--addr", addr.String(), "--count", "3", "--warmup", "0")
	if code != 1 || !strings.Contains(errOut, "got 10 back") || !strings.Contains(errOut, "homa serve --reply-size 10?") {
		t.Errorf("exit %d, stderr %q; want 1 and a hint about --reply-size", code, errOut)
	}
}

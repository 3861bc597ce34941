package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/homa-go/homa/sock"
)

// TestPrometheus runs a real Prometheus server against "homa serve
// --metrics": the homa binary serves on loopback, Prometheus scrapes it
// every second, the test makes a known number of RPCs, and then asks
// Prometheus' HTTP API for the server's counters and histograms until
// they show exactly those RPCs.
func TestPrometheus(t *testing.T) {
	promBin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("the prometheus binary is not installed (Debian package prometheus; .ci/run installs it)")
	}
	if testing.Short() {
		t.Skip("builds the homa binary and runs Prometheus")
	}
	dir := t.TempDir()
	homaBin := buildHoma(t, dir)

	transport, args := sock.Raw, []string{}
	if s, err := sock.Open(netip.MustParseAddrPort("127.0.0.1:0"), nil); errors.Is(err, sock.ErrPermission) {
		t.Log("raw IP sockets not permitted: using UDP encapsulation")
		transport, args = sock.UDP, []string{"--udp"}
	} else if err != nil {
		t.Fatal(err)
	} else {
		s.Close()
	}
	server := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), freePort(t))
	metricsAddr := freeTCPAddr(t)
	serveArgs := append([]string{"serve", "--addr", server.String(), "--metrics", metricsAddr}, args...)
	startProcess(t, "homa serve", homaBin, serveArgs, "homa: echo server on")

	promAddr := freeTCPAddr(t)
	config := filepath.Join(dir, "prometheus.yml")
	writeFile(t, config, fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: homa
    static_configs:
      - targets: ['%s']
`, metricsAddr))
	startProcess(t, "prometheus", promBin, []string{
		"--config.file=" + config,
		"--storage.tsdb.path=" + filepath.Join(dir, "tsdb"),
		"--web.listen-address=" + promAddr,
		"--log.level=warn",
	}, "")

	// The RPCs: 37 echoes of 100 bytes.
	const rpcs, size = 37, 100
	c, err := sock.Open(netip.MustParseAddrPort("127.0.0.1:0"), &sock.Config{Transport: transport})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range rpcs {
		m, err := c.Call(ctx, server, make([]byte, size))
		if err != nil {
			t.Fatalf("RPC %d: %v", i, err)
		}
		m.Release()
	}

	// Prometheus' view of the server, once a scrape after the RPCs is in.
	want := map[string]float64{
		`up{job="homa"}`: 1,
		`homa_rpcs_started_total{role="server",socket="server"}`:                                       rpcs,
		`homa_rpcs_completed_total{role="server",socket="server"}`:                                     rpcs,
		`homa_requests_delivered_total{socket="server"}`:                                               rpcs,
		`homa_request_bytes_total{role="server",socket="server"}`:                                      rpcs * size,
		`homa_response_bytes_total{role="server",socket="server"}`:                                     rpcs * size,
		`homa_message_size_bytes_count{direction="received",kind="request",socket="server"}`:           rpcs,
		`homa_message_size_bytes_sum{direction="sent",kind="response",socket="server"}`:                rpcs * size,
		`homa_message_size_bytes_bucket{direction="received",kind="request",le="128",socket="server"}`: rpcs,
		`homa_message_size_bytes_bucket{direction="received",kind="request",le="64",socket="server"}`:  0,
		`homa_packets_dropped_total{reason="bad_field",socket="server"}`:                               0,
	}
	api := &promAPI{base: "http://" + promAddr}
	qctx, qcancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer qcancel()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := api.queryAll(qctx, want)
		diff := differences(got, want)
		if err == nil && diff == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus does not show the %d RPCs after 30 s: %v%s", rpcs, err, diff)
		}
		time.Sleep(500 * time.Millisecond)
	}
	// The latency histograms are there too, empty: a server starts no
	// RPCs.
	if v, err := api.query(qctx, `sum(homa_rpc_duration_seconds_count{socket="server"})`); err != nil || v != 0 {
		t.Errorf("server latency count: %v %v, want 0 (a server starts no RPCs)", v, err)
	}
}

// buildHoma builds this command into dir and returns the binary's path.
func buildHoma(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "homa")
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = "/usr/local/go/bin/go"
	}
	out, err := exec.Command(goBin, "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// startProcess starts a program that runs until the test ends, when it
// gets SIGTERM (and SIGKILL if it has not exited 10 s later). With ready
// set, startProcess waits until the program prints a line starting with
// it. The program's output goes to the test log.
func startProcess(t *testing.T, name, bin string, args []string, ready string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout // one pipe for both
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	exited := make(chan error, 1)
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default: // nobody reads any more
			}
		}
		exited <- cmd.Wait()
		close(lines)
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		for l := range lines {
			t.Logf("%s: %s", name, l)
		}
	})
	if ready == "" {
		return
	}
	timeout := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("%s exited before it was ready", name)
			}
			t.Logf("%s: %s", name, l)
			if strings.HasPrefix(l, ready) {
				return
			}
		case <-timeout:
			t.Fatalf("%s not ready after 30 s", name)
		}
	}
}

// freeTCPAddr returns a loopback address with a TCP port free now.
func freeTCPAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func writeFile(t *testing.T, name, content string) {
	t.Helper()
	if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// promAPI queries Prometheus' HTTP API.
type promAPI struct {
	base string
}

// query returns the value of an instant query that yields one sample.
func (p *promAPI) query(ctx context.Context, q string) (float64, error) {
	u := p.base + "/api/v1/query?" + url.Values{"query": {q}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	var r struct {
		Status string
		Error  string
		Data   struct {
			Result []struct {
				Value [2]any
			}
		}
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return 0, fmt.Errorf("query %s: %v: %s", q, err, body)
	}
	if r.Status != "success" {
		return 0, fmt.Errorf("query %s: %s", q, r.Error)
	}
	if len(r.Data.Result) != 1 {
		return 0, fmt.Errorf("query %s: %d samples, want 1", q, len(r.Data.Result))
	}
	s, _ := r.Data.Result[0].Value[1].(string)
	var v float64
	if _, err := fmt.Sscan(s, &v); err != nil {
		return 0, fmt.Errorf("query %s: value %q", q, s)
	}
	return v, nil
}

// queryAll queries every series of want.
func (p *promAPI) queryAll(ctx context.Context, want map[string]float64) (map[string]float64, error) {
	got := map[string]float64{}
	for q := range want {
		v, err := p.query(ctx, q)
		if err != nil {
			return got, err
		}
		got[q] = v
	}
	return got, nil
}

// differences lists the queries of want whose value got lacks or
// differs, one per line; empty when there are none.
func differences(got, want map[string]float64) string {
	var b strings.Builder
	for q, w := range want {
		if v, ok := got[q]; !ok || v != w {
			fmt.Fprintf(&b, "\n%s = %v (present %v), want %v", q, v, ok, w)
		}
	}
	return b.String()
}

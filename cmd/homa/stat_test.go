package main

import (
	"context"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/homa-go/homa/homa"
	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// statServer is an in-process metrics endpoint over an echo server and a
// client on an in-memory network. Before each scrape it makes rpcs RPCs
// of 100 bytes, so every report of homa stat shows exactly that many.
type statServer struct {
	t              *testing.T
	server, client *homa.Endpoint
	rpcs           int
	scrapes        int
	mu             sync.Mutex
	handler        http.Handler
	wg             sync.WaitGroup
}

func newStatServer(t *testing.T, rpcs int) *httptest.Server {
	nw := memnet.New(memnet.Config{Seed: 1})
	sc, err := nw.Open(netip.MustParseAddr("10.0.0.1"), 500)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := nw.Open(netip.MustParseAddr("10.0.0.2"), 0)
	if err != nil {
		t.Fatal(err)
	}
	s := &statServer{t: t, server: homa.NewEndpoint(sc, homa.Config{}), client: homa.NewEndpoint(cc, homa.Config{}), rpcs: rpcs}
	s.wg.Go(func() {
		for {
			m, err := s.server.Recv(context.Background(), 0)
			if err != nil {
				return
			}
			s.server.Reply(m.Peer.Addr(), m.ID, m.Data)
			m.Release()
		}
	})
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		metrics.NewCollector(s.client.Stats, prometheus.Labels{"socket": "client"}),
		metrics.NewCollector(s.server.Stats, prometheus.Labels{"socket": "server"}),
		metrics.NewBufferCollector(nil),
		collectors.NewGoCollector(),
	)
	s.handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	srv := httptest.NewServer(s)
	t.Cleanup(func() {
		srv.Close()
		s.client.Close()
		s.server.Close()
		s.wg.Wait()
	})
	return srv
}

func (s *statServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.scrapes++
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	for range s.rpcs {
		id, err := s.client.Send(s.server.LocalAddr(), make([]byte, 100), 0)
		if err != nil {
			s.t.Error(err)
			return
		}
		m, err := s.client.Recv(ctx, id)
		if err != nil || m.Err != nil {
			s.t.Errorf("RPC: %v %+v", err, m)
			return
		}
		m.Release()
	}
	s.handler.ServeHTTP(w, r)
}

// TestStat: homa stat against a live endpoint prints, per interval, the
// counters that moved by exactly the RPCs made, the gauges, and the
// histograms with their counts and estimates.
func TestStat(t *testing.T) {
	srv := newStatServer(t, 5)
	code, out, errOut := runHoma(context.Background(), "stat", "--url", srv.URL+"/metrics", "--interval", "20ms", "--count", "2")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	t.Log(out)
	if !strings.HasPrefix(out, "homa stat: "+srv.URL+"/metrics: ") {
		t.Errorf("no header line:\n%s", out)
	}
	if !strings.Contains(out, "\n"+quantileNote+"\n") {
		t.Errorf("the header does not say how p50 and p99 are estimated:\n%s", out)
	}
	reports := strings.Split(out, "\n--- ")[1:]
	if len(reports) != 2 {
		t.Fatalf("%d reports, want 2:\n%s", len(reports), out)
	}
	for i, r := range reports {
		for _, want := range []string{
			`homa_rpcs_completed_total{role="client",socket="client"} +5 +[\d.]+$`,
			`homa_rpcs_started_total{role="server",socket="server"} +5 +[\d.]+$`,
			`homa_request_bytes_total{role="server",socket="server"} +500 +[\d.]+$`,
			`homa_peers{socket="client"} +1 +\+0$`,
			// Five sizes of 100 B in (64, 128]: p50 and p99 interpolated.
			`homa_message_size_bytes{direction="sent",kind="request",socket="client"} +5 +[\d.]+ +100 +96 +127.4$`,
			`homa_rpc_duration_seconds{size_class="1k",socket="client"} +5 +[\d.]+ +[\d.]+[µm]?s +[\d.]+[µm]?s +[\d.]+[µm]?s$`,
		} {
			if !regexp.MustCompile(`(?m)^` + want).MatchString(r) {
				t.Errorf("report %d lacks %s:\n%s", i, want, r)
			}
		}
		for _, absent := range []string{
			`homa_rpcs_started_total{role="client",socket="server"}`, // zero change
			`homa_packets_dropped_total`,                             // no drops
			`homa_rpc_duration_seconds{size_class="1m"`,              // no observations
			`go_goroutines`, // filtered out
		} {
			if strings.Contains(r, absent) {
				t.Errorf("report %d shows %s:\n%s", i, absent, r)
			}
		}
	}
}

func TestStatMatch(t *testing.T) {
	srv := newStatServer(t, 1)
	code, out, errOut := runHoma(context.Background(), "stat", "--url", srv.URL+"/metrics", "--interval", "10ms", "--count", "1", "--match", "^homa_buffer_gets")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !regexp.MustCompile(`(?m)^homa_buffer_gets_total +\d+ +[\d.]+$`).MatchString(out) || strings.Contains(out, "homa_rpcs") {
		t.Errorf("--match shows other metrics or not the buffer gets:\n%s", out)
	}
}

func TestStatErrors(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"--url", srv.URL + "/metrics"}, 1, "404 Not Found"},
		{[]string{"--url", closed.URL + "/metrics"}, 1, "connect"},
		{[]string{"--url", "ftp://x/metrics"}, 2, "not an http(s) URL"},
		{[]string{"--interval", "0s"}, 2, "--interval must be positive"},
		{[]string{"--count", "-1"}, 2, "--count must not be negative"},
		{[]string{"--match", "("}, 2, "missing closing )"},
	} {
		code, _, errOut := runHoma(context.Background(), append([]string{"stat"}, tc.args...)...)
		if code != tc.code || !strings.Contains(errOut, tc.msg) {
			t.Errorf("%v: exit %d, %q; want %d and %q", tc.args, code, errOut, tc.code, tc.msg)
		}
	}
}

func TestQuantile(t *testing.T) {
	inf := math.Inf(1)
	b := []bucket{{10, 0}, {20, 4}, {40, 8}, {inf, 10}}
	for _, tc := range []struct {
		q    float64
		want float64
	}{
		{0, 10},    // the first bucket is empty: its bound
		{0.2, 15},  // rank 2 of 4 in (10, 20]
		{0.4, 20},  // rank 4: the top of (10, 20]
		{0.6, 30},  // rank 6 of 4..8 in (20, 40]
		{0.99, 40}, // in +Inf: the highest finite bound
	} {
		if got := quantile(tc.q, b, 10); got != tc.want {
			t.Errorf("quantile(%v) = %v, want %v", tc.q, got, tc.want)
		}
	}
}

// TestDiff: counter resets, gauges and summaries between two scrapes.
func TestDiff(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	prev, err := parseMetrics(strings.NewReader(`
# TYPE homa_a_total counter
homa_a_total 100
# TYPE homa_b_total counter
homa_b_total{x="1"} 7
# TYPE homa_g gauge
homa_g{x="1"} 5
homa_g{x="2"} 0
homa_g{x="3"} 2
# TYPE homa_s summary
homa_s_sum 10
homa_s_count 2
`), t0)
	if err != nil {
		t.Fatal(err)
	}
	cur, err := parseMetrics(strings.NewReader(`
# TYPE homa_a_total counter
homa_a_total 30
# TYPE homa_b_total counter
homa_b_total{x="1"} 7
homa_b_total{x="2"} 3
# TYPE homa_g gauge
homa_g{x="1"} 5
homa_g{x="2"} 0
homa_g{x="3"} 0
# TYPE homa_s summary
homa_s_sum 40
homa_s_count 5
# TYPE other_total counter
other_total 9
`), t0.Add(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	writeChanges(&out, prev, cur, regexp.MustCompile("^homa_"))
	for _, want := range []string{
		`homa_a_total +30 +15$`,        // reset: the whole value
		`homa_b_total{x="2"} +3 +1.5$`, // new series
		`homa_g{x="1"} +5 +\+0$`,       // unchanged but not zero
		`homa_g{x="3"} +0 +-2$`,        // changed to zero
		`homa_s +3 +1.5 +10 +- +-$`,    // summary: mean only
		`--- 03:04:07 \(2.00s\)$`,      // time and interval
		`counter +delta +/s$`,          // headers
		`histogram +count +/s +mean +p50 +p99$`,
	} {
		if !regexp.MustCompile(`(?m)^` + want).MatchString(out.String()) {
			t.Errorf("report lacks %s:\n%s", want, out.String())
		}
	}
	for _, absent := range []string{`homa_b_total{x="1"}`, `homa_g{x="2"}`, `other_total`} {
		if strings.Contains(out.String(), absent) {
			t.Errorf("report shows %s:\n%s", absent, out.String())
		}
	}
	out.Reset()
	writeChanges(&out, cur, cur, regexp.MustCompile("^homa_a"))
	if !strings.HasSuffix(out.String(), "no change\n") {
		t.Errorf("no change reported as:\n%s", out.String())
	}
}

func TestUnits(t *testing.T) {
	sec, num := unitOf("x_seconds"), unitOf("x_bytes")
	for _, tc := range []struct {
		got, want string
	}{
		{sec(12.345e-6), "12.3µs"}, {sec(0.0123456), "12.346ms"}, {sec(2.5), "2.5s"}, {sec(5e-8), "50ns"},
		{sec(math.NaN()), "-"}, {num(100), "100"}, {num(127.36), "127.4"}, {num(math.NaN()), "-"},
		{signed(-2), "-2"}, {signed(0), "+0"}, {number(1e20), "1e+20"}, {number(27083.3), "27083"}, {number(0.125), "0.125"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

// TestMetricsFlag: ping and demo serve metrics while they run and stop
// serving when they end; a malformed address is a usage error.
func TestMetricsFlag(t *testing.T) {
	ctx := context.Background()
	code, out, errOut := runHoma(ctx, "demo", "--count", "20", "--metrics", "127.0.0.1:0")
	if code != 0 {
		t.Fatalf("demo: exit %d: %s", code, errOut)
	}
	m := regexp.MustCompile(`(?m)^homa: metrics at (http://127\.0\.0\.1:\d+/metrics)$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("demo does not say where its metrics are:\n%s", out)
	}
	if resp, err := http.Get(m[1]); err == nil {
		resp.Body.Close()
		t.Errorf("metrics still served after demo ended")
	}
	for _, cmd := range []string{"serve", "ping", "demo"} {
		code, _, errOut := runHoma(ctx, cmd, "--metrics", "no-port")
		if code != 2 || !strings.Contains(errOut, `--metrics "no-port"`) {
			t.Errorf("%s --metrics no-port: exit %d, %q; want 2", cmd, code, errOut)
		}
	}
	busy := freeTCPAddr(t)
	ln, err := net.Listen("tcp", busy)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	code, _, errOut = runHoma(ctx, "demo", "--count", "1", "--metrics", busy)
	if code != 1 || !strings.Contains(errOut, "address already in use") {
		t.Errorf("demo --metrics on a busy port: exit %d, %q; want 1", code, errOut)
	}
}

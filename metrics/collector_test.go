package metrics_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/homa-go/homa/contract"
	"github.com/homa-go/homa/homa"
	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/homa/wire"
	"github.com/homa-go/homa/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
)

// echoPair is an echo server and a client endpoint on an in-memory
// network.
type echoPair struct {
	server, client *homa.Endpoint
	done           chan struct{}
}

func newEchoPair(t *testing.T) *echoPair {
	t.Helper()
	nw := memnet.New(memnet.Config{Seed: 1, MTU: 1500})
	sc, err := nw.Open(netip.MustParseAddr("10.0.0.1"), 500)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := nw.Open(netip.MustParseAddr("10.0.0.2"), 0)
	if err != nil {
		t.Fatal(err)
	}
	p := &echoPair{server: homa.NewEndpoint(sc, homa.Config{}), client: homa.NewEndpoint(cc, homa.Config{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for {
			m, err := p.server.Recv(context.Background(), 0)
			if err != nil {
				return
			}
			p.server.Reply(m.Peer.Addr(), m.ID, m.Data)
			m.Release()
		}
	}()
	t.Cleanup(func() {
		p.client.Close()
		p.server.Close()
		<-p.done
	})
	return p
}

// call does one echo RPC of n bytes.
func (p *echoPair) call(t *testing.T, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	id, err := p.client.Send(p.server.LocalAddr(), make([]byte, n), 0)
	if err != nil {
		t.Fatal(err)
	}
	m, err := p.client.Recv(ctx, id)
	if err != nil || m.Err != nil || len(m.Data) != n {
		t.Fatalf("RPC of %d bytes: %v %+v", n, err, m)
	}
	m.Release()
}

// TestRealRPCs: after 3 RPCs of 100 bytes and 2 of 50,000 bytes, the
// client's and the server's metrics hold exactly those RPCs, with their
// help and type.
func TestRealRPCs(t *testing.T) {
	p := newEchoPair(t)
	for range 3 {
		p.call(t, 100)
	}
	for range 2 {
		p.call(t, 50_000)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(
		metrics.NewCollector(p.client.Stats, prometheus.Labels{"socket": "client"}),
		metrics.NewCollector(p.server.Stats, prometheus.Labels{"socket": "server"}),
	)
	want := `
# HELP homa_rpcs_started_total RPCs started: client RPCs sent, server RPCs whose request began to arrive.
# TYPE homa_rpcs_started_total counter
homa_rpcs_started_total{role="client",socket="client"} 5
homa_rpcs_started_total{role="client",socket="server"} 0
homa_rpcs_started_total{role="server",socket="client"} 0
homa_rpcs_started_total{role="server",socket="server"} 5
# HELP homa_rpcs_completed_total RPCs completed: client RPCs whose response arrived whole, server RPCs answered.
# TYPE homa_rpcs_completed_total counter
homa_rpcs_completed_total{role="client",socket="client"} 5
homa_rpcs_completed_total{role="client",socket="server"} 0
homa_rpcs_completed_total{role="server",socket="client"} 0
homa_rpcs_completed_total{role="server",socket="server"} 5
# HELP homa_request_bytes_total Request bytes: sent by clients, received by servers.
# TYPE homa_request_bytes_total counter
homa_request_bytes_total{role="client",socket="client"} 100300
homa_request_bytes_total{role="client",socket="server"} 0
homa_request_bytes_total{role="server",socket="client"} 0
homa_request_bytes_total{role="server",socket="server"} 100300
# HELP homa_message_size_bytes Lengths of complete messages, by direction and kind (clients send requests and receive responses, servers the reverse).
# TYPE homa_message_size_bytes histogram
` + sizeHistogram("received", "request", "client", 0, 0, 0) +
		sizeHistogram("received", "request", "server", 3, 2, 100300) +
		sizeHistogram("received", "response", "client", 3, 2, 100300) +
		sizeHistogram("received", "response", "server", 0, 0, 0) +
		sizeHistogram("sent", "request", "client", 3, 2, 100300) +
		sizeHistogram("sent", "request", "server", 0, 0, 0) +
		sizeHistogram("sent", "response", "client", 0, 0, 0) +
		sizeHistogram("sent", "response", "server", 3, 2, 100300)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"homa_rpcs_started_total", "homa_rpcs_completed_total", "homa_request_bytes_total", "homa_message_size_bytes"); err != nil {
		t.Error(err)
	}

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	// Latency: 3 RPCs in the 1k class, 2 in the 100k class, each in some
	// bucket between 0 and +Inf.
	lat := find(mfs, "homa_rpc_duration_seconds")
	for class, n := range map[string]uint64{"1k": 3, "10k": 0, "100k": 2, "1m": 0} {
		h := lat[`size_class="`+class+`",socket="client"`].GetHistogram()
		if h.GetSampleCount() != n || (n > 0) != (h.GetSampleSum() > 0) {
			t.Errorf("latency of class %s: %d RPCs, sum %v s; want %d", class, h.GetSampleCount(), h.GetSampleSum(), n)
		}
		b := h.GetBucket()
		if len(b) != 24 || b[0].GetUpperBound() != 5e-6 || b[23].GetUpperBound() != 1 {
			t.Fatalf("latency buckets %v", b)
		}
		for i := 1; i < len(b); i++ {
			if b[i].GetCumulativeCount() < b[i-1].GetCumulativeCount() {
				t.Errorf("latency buckets not cumulative: %v", b)
			}
		}
	}
	// Packets: the client sent DATA for every request, the server GRANTs
	// for the two long ones.
	if v := value(find(mfs, "homa_packets_sent_total"), `socket="client",type="data"`); v < 5+2*34 {
		t.Errorf("client sent %v DATA packets, want at least %d", v, 5+2*34)
	}
	if v := value(find(mfs, "homa_packets_sent_total"), `socket="server",type="grant"`); v == 0 {
		t.Error("server sent no GRANTs")
	}
	if n := len(find(mfs, "homa_packets_dropped_total")); n != 2*int(contract.NumDropReasons) {
		t.Errorf("%d series of drops, want %d reasons for each socket", n, contract.NumDropReasons)
	}
	if v := value(find(mfs, "homa_peers"), `socket="client"`); v != 1 {
		t.Errorf("client knows %v peers, want 1", v)
	}
}

// sizeHistogram is the text form of one message size series holding small
// messages of at most 128 bytes and large ones of at most 65536 bytes.
func sizeHistogram(dir, kind, socket string, small, large uint64, sum int) string {
	var b strings.Builder
	labels := fmt.Sprintf(`direction=%q,kind=%q,socket=%q`, dir, kind, socket)
	for s := 6; s <= 20; s++ {
		n := uint64(0)
		if 1<<s >= 128 {
			n += small
		}
		if 1<<s >= 65536 {
			n += large
		}
		fmt.Fprintf(&b, "homa_message_size_bytes_bucket{%s,le=\"%d\"} %d\n", labels, 1<<s, n)
	}
	fmt.Fprintf(&b, "homa_message_size_bytes_bucket{%s,le=\"+Inf\"} %d\n", labels, small+large)
	fmt.Fprintf(&b, "homa_message_size_bytes_sum{%s} %d\n", labels, sum)
	fmt.Fprintf(&b, "homa_message_size_bytes_count{%s} %d\n", labels, small+large)
	return b.String()
}

// find returns the metrics of one family by their label pairs, written
// as name="value" joined by commas in the order Gather sorts them.
func find(mfs []*dto.MetricFamily, name string) map[string]*dto.Metric {
	out := map[string]*dto.Metric{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var l []string
			for _, lp := range m.GetLabel() {
				l = append(l, fmt.Sprintf("%s=%q", lp.GetName(), lp.GetValue()))
			}
			out[strings.Join(l, ",")] = m
		}
	}
	return out
}

func value(ms map[string]*dto.Metric, labels string) float64 {
	m := ms[labels]
	if m.GetCounter() != nil {
		return m.GetCounter().GetValue()
	}
	return m.GetGauge().GetValue()
}

// fakeStats is a snapshot with a distinct value in every field, to check
// that each metric reads the right one.
func fakeStats() contract.Stats {
	h := func(base uint64) contract.Histogram {
		return contract.Histogram{Bounds: []uint64{1000, 2_000_000}, Counts: []uint64{base, 1, 2}, Count: base + 3, Sum: base * 1000}
	}
	s := contract.Stats{
		RxPackets:  map[wire.Type]uint64{wire.TypeData: 1, wire.TypeAck: 2},
		RxBytes:    map[wire.Type]uint64{wire.TypeData: 3, wire.TypeAck: 4},
		TxPackets:  map[wire.Type]uint64{wire.TypeGrant: 5, wire.TypeNeedAck: 6},
		TxBytes:    map[wire.Type]uint64{wire.TypeGrant: 7, wire.TypeNeedAck: 8},
		TxPriority: [8]uint64{9, 0, 0, 0, 0, 0, 0, 10},
		Drops:      map[contract.DropReason]uint64{contract.DropShort: 11, contract.DropStale: 12},

		DuplicatePackets: 13, GrantsSent: 14, Retransmits: 15, ResentPackets: 16,
		RPCsStarted: 17, RPCsCompleted: 18, RPCsAborted: 19, RPCTimeouts: 20,
		ServerRPCsStarted: 21, RequestsReceived: 22, ServerRPCsCompleted: 23, ServerRPCsFreed: 24,
		ReadErrors: 25, WriteErrors: 26, ResendsSent: 27, NeedAcksSent: 28, PeerTimeouts: 29,
		Reclaimed: 30, CutoffsSent: 31,
		RequestBytesSent: 32, RequestBytesReceived: 33, ResponseBytesSent: 34, ResponseBytesReceived: 35,
		ClientRPCs: 36, ServerRPCs: 37, Peers: 38, RTTSamples: 90, ResendsDeferred: 91, NeedAcksDeferred: 92, TimersRun: 93, ServersUnreachable: 94,
		LandedPackets: 92, MovedPackets: 93,
	}
	s.Grants.GrantedBytes, s.Grants.FIFOGrants, s.Grants.FIFOBytes, s.Grants.Grantable, s.Grants.Incoming = 39, 40, 41, 42, 43
	s.Grants.Limit = 95
	s.IncomingLent = 96
	s.Pacer.Queued, s.Pacer.QueuedBytes, s.Pacer.Sends, s.Pacer.SentBytes, s.Pacer.Throttled, s.Pacer.FIFOPicks = 44, 45, 46, 47, 48, 49
	s.Pacer.Slices, s.Pacer.LinkAdds, s.Pacer.Returns = 97, 98, 99
	for c := range s.Latency {
		s.Latency[c] = h(uint64(c) + 50)
	}
	for d := range s.MessageSizes {
		for k := range s.MessageSizes[d] {
			s.MessageSizes[d][k] = h(uint64(60 + 2*d + k))
		}
	}
	return s
}

// TestEveryField: each metric reports its own field of the snapshot.
func TestEveryField(t *testing.T) {
	c := metrics.NewCollector(func() contract.Stats { return fakeStats() }, nil)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, labels string
		want         float64
	}{
		{"homa_packets_received_total", `type="data"`, 1},
		{"homa_packets_received_total", `type="ack"`, 2},
		{"homa_packets_received_total", `type="freeze"`, 0},
		{"homa_packet_bytes_received_total", `type="data"`, 3},
		{"homa_packet_bytes_received_total", `type="ack"`, 4},
		{"homa_packets_sent_total", `type="grant"`, 5},
		{"homa_packets_sent_total", `type="need_ack"`, 6},
		{"homa_packet_bytes_sent_total", `type="grant"`, 7},
		{"homa_packet_bytes_sent_total", `type="need_ack"`, 8},
		{"homa_priority_packets_sent_total", `priority="0"`, 9},
		{"homa_priority_packets_sent_total", `priority="7"`, 10},
		{"homa_packets_dropped_total", `reason="short"`, 11},
		{"homa_packets_dropped_total", `reason="stale"`, 12},
		{"homa_packets_dropped_total", `reason="limit"`, 0},
		{"homa_duplicate_packets_total", ``, 13},
		{"homa_landed_packets_total", `placed="in_place"`, 92},
		{"homa_landed_packets_total", `placed="moved"`, 93},
		{"homa_grants_sent_total", ``, 14},
		{"homa_retransmissions_total", ``, 15},
		{"homa_resent_packets_total", ``, 16},
		{"homa_rpcs_started_total", `role="client"`, 17},
		{"homa_rpcs_completed_total", `role="client"`, 18},
		{"homa_rpcs_aborted_total", ``, 19},
		{"homa_rpc_timeouts_total", ``, 20},
		{"homa_rpcs_started_total", `role="server"`, 21},
		{"homa_requests_delivered_total", ``, 22},
		{"homa_rpcs_completed_total", `role="server"`, 23},
		{"homa_server_rpcs_acked_total", ``, 24},
		{"homa_io_errors_total", `op="read"`, 25},
		{"homa_io_errors_total", `op="write"`, 26},
		{"homa_resends_issued_total", ``, 27},
		{"homa_peer_timeouts_total", ``, 29},
		{"homa_server_rpcs_reclaimed_total", ``, 30},
		{"homa_rtt_samples_total", ``, 90},
		{"homa_resends_deferred_total", ``, 91},
		{"homa_need_acks_deferred_total", ``, 92},
		{"homa_timers_run_total", ``, 93},
		{"homa_server_rpcs_unreachable_total", ``, 94},
		{"homa_request_bytes_total", `role="client"`, 32},
		{"homa_request_bytes_total", `role="server"`, 33},
		{"homa_response_bytes_total", `role="server"`, 34},
		{"homa_response_bytes_total", `role="client"`, 35},
		{"homa_active_rpcs", `role="client"`, 36},
		{"homa_active_rpcs", `role="server"`, 37},
		{"homa_peers", ``, 38},
		{"homa_granted_bytes_total", ``, 39},
		{"homa_fifo_grants_total", ``, 40},
		{"homa_fifo_granted_bytes_total", ``, 41},
		{"homa_grantable_messages", ``, 42},
		{"homa_incoming_bytes", ``, 43},
		{"homa_incoming_limit_bytes", ``, 95},
		{"homa_incoming_lent_bytes", ``, 96},
		{"homa_pacer_queue_messages", ``, 44},
		{"homa_pacer_queue_bytes", ``, 45},
		{"homa_pacer_packets_total", ``, 46},
		{"homa_pacer_bytes_total", ``, 47},
		{"homa_pacer_throttled_total", ``, 48},
		{"homa_pacer_fifo_picks_total", ``, 49},
		{"homa_pacer_link_slices_total", ``, 97},
		{"homa_pacer_link_writes_total", ``, 97 + 98 + 99},
	} {
		ms := find(mfs, tc.name)
		if _, ok := ms[tc.labels]; !ok {
			t.Errorf("%s{%s} missing", tc.name, tc.labels)
			continue
		}
		if got := value(ms, tc.labels); got != tc.want {
			t.Errorf("%s{%s} = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}
	if n := len(find(mfs, "homa_packets_sent_total")); n != 9 {
		t.Errorf("%d packet types, want 9", n)
	}
	if n := len(find(mfs, "homa_packets_dropped_total")); n != int(contract.NumDropReasons) {
		t.Errorf("%d drop reasons, want %d", n, contract.NumDropReasons)
	}

	// Histograms: cumulative buckets, nanoseconds in seconds.
	want := `
# HELP homa_rpc_duration_seconds Time from sending a request to receiving the whole response, of client RPCs that completed, by size class (the larger of request and response: up to 1k, 10k, 100k or 1m bytes).
# TYPE homa_rpc_duration_seconds histogram
homa_rpc_duration_seconds_bucket{size_class="10k",le="1e-06"} 51
homa_rpc_duration_seconds_bucket{size_class="10k",le="0.002"} 52
homa_rpc_duration_seconds_bucket{size_class="10k",le="+Inf"} 54
homa_rpc_duration_seconds_sum{size_class="10k"} 5.1e-05
homa_rpc_duration_seconds_count{size_class="10k"} 54
`
	if err := testutil.CollectAndCompare(&oneSeries{c, `size_class="10k"`}, strings.NewReader(want), "homa_rpc_duration_seconds"); err != nil {
		t.Error(err)
	}
	sizes := find(mfs, "homa_message_size_bytes")
	if h := sizes[`direction="received",kind="response"`].GetHistogram(); h.GetSampleCount() != 63+3 || h.GetSampleSum() != 63000 ||
		h.GetBucket()[0].GetUpperBound() != 1000 || h.GetBucket()[1].GetCumulativeCount() != 64 {
		t.Errorf("received responses: %v", h)
	}
}

// oneSeries passes on only the metrics of c whose labels contain sub.
type oneSeries struct {
	c   prometheus.Collector
	sub string
}

func (o *oneSeries) Describe(ch chan<- *prometheus.Desc) { o.c.Describe(ch) }

func (o *oneSeries) Collect(ch chan<- prometheus.Metric) {
	all := make(chan prometheus.Metric)
	go func() {
		o.c.Collect(all)
		close(all)
	}()
	for m := range all {
		var pb dto.Metric
		if err := m.Write(&pb); err == nil {
			for _, l := range pb.GetLabel() {
				if fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()) == o.sub {
					ch <- m
				}
			}
		}
	}
}

// TestLint: names, units, help and types follow Prometheus' conventions.
func TestLint(t *testing.T) {
	p := newEchoPair(t)
	p.call(t, 100)
	for _, c := range []prometheus.Collector{
		metrics.NewCollector(p.client.Stats, nil),
		metrics.NewBufferCollector(nil),
	} {
		problems, err := testutil.CollectAndLint(c)
		if err != nil {
			t.Fatal(err)
		}
		for _, pr := range problems {
			t.Errorf("%s: %s", pr.Metric, pr.Text)
		}
	}
}

// TestDocumented: doc.go lists exactly the metrics the collectors report.
func TestDocumented(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	var documented []string
	for _, m := range regexp.MustCompile(`(?m)^//\t(homa_[a-z_]+)`).FindAllSubmatch(doc, -1) {
		documented = append(documented, string(m[1]))
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(metrics.NewCollector(func() contract.Stats { return fakeStats() }, nil), metrics.NewBufferCollector(nil))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var reported []string
	for _, mf := range mfs {
		reported = append(reported, mf.GetName())
	}
	slices.Sort(documented)
	if !slices.Equal(documented, reported) {
		t.Errorf("documented metrics:\n%v\nreported:\n%v", documented, reported)
	}
}

// TestRegistries: collectors register nowhere by themselves; two sockets
// in one registry need different constant labels.
func TestRegistries(t *testing.T) {
	stats := func() contract.Stats { return fakeStats() }
	if n, err := prometheus.DefaultGatherer.Gather(); err != nil || len(find(n, "homa_peers")) != 0 {
		t.Fatal("a collector registered itself globally")
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(metrics.NewCollector(stats, prometheus.Labels{"socket": "a"})); err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(metrics.NewCollector(stats, prometheus.Labels{"socket": "b"})); err != nil {
		t.Fatalf("a second socket with other labels: %v", err)
	}
	if err := reg.Register(metrics.NewCollector(stats, prometheus.Labels{"socket": "a"})); err == nil {
		t.Fatal("two sockets with the same labels registered")
	}
	if n := testutil.CollectAndCount(metrics.NewBufferCollector(nil)); n != 8 {
		t.Errorf("buffer pool: %d metrics, want 8", n)
	}
}

package bench

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/homa-go/homa/internal/workload"
)

// layerRows are the rows of "--proto layers", in order.
var layerRows = []string{"homa", "erpc", "homa-udp", "erpc-udp", "stub-homa", "stub-homa-udp", "stub-tcp"}

// TestBenchLayersLatency runs the RPC layers one call at a time, with
// servers in child processes, and reports the stub's median ratios.
func TestBenchLayersLatency(t *testing.T) {
	rep, _ := benchJSON(t, "--proto", "layers", "--size", "32", "--count", "40", "--warmup", "4")
	checkRows(t, rep, layerRows, 40)
	want := []string{"stub-tcp/stub-homa median", "stub-tcp/stub-homa-udp median"}
	if !rawPermitted() {
		want = want[1:]
	}
	checkLayers(t, rep, want)
}

// TestBenchLayersThroughput keeps many RPCs in flight through every
// layer and reports erpc's rate against bare Homa's.
func TestBenchLayersThroughput(t *testing.T) {
	rep, _ := benchJSON(t, "--mode", "throughput", "--proto", "layers", "--size", "32", "--count", "400",
		"--clients", "2", "--outstanding", "20", "--calibrate", "10", "--warmup", "5")
	checkRows(t, rep, layerRows, 400)
	want := []string{"erpc/homa rate", "erpc-udp/homa-udp rate"}
	if !rawPermitted() {
		want = want[1:]
	}
	checkLayers(t, rep, want)
}

// TestBenchLayersWorkload offers open-loop load to the layers, with
// workload sizes up to Homa's largest message, which the layers carry
// cut by the room of their headers.
func TestBenchLayersWorkload(t *testing.T) {
	rep, errOut := benchJSON(t, "--mode", "workload", "--proto", "erpc-udp,stub-homa-udp,stub-tcp", "--workload", "w5",
		"--load-mbps", "200", "--duration", "200ms", "--calibrate", "5", "--clients", "2")
	checkRows(t, rep, []string{"erpc-udp", "stub-homa-udp", "stub-tcp"}, -1)
	if len(rep.Skipped) != 0 || errOut != "" {
		t.Errorf("skipped %+v, stderr %q", rep.Skipped, errOut)
	}
	// A fixed size beyond the limit is not cut: the protocol is skipped.
	rep, errOut = benchJSON(t, "--proto", "erpc-udp,homa-udp", "--size", "1000000", "--count", "2", "--warmup", "0")
	checkRows(t, rep, []string{"homa-udp"}, 2)
	if !strings.Contains(errOut, "1000000-byte messages exceed its 999944-byte limit; skipping erpc-udp") {
		t.Errorf("stderr %q", errOut)
	}
}

// checkLayers checks that rep has exactly the ratios named, each
// consistent with its rows.
func checkLayers(t *testing.T, rep *Report, want []string) {
	t.Helper()
	var got []string
	for _, l := range rep.Layers {
		got = append(got, l.Ratio)
		if l.Value <= 0 || l.Met != (l.Value >= l.Goal) {
			t.Errorf("ratio %+v", l)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("ratios %v, want %v", got, want)
	}
}

// TestCompareLayers: each ratio is the two rows' metric, in its mode
// only, and says whether it meets its goal.
func TestCompareLayers(t *testing.T) {
	rows := []Result{
		{Protocol: "homa", RPCsPerSec: 1000, MedianUS: 10},
		{Protocol: "erpc", RPCsPerSec: 800, MedianUS: 11},
		{Protocol: "stub-homa", RPCsPerSec: 500, MedianUS: 20},
		{Protocol: "stub-tcp", RPCsPerSec: 400, MedianUS: 50},
	}
	r := &Report{Mode: Throughput, Results: rows}
	r.compareLayers()
	if len(r.Layers) != 1 || r.Layers[0] != (LayerRatio{Ratio: "erpc/homa rate", Value: 0.8, Goal: 0.85, Met: false}) {
		t.Errorf("throughput: %+v", r.Layers)
	}
	r = &Report{Mode: Latency, Results: rows}
	r.compareLayers()
	if len(r.Layers) != 1 || r.Layers[0] != (LayerRatio{Ratio: "stub-tcp/stub-homa median", Value: 2.5, Goal: 2, Met: true}) {
		t.Errorf("latency: %+v", r.Layers)
	}
	var b strings.Builder
	r.writeLayers(&b)
	if want := "RPC layers (rows of this run):\n  stub-tcp/stub-homa median  2.50  (goal >= 2: met)\n"; b.String() != want {
		t.Errorf("printed %q, want %q", b.String(), want)
	}
	r = &Report{Mode: Workload, Results: rows}
	if r.compareLayers(); len(r.Layers) != 0 {
		t.Errorf("workload: %+v", r.Layers)
	}
}

// TestLayerLimits: erpc takes at most 256 clients (Rpc ids are a byte);
// a workload's largest sizes are cut to what a layer carries, a fixed
// size beyond it is not.
func TestLayerLimits(t *testing.T) {
	erpcUDP, _ := LookupProtocol("erpc-udp")
	tcp, _ := LookupProtocol("tcp")
	w5, _ := workload.Named("w5")
	for _, tt := range []struct {
		p    Protocol
		cfg  Config
		skip bool
	}{
		{erpcUDP, Config{clients: 257, dist: workload.Fixed(32), size: 32}, true},
		{erpcUDP, Config{clients: 256, dist: workload.Fixed(32), size: 32}, false},
		{tcp, Config{clients: 257, dist: workload.Fixed(32), size: 32}, false},
		{erpcUDP, Config{clients: 1, dist: w5}, false},
		{erpcUDP, Config{clients: 1, dist: workload.Fixed(1_000_000), size: 1_000_000}, true},
		{erpcUDP, Config{clients: 1, dist: w5, replySize: 1_000_000}, true},
	} {
		if reason := tt.cfg.unsupported(tt.p); (reason != "") != tt.skip {
			t.Errorf("%s with %+v: %q, want skipped %v", tt.p.name, tt.cfg, reason, tt.skip)
		}
	}
	r := &runner{cfg: &Config{dist: w5}, p: erpcUDP}
	rng := rand.New(rand.NewPCG(1, 1))
	most := 0
	for range 20000 {
		most = max(most, r.sample(rng))
	}
	if most != erpcUDP.maxSize {
		t.Errorf("largest request %d, want %d (w5 reaches Homa's largest message)", most, erpcUDP.maxSize)
	}
}

// TestProtocolSets: "layers" names its members, in order, among others.
func TestProtocolSets(t *testing.T) {
	ps, err := parseProtocols("--proto", "tcp,layers,homa")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range ps {
		names = append(names, p.name)
	}
	if want := append([]string{"tcp"}, layerRows...); !slices.Equal(names, want) {
		t.Errorf("protocols %v, want %v", names, want)
	}
	if _, err := parseProtocols("--proto", "layer"); err == nil || !strings.Contains(err.Error(), "the set layers") {
		t.Errorf("unknown name: %v", err)
	}
}

// fakeAsync is an asyncClient in memory: started RPCs complete, in
// order, when loop runs, echoing (or failing every failEvery-th); with
// hold set, loop with a deadline completes nothing (as if the replies
// were slow).
type fakeAsync struct {
	pending   []fakeRPC
	calls     int
	failEvery int
	shorten   bool
	hold      bool
	stopped   bool
	most      int // the most RPCs in flight at once
	slotsUsed map[int]bool
	closed    bool
}

type fakeRPC struct {
	slot int
	req  []byte
	fail bool
	done completion
}

func (f *fakeAsync) call(ctx context.Context, l *lane, req []byte) ([]byte, error) {
	return nil, errors.New("fakeAsync: call")
}

func (f *fakeAsync) start(slot int, req []byte, done completion) error {
	for _, p := range f.pending {
		if p.slot == slot {
			return errors.New("fakeAsync: slot in use")
		}
	}
	if f.slotsUsed == nil {
		f.slotsUsed = make(map[int]bool)
	}
	f.slotsUsed[slot] = true
	f.calls++
	f.pending = append(f.pending, fakeRPC{slot, req, f.failEvery > 0 && f.calls%f.failEvery == 0, done})
	f.most = max(f.most, len(f.pending))
	return nil
}

func (f *fakeAsync) loop(ctx context.Context, deadline time.Time) error {
	if f.hold && !deadline.IsZero() {
		return nil
	}
	for f.stopped = false; !f.stopped; {
		if len(f.pending) == 0 {
			if !deadline.IsZero() {
				return nil
			}
			return errors.New("fakeAsync: loop with nothing in flight and no deadline")
		}
		p := f.pending[0]
		f.pending = f.pending[1:]
		resp := slices.Clone(p.req)
		var err error
		if p.fail {
			err = errFake
		}
		if f.shorten {
			resp = resp[:len(resp)-1]
		}
		p.done(p.slot, resp, err)
	}
	return nil
}

func (f *fakeAsync) stop()             { f.stopped = true }
func (f *fakeAsync) singleOwner() bool { return true }
func (f *fakeAsync) Close() error      { f.closed = true; return nil }

// TestThroughputAsync: an asyncClient's lanes are slots of one loop;
// every RPC asked for is made once, failures are counted, and the sizes
// are those the same lanes draw for other clients.
func TestThroughputAsync(t *testing.T) {
	f := &fakeAsync{failEvery: 4}
	cfg := &Config{count: 400, outstanding: 8, seed: 3}
	r := fakeRunner(cfg, f)
	cfg.Dist = workload.Fixed(50)
	m, err := r.throughput(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if f.calls != 400 || m.failed != 100 || len(m.samples) != 300 || f.most != 8 || len(f.slotsUsed) != 8 {
		t.Errorf("%d calls, %d failed, %d samples, %d at most in flight in %d slots; want 400, 100, 300, 8, 8",
			f.calls, m.failed, len(m.samples), f.most, len(f.slotsUsed))
	}

	// Sizes from a distribution: lane i draws from stream streamLanes+i,
	// as the goroutine lanes of other clients do. The fake completes in
	// order, so each of the 6 lanes makes 50 of the 300 RPCs.
	dist, _ := workload.Named("w1")
	cfg = &Config{count: 300, outstanding: 6, seed: 9}
	r = &runner{cfg: cfg, clients: []client{&fakeAsync{}}, pattern: makePattern(dist.Max())}
	cfg.Dist = dist
	m, err = r.throughput(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var got, want []int
	for _, x := range m.samples {
		got = append(got, x.Size)
	}
	for i := range 6 {
		rng := rand.New(rand.NewPCG(9, streamLanes+uint64(i)))
		for range 50 {
			want = append(want, dist.Sample(rng))
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("the lanes drew other sizes than their streams give")
	}
}

// TestThroughputAsyncMismatch: a wrong reply ends the phase with an
// error.
func TestThroughputAsyncMismatch(t *testing.T) {
	r := fakeRunner(&Config{count: 1000, outstanding: 4}, &fakeAsync{shorten: true})
	if _, err := r.throughput(context.Background()); !errors.Is(err, errMismatch) {
		t.Errorf("err = %v, want a mismatch", err)
	}
}

// TestOpenLoopAsync: arrivals that find max-outstanding RPCs in flight
// are dropped; the rest complete once the arrivals end.
func TestOpenLoopAsync(t *testing.T) {
	const maxOut = 3
	f := &fakeAsync{hold: true}
	r := fakeRunner(&Config{maxOut: maxOut, duration: 20 * time.Millisecond, loadMbps: 100, seed: 1}, f)
	m, err := r.openLoop(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if f.most != maxOut || f.calls != maxOut || m.dropped == 0 || m.failed != 0 || len(m.samples) != maxOut {
		t.Errorf("%d in flight at most, %d calls, %d samples, %d dropped, %d failed; want %d, %d, %d, some, none",
			f.most, f.calls, len(m.samples), m.dropped, m.failed, maxOut, maxOut, maxOut)
	}
	// Without holding, every arrival is made: the same count as the
	// goroutine version.
	plain := &fakeClient{}
	rp := fakeRunner(&Config{maxOut: 1 << 20, duration: 20 * time.Millisecond, loadMbps: 10, seed: 5}, plain)
	mp, err := rp.openLoop(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	counted := plain.calls.Load()
	fa := &fakeAsync{}
	ra := fakeRunner(&Config{maxOut: 1 << 20, duration: 20 * time.Millisecond, loadMbps: 10, seed: 5}, fa)
	ma, err := ra.openLoop(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if int64(fa.calls) != counted || len(ma.samples) != len(mp.samples) || ma.dropped != 0 {
		t.Errorf("async: %d calls, %d samples, %d dropped; goroutines: %d calls, %d samples",
			fa.calls, len(ma.samples), ma.dropped, counted, len(mp.samples))
	}
}

// TestLayerServerSockets: serve --metrics reports the socket of the
// stub's Homa server; erpc's Nexus keeps its sockets to itself.
func TestLayerServerSockets(t *testing.T) {
	ctx := context.Background()
	for name, want := range map[string]int{"stub-homa-udp": 1, "erpc-udp": 0} {
		p, _ := LookupProtocol(name)
		srv, err := p.serve(ctx, netip.MustParseAddrPort("127.0.0.1:0"), ServerOptions{})
		if err != nil {
			t.Fatal(err)
		}
		socks := serverSockets(srv)
		if len(socks) != want || want == 1 && socks[0].s.LocalAddr() != srv.Addr() {
			t.Errorf("%s: sockets %+v, want %d at %v", name, socks, want, srv.Addr())
		}
		if err := srv.Close(); err != nil {
			t.Error(err)
		}
	}
}

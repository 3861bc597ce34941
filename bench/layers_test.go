package bench

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/homa-go/homa/internal/tools/workload"
)

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

// TestCompareLayersFailed: a ratio of rows with failed calls is not met,
// however high, and says why.
func TestCompareLayersFailed(t *testing.T) {
	for _, rows := range [][]Result{
		{{Protocol: "homa", RPCsPerSec: 1000, Failed: 3}, {Protocol: "erpc", RPCsPerSec: 900}},
		{{Protocol: "homa", RPCsPerSec: 1000}, {Protocol: "erpc", RPCsPerSec: 900, Failed: 3}},
	} {
		r := &Report{Mode: Throughput, Results: rows}
		r.compareLayers()
		if len(r.Layers) != 1 || r.Layers[0] != (LayerRatio{Ratio: "erpc/homa rate", Value: 0.9, Goal: 0.85, Met: false, Failed: 3}) {
			t.Errorf("%+v: %+v", rows, r.Layers)
		}
		var b strings.Builder
		r.writeLayers(&b)
		if want := "RPC layers (rows of this run):\n  erpc/homa rate  0.90  (goal >= 0.85: no verdict, 3 calls failed)\n"; b.String() != want {
			t.Errorf("printed %q, want %q", b.String(), want)
		}
	}
}

// TestLayerLimits: erpc takes at most 256 clients (Rpc ids are a byte)
// and messages up to its MaxMessage, in fragments beyond one Homa
// message; a workload's largest sizes are cut to what a layer carries,
// a fixed size beyond it is not.
func TestLayerLimits(t *testing.T) {
	erpcUDP, _ := LookupProtocol("erpc-udp")
	stub, _ := LookupProtocol("stub-homa-udp")
	tcp, _ := LookupProtocol("tcp")
	w5, _ := workload.Named("w5")
	for _, tt := range []struct {
		p    Protocol
		cfg  Config
		skip bool
	}{
		{erpcUDP, Config{Clients: 257, Dist: workload.Fixed(32), Size: 32}, true},
		{erpcUDP, Config{Clients: 256, Dist: workload.Fixed(32), Size: 32}, false},
		{tcp, Config{Clients: 257, Dist: workload.Fixed(32), Size: 32}, false},
		{erpcUDP, Config{Clients: 1, Dist: w5}, false},
		{erpcUDP, Config{Clients: 1, Dist: workload.Fixed(1_000_000), Size: 1_000_000}, false},
		{erpcUDP, Config{Clients: 1, Dist: workload.FixedLarge(4_000_000), Size: 4_000_000}, false},
		{erpcUDP, Config{Clients: 1, Dist: workload.FixedLarge(erpcMaxMessage + 1), Size: erpcMaxMessage + 1}, true},
		{erpcUDP, Config{Clients: 1, Dist: w5, ReplySize: 1_000_000}, false},
		{tcp, Config{Clients: 1, Dist: workload.FixedLarge(4_000_000), Size: 4_000_000}, true},
		{stub, Config{Clients: 1, Dist: workload.Fixed(1_000_000), Size: 1_000_000}, true},
	} {
		if reason := tt.cfg.unsupported(tt.p); (reason != "") != tt.skip {
			t.Errorf("%s with %+v: %q, want skipped %v", tt.p.name, tt.cfg, reason, tt.skip)
		}
	}
	if MaxSize() != erpcMaxMessage {
		t.Errorf("MaxSize() = %d, want erpc's %d", MaxSize(), erpcMaxMessage)
	}
	// w5 reaches Homa's largest message: erpc carries it whole, the
	// stub (one Homa message with its header) has it cut.
	for _, tc := range []struct {
		p    Protocol
		most int
	}{{erpcUDP, workload.MaxMessage}, {stub, stub.maxSize}} {
		r := &runner{cfg: &Config{Dist: w5}, p: tc.p}
		rng := rand.New(rand.NewPCG(1, 1))
		most := 0
		for range 20000 {
			most = max(most, r.sample(rng))
		}
		if most != tc.most {
			t.Errorf("%s: largest request %d, want %d", tc.p.name, most, tc.most)
		}
	}
}

// TestProtocolSets: "layers" names its members, in order, among others.
func TestProtocolSets(t *testing.T) {
	ps, err := ParseProtocols("--proto", "tcp,layers,homa")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range ps {
		names = append(names, p.name)
	}
	want := []string{"tcp", "homa", "erpc", "homa-udp", "erpc-udp", "stub-homa", "stub-homa-udp", "stub-tcp"}
	if !slices.Equal(names, want) {
		t.Errorf("protocols %v, want %v", names, want)
	}
	if _, err := ParseProtocols("--proto", "layer"); err == nil || !strings.Contains(err.Error(), "the set layers") {
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
	cfg := &Config{Count: 400, Outstanding: 8, Seed: 3}
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
	cfg = &Config{Count: 300, Outstanding: 6, Seed: 9}
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
	r := fakeRunner(&Config{Count: 1000, Outstanding: 4}, &fakeAsync{shorten: true})
	if _, err := r.throughput(context.Background()); !errors.Is(err, errMismatch) {
		t.Errorf("err = %v, want a mismatch", err)
	}
}

// TestOpenLoopAsync: arrivals that find max-outstanding RPCs in flight
// are dropped; the rest complete once the arrivals end.
func TestOpenLoopAsync(t *testing.T) {
	const maxOut = 3
	f := &fakeAsync{hold: true}
	r := fakeRunner(&Config{MaxOutstanding: maxOut, Duration: 20 * time.Millisecond, LoadMbps: 100, Seed: 1}, f)
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
	rp := fakeRunner(&Config{MaxOutstanding: 1 << 20, Duration: 20 * time.Millisecond, LoadMbps: 10, Seed: 5}, plain)
	mp, err := rp.openLoop(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	counted := plain.calls.Load()
	fa := &fakeAsync{}
	ra := fakeRunner(&Config{MaxOutstanding: 1 << 20, Duration: 20 * time.Millisecond, LoadMbps: 10, Seed: 5}, fa)
	ma, err := ra.openLoop(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if int64(fa.calls) != counted || len(ma.samples) != len(mp.samples) || ma.dropped != 0 {
		t.Errorf("async: %d calls, %d samples, %d dropped; goroutines: %d calls, %d samples",
			fa.calls, len(ma.samples), ma.dropped, counted, len(mp.samples))
	}
}

package bench

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/homa-go/homa/internal/tools/workload"
)

// fakeClient answers in memory: an echo, a failure every failEvery-th
// call (if > 0), or, while hold is not closed, nothing.
type fakeClient struct {
	calls     atomic.Int64
	failEvery int64
	shorten   bool          // reply one byte short
	hold      chan struct{} // if not nil, calls wait for it to close
	started   chan struct{} // if not nil, told of the first calls
	inFlight  atomic.Int64
	most      atomic.Int64 // the most calls in flight at once
}

var errFake = errors.New("fake failure")

func (f *fakeClient) call(ctx context.Context, l *lane, req []byte) ([]byte, error) {
	n := f.calls.Add(1)
	now := f.inFlight.Add(1)
	defer f.inFlight.Add(-1)
	for m := f.most.Load(); now > m && !f.most.CompareAndSwap(m, now); m = f.most.Load() {
	}
	if f.started != nil {
		select {
		case f.started <- struct{}{}:
		default:
		}
	}
	if f.hold != nil {
		select {
		case <-f.hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if f.failEvery > 0 && n%f.failEvery == 0 {
		return nil, errFake
	}
	l.buf = append(l.buf[:0], req...)
	if f.shorten {
		l.buf = l.buf[:len(l.buf)-1]
	}
	return l.buf, nil
}

func (f *fakeClient) Close() error { return nil }

func fakeRunner(cfg *Config, c client) *runner {
	cfg.Dist = workload.Fixed(50)
	return &runner{cfg: cfg, clients: []client{c}, pattern: makePattern(50)}
}

// TestThroughputCounts: failures are counted, not fatal, and every RPC
// asked for is made once.
func TestThroughputCounts(t *testing.T) {
	f := &fakeClient{failEvery: 4}
	r := fakeRunner(&Config{Count: 400, Outstanding: 8}, f)
	m, err := r.throughput(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if f.calls.Load() != 400 || m.failed != 100 || len(m.samples) != 300 || m.bytes != 300*50 {
		t.Errorf("%d calls, %d failed, %d samples, %d bytes; want 400, 100, 300, 15000",
			f.calls.Load(), m.failed, len(m.samples), m.bytes)
	}
}

// TestThroughputMismatch: a wrong reply ends the phase with an error.
func TestThroughputMismatch(t *testing.T) {
	r := fakeRunner(&Config{Count: 1000, Outstanding: 4}, &fakeClient{shorten: true})
	if _, err := r.throughput(context.Background()); !errors.Is(err, errMismatch) {
		t.Errorf("err = %v, want a mismatch", err)
	}
}

// TestOpenLoopDrops: arrivals that find max-outstanding RPCs in flight
// are dropped, not queued: with replies held back, no more than that
// many are ever in flight.
func TestOpenLoopDrops(t *testing.T) {
	const maxOut, duration = 3, 20 * time.Millisecond
	f := &fakeClient{hold: make(chan struct{}), started: make(chan struct{}, maxOut)}
	r := fakeRunner(&Config{MaxOutstanding: maxOut, Duration: duration, LoadMbps: 100, Seed: 1}, f)
	go func() {
		for range maxOut {
			<-f.started
		}
		time.Sleep(duration) // the arrivals have ended by now
		close(f.hold)
	}()
	m, err := r.openLoop(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if most := f.most.Load(); most != maxOut || m.dropped == 0 || m.failed != 0 || len(m.samples) != int(f.calls.Load()) {
		t.Errorf("%d in flight at most, %d calls, %d samples, %d dropped, %d failed; want %d, all completed, some dropped, none failed",
			most, f.calls.Load(), len(m.samples), m.dropped, m.failed, maxOut)
	}
}

func TestCheckReply(t *testing.T) {
	req := []byte("abcdefgh")
	tests := []struct {
		resp           string
		replySize, cmp int
		ok             bool
		where          string // in the error: where the reply differs
	}{
		{"abcdefgh", 0, 8, true, ""},
		{"abcdefgX", 0, 8, false, "at byte 7"},
		{"Xbcdefgh", 0, 8, false, "at byte 0"},
		{"abcdefgX", 0, 4, true, ""}, // only 4 compared
		{"abcdefg", 0, 8, false, "got 7 bytes"},
		{"abcd", 4, 8, true, ""},
		{"abcX", 4, 8, false, "at byte 3"},
		{"abcdefgh\x00\x00", 10, 10, true, ""},
		{"abcdefgh\x00\x01", 10, 10, false, "byte 9 of the padding"},
		{"abcdefgh\x80\x00", 10, 10, false, "byte 8 of the padding"},
		{"abcdefgh\x00\x01", 10, 4, true, ""}, // padding not checked
	}
	for _, tt := range tests {
		err := checkReply(req, []byte(tt.resp), tt.replySize, tt.cmp)
		if (err == nil) != tt.ok || err != nil && (!errors.Is(err, errMismatch) || !strings.Contains(err.Error(), tt.where)) {
			t.Errorf("checkReply(%q, %q, %d, %d) = %v, want ok %v (%q)", req, tt.resp, tt.replySize, tt.cmp, err, tt.ok, tt.where)
		}
	}
}

func TestSamplesPath(t *testing.T) {
	tcp, _ := LookupProtocol("tcp")
	one := &Config{Samples: "out/s.csv", Protocols: []Protocol{tcp}}
	two := &Config{Samples: "out/s.csv", Protocols: protocols[:2]}
	for _, tt := range []struct{ got, want string }{
		{one.samplesPath(tcp, ""), "out/s.csv"},
		{one.samplesPath(tcp, ".calib"), "out/s.csv.calib"},
		{two.samplesPath(tcp, ""), "out/s-tcp.csv"},
		{two.samplesPath(tcp, ".calib"), "out/s-tcp.csv.calib"},
		{(&Config{}).samplesPath(tcp, ".calib"), ""},
	} {
		if tt.got != tt.want {
			t.Errorf("samples path %q, want %q", tt.got, tt.want)
		}
	}
}

// TestSetcapCommand: the hint names the program's executable, quoted
// for the shell where needed, or says to build one under go run.
func TestSetcapCommand(t *testing.T) {
	for exe, want := range map[string]string{
		"/usr/local/bin/homa":                "setcap cap_net_raw+ep /usr/local/bin/homa",
		"/home/a b/go/bin/homa":              `setcap cap_net_raw+ep "/home/a b/go/bin/homa"`,
		"/tmp/go-build123/b001/exe/homa":     "go build ./cmd/homa && setcap cap_net_raw+ep ./homa",
		"/root/.cache/go-build/ab/cd-d/homa": "go build ./cmd/homa && setcap cap_net_raw+ep ./homa",
	} {
		if got := setcapFor(exe); got != want {
			t.Errorf("%s: %q, want %q", exe, got, want)
		}
	}
	if cmd := SetcapCommand(); !strings.HasPrefix(cmd, "setcap ") && !strings.HasPrefix(cmd, "go build ") {
		t.Errorf("SetcapCommand() = %q", cmd)
	}
}

package main

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/homa-go/homa/bench"
)

// layerRows are the rows of "--proto layers", in order.
var layerRows = []string{"homa", "erpc", "homa-udp", "erpc-udp", "stub-homa", "stub-homa-udp", "stub-tcp"}

// TestBenchLayersLatency runs the RPC layers one call at a time, with
// servers in child processes, and reports the stub's median ratios.
// ciPeerTimeout is the Homa peer timeout of the benches that run several
// server processes one after another: on a loaded machine (CI's two
// cores with other work, and the race detector) a server process may not
// run for longer than the default 105 ms, and its clients would declare
// it dead; captures of such failures show the server silent for 130 to
// 210 ms and then answering everything at once. A dead or stuck server
// still fails the run, two seconds later.
const ciPeerTimeout = "2s"

func TestBenchLayersLatency(t *testing.T) {
	rep, _ := benchJSON(t, "--proto", "layers", "--size", "32", "--count", "40", "--warmup", "4", "--peer-timeout", ciPeerTimeout)
	checkRows(t, rep, layerRows, 40)
	want := []string{"stub-tcp/stub-homa median", "stub-tcp/stub-homa-udp median"}
	if !rawPermitted(t) {
		want = want[1:]
	}
	checkLayers(t, rep, want)
}

// TestBenchLayersThroughput keeps many RPCs in flight through every
// layer and reports erpc's rate against bare Homa's.
func TestBenchLayersThroughput(t *testing.T) {
	rep, _ := benchJSON(t, "--mode", "throughput", "--proto", "layers", "--size", "32", "--count", "400",
		"--clients", "2", "--outstanding", "20", "--calibrate", "10", "--warmup", "5", "--peer-timeout", ciPeerTimeout)
	checkRows(t, rep, layerRows, 400)
	want := []string{"erpc/homa rate", "erpc-udp/homa-udp rate"}
	if !rawPermitted(t) {
		want = want[1:]
	}
	checkLayers(t, rep, want)
}

// TestBenchLayersWorkload offers open-loop load to the layers, with
// workload sizes up to Homa's largest message, which erpc carries whole
// (the largest in two fragments) and the stub cut by the room of its
// header.
func TestBenchLayersWorkload(t *testing.T) {
	rep, errOut := benchJSON(t, "--mode", "workload", "--proto", "erpc-udp,stub-homa-udp,stub-tcp", "--workload", "w5",
		"--load-mbps", "200", "--duration", "200ms", "--calibrate", "5", "--clients", "2", "--peer-timeout", ciPeerTimeout)
	checkRows(t, rep, []string{"erpc-udp", "stub-homa-udp", "stub-tcp"}, -1)
	if len(rep.Skipped) != 0 || errOut != "" {
		t.Errorf("skipped %+v, stderr %q", rep.Skipped, errOut)
	}
	// A fixed size beyond the limit is not cut: the protocol is skipped.
	// erpc's limit is its MaxMessage, beyond one Homa message.
	rep, errOut = benchJSON(t, "--proto", "erpc-udp,stub-homa-udp,homa-udp", "--size", "1000000", "--count", "2", "--warmup", "0", "--peer-timeout", ciPeerTimeout)
	checkRows(t, rep, []string{"erpc-udp", "homa-udp"}, 2)
	if !strings.Contains(errOut, "1000000-byte messages exceed its ") || !strings.Contains(errOut, "-byte limit; skipping stub-homa-udp") {
		t.Errorf("stderr %q", errOut)
	}
	rep, errOut = benchJSON(t, "--proto", "erpc-udp,homa-udp", "--size", "3000000", "--count", "2", "--warmup", "0", "--peer-timeout", ciPeerTimeout)
	checkRows(t, rep, []string{"erpc-udp"}, 2)
	if !strings.Contains(errOut, "3000000-byte messages exceed its 1000000-byte limit; skipping homa-udp") {
		t.Errorf("stderr %q", errOut)
	}
}

// checkLayers checks that rep has exactly the ratios named, each
// consistent with its rows.
func checkLayers(t *testing.T, rep *bench.Report, want []string) {
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

// TestLayerServerSockets: serve --metrics reports the socket of the
// stub's Homa server; erpc's Nexus keeps its sockets to itself.
func TestLayerServerSockets(t *testing.T) {
	ctx := context.Background()
	for name, want := range map[string]int{"stub-homa-udp": 1, "erpc-udp": 0} {
		p, _ := bench.LookupProtocol(name)
		srv, err := bench.Serve(ctx, p, netip.MustParseAddrPort("127.0.0.1:0"), bench.ServerOptions{})
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

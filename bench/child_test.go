//go:build linux

package bench

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestChildCPU: the CPU time a child reports grows as it serves, and
// the CPU time of a phase counts the child's (runner.cpu).
func TestChildCPU(t *testing.T) {
	tcp, _ := LookupProtocol("tcp")
	var pids []int
	cfg := &Config{Host: netip.MustParseAddr("127.0.0.1"), ChildStarted: func(pid int) { pids = append(pids, pid) }}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := startChild(ctx, tcp, cfg)
	if err != nil {
		t.Fatal(err)
	}
	first, err := c.cpu()
	if err != nil || first <= 0 {
		t.Fatalf("first CPU time %v, %v", first, err)
	}
	cl, err := tcp.dial(ctx, c.Addr(), clientOptions{conns: 1})
	if err != nil {
		t.Fatal(err)
	}
	var l lane
	for range 2000 {
		if _, err := cl.call(ctx, &l, make([]byte, 100)); err != nil {
			t.Fatal(err)
		}
	}
	cl.Close()
	second, err := c.cpu()
	if err != nil || second <= first {
		t.Errorf("CPU time %v after 2000 requests, %v before (%v)", second, first, err)
	}
	if err := c.Close(); err != nil || c.Requests() != 2000 {
		t.Errorf("close: %v, %d requests, want 2000", err, c.Requests())
	}
	if _, err := c.cpu(); err == nil {
		t.Error("a stopped child answered")
	}
	if err := c.Close(); err != nil {
		t.Errorf("second close: %v", err)
	}
	select {
	case <-c.exit:
	default:
		t.Error("a stopped child was not reaped")
	}
	if len(pids) != 1 || pids[0] != c.pid {
		t.Errorf("ChildStarted told of %v, want [%d]", pids, c.pid)
	}
}

// TestRunnerCountsServerCPU: a phase's CPU time is this process's plus
// what the server's process reports.
func TestRunnerCountsServerCPU(t *testing.T) {
	r := fakeRunner(&Config{Count: 10}, &fakeClient{})
	var calls int
	r.serverCPU = func() (time.Duration, error) {
		calls++
		return time.Duration(calls) * time.Hour, nil // an hour between the two queries
	}
	m, err := r.serial(context.Background(), "latency", streamLatency, 10)
	if err != nil {
		t.Fatal(err)
	}
	if calls != 2 || m.cpu < time.Hour || m.cpu > time.Hour+time.Minute {
		t.Errorf("%d queries, phase CPU %v; want 2 and an hour (and this process's little)", calls, m.cpu)
	}
	failing := errors.New("child gone")
	r.serverCPU = func() (time.Duration, error) { return 0, failing }
	if _, err := r.serial(context.Background(), "latency", streamLatency, 10); !errors.Is(err, failing) {
		t.Errorf("phase with a failing CPU query: %v", err)
	}
}

// TestRunChildren: a run starts each protocol's server in a child
// process (this test binary, see TestMain), counts the child's CPU time,
// asks a Homa server's for its socket's counters (--stats), and stops it
// at the end; a protocol measured in this process has none.
func TestRunChildren(t *testing.T) {
	var pids []int
	var protos []Protocol
	for _, name := range []string{"tcp", "homa-udp", "udp"} {
		p, _ := LookupProtocol(name)
		protos = append(protos, p)
	}
	cfg := &Config{Mode: Latency, Protocols: protos, Host: netip.MustParseAddr("127.0.0.1"), Size: 64, Count: 20,
		Clients: 1, Conns: 1, ReplySize: 10, Timeout: time.Minute, Stats: true, ChildStarted: func(pid int) { pids = append(pids, pid) }}
	var stderr strings.Builder
	rep, err := Run(context.Background(), cfg, &stderr)
	if err != nil {
		t.Fatalf("%v (stderr %q)", err, stderr.String())
	}
	// udp echoes only: skipped with --reply-size.
	if len(rep.Results) != 2 || len(rep.Skipped) != 1 || rep.Skipped[0].Protocol != "udp" {
		t.Fatalf("results %+v, skipped %+v", rep.Results, rep.Skipped)
	}
	for _, r := range rep.Results {
		if r.Count != 20 || r.Failed != 0 || r.Server == "" || r.CPUPerRPCUS <= 0 {
			t.Errorf("row %+v", r)
		}
		switch s := r.ServerStats; r.Protocol {
		case "tcp":
			if s != nil {
				t.Errorf("tcp server has socket stats %+v", s)
			}
		case "homa-udp":
			if s == nil || s.Sockets != 1 || s.Received["DATA"] < uint64(r.StatsRPCs) || s.Sent["DATA"] < uint64(r.StatsRPCs) {
				t.Errorf("homa-udp server in a child: stats %+v for %d RPCs, want one socket that received and sent a DATA each", s, r.StatsRPCs)
			}
		}
	}
	if rep.Servers != ServersChild || len(pids) != 2 {
		t.Errorf("servers %q, %d children; want %q, 2", rep.Servers, len(pids), ServersChild)
	}
	for _, pid := range pids {
		// Reaped by the run: no such process left to signal.
		if err := syscall.Kill(pid, 0); err == nil {
			t.Errorf("server process %d outlived the run", pid)
		}
	}
}

package bench

import (
	"context"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestRunSplitCPUs: with SplitCPUs the clients run on the first half of
// the CPUs (GOMAXPROCS to match) and the server child on the second
// (its runtime sizing itself to them), the report says so, and the
// process has its CPUs and GOMAXPROCS back after the run.
func TestRunSplitCPUs(t *testing.T) {
	allowed, err := allowedCPUs()
	if err != nil {
		t.Fatal(err)
	}
	if len(allowed) < 2 {
		t.Skipf("this process may run on %d CPU: nothing to split", len(allowed))
	}
	want, _ := splitCPUs(allowed)
	procs := runtime.GOMAXPROCS(0)
	tcp, _ := LookupProtocol("tcp")
	var during, child []int
	var duringProcs int
	cfg := &Config{Mode: Latency, Protocols: []Protocol{tcp}, Host: netip.MustParseAddr("127.0.0.1"), Size: 64, Count: 20,
		Clients: 1, Conns: 1, Timeout: time.Minute, SplitCPUs: true,
		ChildStarted: func(pid int) {
			var set unix.CPUSet
			if err := unix.SchedGetaffinity(pid, &set); err != nil {
				t.Errorf("the child's CPUs: %v", err)
			}
			child = setCPUs(&set)
			if err := unix.SchedGetaffinity(0, &set); err != nil {
				t.Errorf("this thread's CPUs: %v", err)
			}
			during, duringProcs = setCPUs(&set), runtime.GOMAXPROCS(0)
		}}
	var stderr strings.Builder
	rep, err := Run(context.Background(), cfg, &stderr)
	if err != nil {
		t.Fatalf("%v (stderr %q)", err, stderr.String())
	}
	if !slices.Equal(child, want.server) || !slices.Equal(during, want.clients) || duringProcs != len(want.clients) {
		t.Errorf("during the run: child on %v, this process on %v with GOMAXPROCS %d; want %v, %v, %d",
			child, during, duringProcs, want.server, want.clients, len(want.clients))
	}
	if rep.ClientCPUs != cpuList(want.clients) || rep.ServerCPUs != cpuList(want.server) ||
		!strings.Contains(rep.serversLine(), "--split-cpus") {
		t.Errorf("report: clients %q, servers %q, %q", rep.ClientCPUs, rep.ServerCPUs, rep.serversLine())
	}
	after, err := allowedCPUs()
	if err != nil || !slices.Equal(after, allowed) || runtime.GOMAXPROCS(0) != procs {
		t.Errorf("after the run: CPUs %v (%v), GOMAXPROCS %d; want %v, %d", after, err, runtime.GOMAXPROCS(0), allowed, procs)
	}
	cfg.InProcess = true
	if _, err := Run(context.Background(), cfg, &stderr); err == nil || !strings.Contains(err.Error(), "--split-cpus") {
		t.Errorf("split with the servers in this process: %v", err)
	}
}

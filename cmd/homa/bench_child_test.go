//go:build linux

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/homa-go/homa/bench"
)

// The server children of bench are the test binary playing the homa
// command (TestMain sets labChildEnv for them).

// watchChildren records the process id of every server child bench
// starts while t runs, and at the end of the test checks that none is
// left.
func watchChildren(t *testing.T) func() []int {
	t.Helper()
	var (
		mu   sync.Mutex
		pids []int
	)
	old := childStarted
	childStarted = func(pid int) {
		mu.Lock()
		pids = append(pids, pid)
		mu.Unlock()
	}
	t.Cleanup(func() { childStarted = old })
	return func() []int {
		mu.Lock()
		defer mu.Unlock()
		return append([]int(nil), pids...)
	}
}

// alive reports whether process pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return syscall.Kill(pid, 0) == nil // no /proc: ask the kernel
	}
	// The state follows the command name, which is in parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// checkGone fails the test for every process of pids still alive.
func checkGone(t *testing.T, what string, pids []int) {
	t.Helper()
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("%s: server process %d outlived bench", what, pid)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// TestBenchChildServes: by default each protocol's server is a child
// process, which serves with the engine settings of the run, answers the
// CPU queries and is stopped at the end; --in-process starts none.
func TestBenchChildServes(t *testing.T) {
	pids := watchChildren(t)
	rep, _ := benchJSON(t, "--proto", "tcp,homa-udp,erpc-udp", "--count", "30", "--warmup", "3",
		"--poll", "-1ns", "--unsched-bytes", "10", "--link-mbps", "100000", "--reply-size", "50", "--peer-timeout", "2s")
	checkRows(t, rep, []string{"tcp", "homa-udp", "erpc-udp"}, 30)
	if rep.Servers != bench.ServersChild || !strings.Contains(rep.CPUAccounting, "the server's") {
		t.Errorf("servers %q, CPU accounting %q; want the child's counted", rep.Servers, rep.CPUAccounting)
	}
	if got := pids(); len(got) != 3 {
		t.Errorf("%d server processes started, want 3", len(got))
	}
	checkGone(t, "a run", pids())

	before := len(pids())
	rep, _ = benchJSON(t, "--proto", "tcp", "--count", "10", "--in-process")
	checkRows(t, rep, []string{"tcp"}, 10)
	if len(pids()) != before || rep.Servers != bench.ServersHere {
		t.Errorf("--in-process: %d more processes, servers %q", len(pids())-before, rep.Servers)
	}

	if runtime.NumCPU() < 2 {
		return // --split-cpus needs two; bench's own tests check the split
	}
	rep, _ = benchJSON(t, "--proto", "tcp", "--count", "10", "--split-cpus")
	checkRows(t, rep, []string{"tcp"}, 10)
	if rep.Servers != bench.ServersChild || rep.ClientCPUs == "" || rep.ServerCPUs == "" || rep.ClientCPUs == rep.ServerCPUs {
		t.Errorf("--split-cpus: servers %q, clients on CPU %q, servers on %q", rep.Servers, rep.ClientCPUs, rep.ServerCPUs)
	}
}

// TestBenchChildStopsOnFailure: a run that fails (a timeout in the
// middle of a phase, a wrong reply, an interrupt) stops its server
// child all the same.
func TestBenchChildStopsOnFailure(t *testing.T) {
	pids := watchChildren(t)
	code, _, errOut := runHoma(context.Background(), "bench", "--proto", "tcp", "--count", "100000000", "--warmup", "0", "--timeout", "2s")
	if code != 1 || !strings.Contains(errOut, "timed out") {
		t.Errorf("timeout: exit %d, stderr %q", code, errOut)
	}
	if len(pids()) != 1 {
		t.Fatalf("%d server processes, want 1", len(pids()))
	}
	checkGone(t, "a timed-out run", pids())

	// The server child replies with 100 bytes, the client expects
	// echoes: --reply-size is passed on, so fake the mismatch by
	// serving replies the client does not expect.
	orig := serverExecutable
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	wrapper := writeWrapper(t, exe, "--reply-size", "7")
	serverExecutable = wrapper
	code, _, errOut = runHoma(context.Background(), "bench", "--proto", "homa-udp", "--count", "100", "--warmup", "0")
	serverExecutable = orig
	if code != 1 || !strings.Contains(errOut, "echo differs from request") {
		t.Errorf("wrong replies: exit %d, stderr %q", code, errOut)
	}
	checkGone(t, "a run with wrong replies", pids())

	// Interrupted once the measurement runs.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errBuf := &lockedBuffer{onWrite: func(all string) {
		if strings.Contains(all, "tcp latency:") {
			cancel()
		}
	}}
	code = run(ctx, []string{"bench", "--proto", "tcp", "--count", "100000000", "--warmup", "0",
		"--progress", "--progress-interval", "5ms"}, io.Discard, errBuf)
	if code != 1 || !strings.Contains(errBuf.String(), "interrupted") {
		t.Errorf("interrupt: exit %d, stderr %q", code, errBuf.String())
	}
	if len(pids()) != 3 {
		t.Errorf("%d server processes, want 3", len(pids()))
	}
	checkGone(t, "an interrupted run", pids())
}

// writeWrapper writes a shell script that runs exe with its arguments
// and extra ones after them, and returns its path.
func writeWrapper(t *testing.T, exe string, extra ...string) string {
	t.Helper()
	path := t.TempDir() + "/homa-wrapper"
	script := fmt.Sprintf("#!/bin/sh\nexec %s \"$@\" %s\n", strconv.Quote(exe), strings.Join(extra, " "))
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestBenchChildDiesWithBench: a bench process killed outright (no
// chance to clean up) takes its server child with it.
func TestBenchChildDiesWithBench(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, "bench", "--proto", "tcp", "--count", "100000000", "--warmup", "0", "--progress")
	cmd.Env = append(os.Environ(), labChildEnv+"=1")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`^homa bench: tcp server: process (\d+) on `)
	sc := bufio.NewScanner(stderr)
	pid := 0
	for pid == 0 && sc.Scan() {
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			pid, _ = strconv.Atoi(m[1])
		}
	}
	if pid == 0 {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("bench did not name its server process")
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { io.Copy(io.Discard, stderr) }) // until Wait closes the pipe
	if err := cmd.Wait(); err == nil {
		t.Error("a killed bench exited cleanly")
	}
	wg.Wait()
	// The child is not ours to wait for: watch it go, for a bounded time.
	deadline := time.Now().Add(20 * time.Second)
	for alive(pid) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	checkGone(t, "a killed bench", []int{pid})
}

// TestServeParent: "homa serve --parent" answers the CPU query, says so
// of a query it does not know, and stops when its input closes.
func TestServeParent(t *testing.T) {
	inR, inW := io.Pipe()
	old := serveInput
	serveInput = inR
	defer func() { serveInput = old }()
	out := newWatchedBuffer()
	var errOut strings.Builder
	done := make(chan int, 1)
	go func() {
		done <- run(context.Background(), []string{"serve", "--parent", "--proto", "tcp", "--addr", "127.0.0.1:0"}, out, &errOut)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	said := func(re string) bool {
		return out.waitFor(ctx, regexp.MustCompile(re).MatchString)
	}
	if !said(`^homa: tcp server on 127\.0\.0\.1:\d+\n$`) {
		t.Fatalf("serve printed %q", out.String())
	}
	fmt.Fprintln(inW, "cpu")
	fmt.Fprintln(inW, "bogus")
	if !said(`\nhoma: cpu ns [1-9]\d*\nhoma: unknown query "bogus"\n$`) {
		t.Errorf("serve printed %q", out.String())
	}
	inW.Close()
	if code := <-done; code != 0 || !said(`\nhoma: tcp server stopped after 0 requests\n$`) {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out.String(), errOut.String())
	}
}

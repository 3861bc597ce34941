package sock_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/homa-go/homa/contract"
	"github.com/homa-go/homa/sock"
)

const childEnv = "HOMA_TEST_CHILD_SERVER"

// TestMain lets the test binary act as a second process holding a server
// socket (see TestTwoProcesses).
func TestMain(m *testing.M) {
	if port := os.Getenv(childEnv); port != "" {
		os.Exit(childServer(port))
	}
	os.Exit(m.Run())
}

// childServer serves echo requests on a raw server socket until its
// stdin closes, then prints what it saw.
func childServer(port string) int {
	s, err := sock.Open(netip.MustParseAddrPort("127.0.0.1:"+port), nil)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	go serveEcho(s, []byte("child:"))
	fmt.Println("ready")
	bufio.NewReader(os.Stdin).ReadString('\n')
	st := s.Stats()
	fmt.Printf("requests %d other-port %d\n", st.RequestsReceived, st.Drops[contract.DropOtherPort])
	s.Close()
	return 0
}

// TestTwoProcesses: two server sockets on different ports, in two
// processes on one host, over raw IP. Each receives only its own
// requests: the kernel filter keeps the other's packets away, so neither
// even sees (and drops) a packet for the other port.
func TestTwoProcesses(t *testing.T) {
	parent, err := sock.Open(netip.MustParseAddrPort("127.0.0.1:21301"), nil)
	if errors.Is(err, sock.ErrPermission) {
		t.Skipf("raw sockets not permitted: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer parent.Close()
	go serveEcho(parent, []byte("parent:"))

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=21302")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer stdin.Close()
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() || lines.Text() != "ready" {
		t.Fatalf("child: %q", lines.Text())
	}

	client, err := sock.Open(netip.MustParseAddrPort("127.0.0.1:0"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	const nParent, nChild = 40, 25
	ask := func(port uint16, tag string, n int) {
		for i := range n {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			m, err := client.Call(ctx, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port), []byte(fmt.Sprint(i)))
			cancel()
			if err != nil {
				t.Fatalf("call to port %d: %v", port, err)
			}
			if want := tag + fmt.Sprint(i); string(m.Data) != want {
				t.Fatalf("port %d answered %q, want %q", port, m.Data, want)
			}
		}
	}
	ask(21301, "parent:", nParent)
	ask(21302, "child:", nChild)

	stdin.Close()
	if !lines.Scan() {
		t.Fatal("child exited without a report")
	}
	var requests, other int
	if _, err := fmt.Sscanf(lines.Text(), "requests %d other-port %d", &requests, &other); err != nil {
		t.Fatalf("child report %q: %v", lines.Text(), err)
	}
	if requests != nChild || other != 0 {
		t.Errorf("child: %d requests, %d packets for another port; want %d and 0", requests, other, nChild)
	}
	st := parent.Stats()
	if st.RequestsReceived != nParent || st.Drops[contract.DropOtherPort] != 0 {
		t.Errorf("parent: %d requests, %d packets for another port; want %d and 0",
			st.RequestsReceived, st.Drops[contract.DropOtherPort], nParent)
	}
}

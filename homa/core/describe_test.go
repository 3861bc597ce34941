package core_test

import (
	"net/netip"

	"github.com/homa-go/homa/contract"
	"strings"
	"testing"
	"time"

	"github.com/homa-go/homa/homa/core"
	"github.com/homa-go/homa/homa/sim"
)

// TestDescribe: the description of a client RPC whose server takes its
// request but never answers says what it waits for, and the server's
// says it is serving; limit bounds the lines.
func TestDescribe(t *testing.T) {
	n := sim.New(sim.Config{Seed: 1})
	srv := n.Listen(serverAP, core.Config{})
	srv.OnMessage = func(*sim.Endpoint, *contract.Message) {} // never replies
	cli := n.Listen(clientAP, core.Config{})
	send(t, cli, serverAP, request(1, 100))
	send(t, cli, netip.AddrPortFrom(serverAP.Addr(), 999), request(2, 100)) // no listener
	n.Run(2 * time.Millisecond)
	var b strings.Builder
	b.Write(cli.Core.AppendDescription(nil, n.Now(), 10))
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "core: 2 client RPCs, 0 server RPCs") {
		t.Fatalf("client core:\n%s", b.String())
	}
	for _, want := range []string{"client, 2ms old,", "10.0.0.1:500: active; out: 100/100 granted of 100; in: nothing yet", "timer in"} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("first client RPC %q, want %q in it", lines[1], want)
		}
	}
	b.Reset()
	b.Write(srv.Core.AppendDescription(nil, n.Now(), 10))
	if s := b.String(); !strings.Contains(s, "1 server RPCs") || !strings.Contains(s, "server ") || !strings.Contains(s, ": serving; out: none; in: 100/100 granted of 100") {
		t.Errorf("server core:\n%s", s)
	}
	b.Reset()
	b.Write(cli.Core.AppendDescription(nil, n.Now(), 1))
	if s := b.String(); strings.Count(s, "\n") != 3 || !strings.HasSuffix(s, "  ... 1 more\n") {
		t.Errorf("limit 1:\n%s", s)
	}
}

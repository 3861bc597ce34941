package bench

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/homa-go/homa/sock"
)

// TestDescribeClients: the description names each Homa client socket and
// lists its RPC in flight, here one whose server never reads its
// requests; a client without a Homa socket is skipped.
func TestDescribeClients(t *testing.T) {
	cfg := &sock.Config{Transport: sock.UDP}
	srv, err := openHomaServer(netip.MustParseAddrPort("127.0.0.1:0"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	c, err := DialHoma(srv.LocalAddr(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Socket().Send(srv.LocalAddr(), make([]byte, 100), 0); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	describeClients(&b, "homa: test", []client{stubClient{}, c})
	s := b.String()
	for _, want := range []string{"homa: test, the clients' Homa sockets hold:\n", "client 1, socket ", "core: 1 client RPCs",
		"out: 100/100 granted of 100; in: nothing yet"} {
		if !strings.Contains(s, want) {
			t.Errorf("description without %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "client 0") {
		t.Errorf("a client without a Homa socket described:\n%s", s)
	}
}

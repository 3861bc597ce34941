package bench

import (
	"bytes"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/homa-go/homa/homa/netio"
)

// TestRawHomaSockets: a raw Homa socket open in this process shows in
// the host's count, and the bench report names the count.
func TestRawHomaSockets(t *testing.T) {
	before, ok := rawHomaSockets()
	if !ok {
		t.Skip("no /proc/net/raw here")
	}
	c, err := netio.OpenRaw(netip.MustParseAddr("127.0.0.1"), 0, nil)
	if errors.Is(err, netio.ErrPermission) {
		t.Skipf("no raw socket (needs root or CAP_NET_RAW): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	n, _ := rawHomaSockets()
	c.Close()
	if n < 1 {
		t.Fatalf("%d raw Homa sockets counted with one open (%d before)", n, before)
	}
	var out bytes.Buffer
	(&Report{RawHomaSockets: n}).Write(&out, false)
	if !strings.Contains(out.String(), "host: ") || !strings.Contains(out.String(), "IP protocol 146") {
		t.Errorf("the report does not name the raw sockets:\n%s", out.String())
	}
	out.Reset()
	(&Report{}).Write(&out, false)
	if strings.Contains(out.String(), "host: ") {
		t.Errorf("the report names raw sockets though there were none:\n%s", out.String())
	}
}

//go:build linux

package netio_test

import (
	"fmt"
	"net/netip"

	"github.com/homa-go/homa/homa/netio"
)

// Client Conns of one process beyond the first few share a raw socket
// (see OpenRaw): their Stats say so, RawShareStats counts the shares and
// what they dropped, and HostRawSockets counts the protocol 146 sockets
// the kernel clones each arriving Homa packet for.
func ExampleRawShareStats() {
	lo := netip.MustParseAddr("127.0.0.1")
	var conns []netio.Conn
	for range 10 {
		c, err := netio.OpenRaw(lo, 0, nil)
		if err != nil {
			fmt.Println(err) // without CAP_NET_RAW: ErrPermission
			return
		}
		defer c.Close()
		conns = append(conns, c)
	}
	shared := 0
	for _, c := range conns {
		if c.(netio.StatsConn).Stats().Shared {
			shared++
		}
	}
	s := netio.RawShareStats()
	n, _ := netio.HostRawSockets()
	fmt.Printf("%d of 10 Conns share %d socket(s); %d protocol 146 sockets on the host; drops: %d, %d, %d\n",
		shared, s.Sockets, n, s.NoMember, s.QueueFull, s.ShareFull)
}

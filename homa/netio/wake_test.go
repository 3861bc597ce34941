package netio_test

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/homa/netio"
)

// TestWake: a goroutine parked in ReadBatch or WaitReadable returns
// netio.ErrWoken when Wake is called, on every kind of netio.Conn; a Wake with
// nobody parked makes the next parked read return at once; reads go on
// normally afterwards.
func TestWake(t *testing.T) {
	nw := memnet.New(memnet.Config{Seed: 1})
	defer nw.Close()
	opens := map[string]func() (netio.Conn, error){
		"mem": func() (netio.Conn, error) { return nw.Open(netip.MustParseAddr("10.0.0.1"), 0) },
		"udp": func() (netio.Conn, error) { return netio.OpenUDP(netip.MustParseAddr("127.0.0.1"), 0, nil) },
		"udp-nogro": func() (netio.Conn, error) {
			return netio.OpenUDP(netip.MustParseAddr("127.0.0.1"), 0, &netio.Options{DisableGRO: true})
		},
		"udp-reports": func() (netio.Conn, error) {
			return netio.OpenUDP(netip.MustParseAddr("127.0.0.1"), 0, &netio.Options{ReportUnreachable: true})
		},
		"raw": func() (netio.Conn, error) { return netio.OpenRaw(netip.MustParseAddr("127.0.0.1"), 0, nil) },
	}
	for name, open := range opens {
		t.Run(name, func(t *testing.T) {
			c, err := open()
			if errors.Is(err, netio.ErrPermission) {
				t.Skip(err)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			wk, ok := c.(netio.Waker)
			if !ok {
				t.Fatalf("%T is not a netio.Waker", c)
			}
			pkts := []netio.Packet{{Buf: make([]byte, 2048)}}
			for _, how := range []string{"ReadBatch", "WaitReadable"} {
				for _, early := range []bool{false, true} {
					done := make(chan error, 1)
					if early {
						wk.Wake()
					}
					go func() {
						var err error
						if how == "ReadBatch" {
							_, err = c.ReadBatch(pkts)
						} else {
							err = c.(netio.Poller).WaitReadable()
						}
						done <- err
					}()
					if !early {
						time.Sleep(5 * time.Millisecond) // let it park
						wk.Wake()
					}
					select {
					case err := <-done:
						if !errors.Is(err, netio.ErrWoken) {
							t.Fatalf("%s (wake before: %v): %v, want netio.ErrWoken", how, early, err)
						}
					case <-time.After(5 * time.Second):
						t.Fatalf("%s (wake before: %v) did not return after Wake", how, early)
					}
				}
			}
		})
	}
}

package netio

import (
	"errors"
	"net/netip"
	"testing"
	"time"
)

// TestWake: a goroutine parked in ReadBatch or WaitReadable returns
// ErrWoken when Wake is called, on every kind of Conn; a Wake with
// nobody parked makes the next parked read return at once; reads go on
// normally afterwards.
func TestWake(t *testing.T) {
	nw := NewMemNetwork(MemConfig{Seed: 1})
	defer nw.Close()
	opens := map[string]func() (Conn, error){
		"mem": func() (Conn, error) { return nw.Open(netip.MustParseAddr("10.0.0.1"), 0) },
		"udp": func() (Conn, error) { return OpenUDP(netip.MustParseAddr("127.0.0.1"), 0, nil) },
		"udp-nogro": func() (Conn, error) {
			return OpenUDP(netip.MustParseAddr("127.0.0.1"), 0, &Options{DisableGRO: true})
		},
		"udp-reports": func() (Conn, error) {
			return OpenUDP(netip.MustParseAddr("127.0.0.1"), 0, &Options{ReportUnreachable: true})
		},
		"raw": func() (Conn, error) { return OpenRaw(netip.MustParseAddr("127.0.0.1"), 0, nil) },
	}
	for name, open := range opens {
		t.Run(name, func(t *testing.T) {
			c, err := open()
			if errors.Is(err, ErrPermission) {
				t.Skip(err)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			wk, ok := c.(Waker)
			if !ok {
				t.Fatalf("%T is not a Waker", c)
			}
			pkts := []Packet{{Buf: make([]byte, 2048)}}
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
							err = c.(Poller).WaitReadable()
						}
						done <- err
					}()
					if !early {
						time.Sleep(5 * time.Millisecond) // let it park
						wk.Wake()
					}
					select {
					case err := <-done:
						if !errors.Is(err, ErrWoken) {
							t.Fatalf("%s (wake before: %v): %v, want ErrWoken", how, early, err)
						}
					case <-time.After(5 * time.Second):
						t.Fatalf("%s (wake before: %v) did not return after Wake", how, early)
					}
				}
			}
		})
	}
}

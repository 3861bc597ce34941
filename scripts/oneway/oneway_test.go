package main

import (
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestMain serves as the child process when measure starts one (the
// test binary is os.Args[0]).
func TestMain(m *testing.M) {
	if len(os.Args) == 5 && os.Args[1] == "--serve" {
		ap, err := netip.ParseAddrPort(os.Args[4])
		if err != nil {
			fatal(err)
		}
		fatal(runServer(os.Args[2], ap))
	}
	os.Exit(m.Run())
}

// TestMeasure: over Go TCP and Homa over UDP, each direction takes some
// time, and no more than the round trip.
func TestMeasure(t *testing.T) {
	for i, proto := range []string{"tcp", "homa-udp", "homa-udp-park"} {
		t.Run(proto, func(t *testing.T) {
			ap := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(4791+i))
			r, err := measure(proto, ap, 50, 0, false, i == 1)
			if err != nil {
				t.Fatal(err)
			}
			up, down, rtt := median(t, r.up), median(t, r.down), median(t, r.rtt)
			t.Logf("%s: request way %s, response way %s, round trip %s µs", proto, r.up, r.down, r.rtt)
			// Each RPC's ways lie within its round trip, so their
			// medians lie within the round trips' median.
			if up <= 0 || down <= 0 || up > rtt || down > rtt {
				t.Errorf("request way %v µs and response way %v µs against a round trip of %v µs", up, down, rtt)
			}
		})
	}
}

// median reads the median of a "median / p90" figure.
func median(t *testing.T, s string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(strings.Fields(s)[0], 64)
	if err != nil {
		t.Fatalf("figure %q: %v", s, err)
	}
	return v
}

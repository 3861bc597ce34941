package homa_test

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"github.com/homa-go/homa/homa"
	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/homa/netio"
)

// TestReceiveInPlace: large messages land in place (the reads put their
// payloads straight into their messages: core.Lend), on the in-memory
// network and on kernel sockets, and arrive intact.
func TestReceiveInPlace(t *testing.T) {
	t.Run("mem", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p, _ := newMemPair(t, memnet.Config{Seed: 7, MTU: 65536}, homa.Config{})
			checkInPlace(t, p)
		})
	})
	lo, lo6 := netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1")
	for _, tc := range []struct {
		name string
		open func(port uint16) (netio.Conn, error)
	}{
		{"raw", func(port uint16) (netio.Conn, error) { return netio.OpenRaw(lo, port, nil) }},
		{"raw6", func(port uint16) (netio.Conn, error) { return netio.OpenRaw(lo6, port, nil) }},
		{"udp", func(port uint16) (netio.Conn, error) {
			return netio.OpenUDP(lo, port, &netio.Options{DisableGRO: true})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc, err := tc.open(0)
			if errors.Is(err, netio.ErrPermission) {
				t.Skip("raw sockets need CAP_NET_RAW")
			}
			if err != nil {
				t.Fatal(err)
			}
			cc, err := tc.open(0)
			if err != nil {
				sc.Close()
				t.Fatal(err)
			}
			p := startPair(t, homa.NewEndpoint(sc, homa.Config{}), homa.NewEndpoint(cc, homa.Config{}))
			checkInPlace(t, p)
		})
	}
}

// checkInPlace echoes 1 MB messages over p and checks that packets of
// both directions landed in place.
func checkInPlace(t *testing.T, p *pair) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range 4 {
		if err := p.call(ctx, t, payload(uint64(i), 1_000_000)); err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range []*homa.Endpoint{p.client, p.server} {
		s := e.Stats()
		t.Logf("%v: %d packets landed in place, %d moved", e.LocalAddr(), s.LandedPackets, s.MovedPackets)
		if s.LandedPackets == 0 {
			t.Errorf("%v: no packet landed in place", e.LocalAddr())
		}
	}
}

package homagrpc_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/homa-go/homa/sock"
	"github.com/homa-go/homa/sock/homagrpc"
)

// hosts is a Resolver over a fixed table.
type hosts map[string][]string

func (h hosts) LookupNetIP(_ context.Context, network, host string) ([]netip.Addr, error) {
	if network != "ip" {
		return nil, fmt.Errorf("network %q", network)
	}
	as, ok := h[host]
	if !ok {
		return nil, errors.New("no such host")
	}
	var out []netip.Addr
	for _, a := range as {
		out = append(out, netip.MustParseAddr(a))
	}
	return out, nil
}

// ResolveTarget looks names up, keeps the target's family (that of its
// first address, else IPv4 when a name has one), drops repeats, and
// refuses names without an address of the family, literals of the other
// family, and names that do not resolve.
func TestResolveTarget(t *testing.T) {
	r := hosts{
		"a":    {"10.0.0.1", "fd00::1", "10.0.0.2"},
		"b":    {"10.0.0.2", "10.0.0.3"},
		"six":  {"fd00::6"},
		"both": {"fd00::7", "10.0.0.7"},
	}
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"homa:///a:5000", []string{"10.0.0.1:5000", "10.0.0.2:5000"}},
		{"homa:///a:5000,b:5000", []string{"10.0.0.1:5000", "10.0.0.2:5000", "10.0.0.3:5000"}},
		{"b:6000,10.0.0.9:6000", []string{"10.0.0.2:6000", "10.0.0.3:6000", "10.0.0.9:6000"}},
		{"homa:///six:7", []string{"[fd00::6]:7"}},
		{"homa:///[fd00::9]:7,both:7", []string{"[fd00::9]:7", "[fd00::7]:7"}},
		{"homa:///both:7,six:7", nil},           // IPv4 chosen; six has none
		{"homa:///10.0.0.1:7,[fd00::1]:7", nil}, // literals of two families
		{"homa:///nowhere:7", nil},
		{"homa:///a", nil},
		{"homa:///a:0", nil},
		{"homa:///:7", nil},
		{"dns:///a:7", nil},
		{"homa:///", nil},
	} {
		got, err := homagrpc.ResolveTarget(context.Background(), tc.in, r)
		checkTargets(t, "ResolveTarget", tc.in, got, err, tc.want)
	}
}

// checkTargets checks what fn made of target: the addresses want, or an
// error when want is nil.
func checkTargets(t *testing.T, fn, target string, got []netip.AddrPort, err error, want []string) {
	t.Helper()
	if want == nil {
		if err == nil {
			t.Errorf("%s(%q) = %v, want an error", fn, target, got)
		}
		return
	}
	var s []string
	for _, a := range got {
		s = append(s, a.String())
	}
	if err != nil || !slices.Equal(s, want) {
		t.Errorf("%s(%q) = %v, %v; want %v", fn, target, s, err, want)
	}
}

// DialTarget dials the servers a name stands for (two loopback
// addresses, over UDP), and calls reach both.
func TestDialTargetByName(t *testing.T) {
	cfg := &sock.Config{Transport: sock.UDP}
	var first, second *sock.Socket
	var port uint16
	for p := uint16(27400); p < 27500 && second == nil; p++ {
		f, err := sock.Open(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), p), cfg)
		if err != nil {
			continue
		}
		s, err := sock.Open(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), p), cfg)
		if err != nil {
			f.Close()
			continue
		}
		first, second, port = f, s, p
	}
	if second == nil {
		t.Skip("no server port free on both 127.0.0.1 and 127.0.0.2 in 27400..27499")
	}
	defer first.Close()
	defer second.Close()
	var srvs []*homagrpc.Server
	var wg sync.WaitGroup
	for _, s := range []*sock.Socket{first, second} {
		srv := homagrpc.NewServer()
		testpb.RegisterTestServiceServer(srv, &testService{})
		srvs = append(srvs, srv)
		wg.Go(func() { _ = srv.Serve(s) })
	}
	defer func() {
		for _, s := range srvs {
			s.Stop()
		}
		wg.Wait()
	}()
	target := fmt.Sprintf("homa:///echo.test:%d", port)
	cc, err := homagrpc.DialTarget(target, cfg,
		homagrpc.WithResolver(hosts{"echo.test": {"127.0.0.1", "127.0.0.2"}}), homagrpc.WithBalancer(homagrpc.RoundRobin))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	want := []netip.AddrPort{first.LocalAddr(), netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), port)}
	if got := cc.Targets(); !slices.Equal(got, want) {
		t.Fatalf("targets %v, want %v", got, want)
	}
	client := testpb.NewTestServiceClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 4 {
		if _, err := client.UnaryCall(ctx, &testpb.SimpleRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	for i, s := range srvs {
		if n := s.Stats().Calls; n != 2 {
			t.Errorf("server %v took %d calls, want 2", want[i], n)
		}
	}
	if _, err := homagrpc.DialTarget("homa:///nowhere.test:4000", cfg, homagrpc.WithResolver(hosts{})); err == nil {
		t.Fatal("dialled a name that does not resolve")
	}
}

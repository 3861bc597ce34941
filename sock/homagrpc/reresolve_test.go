package homagrpc_test

import (
	"context"
	"errors"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/sock"
	"github.com/homa-go/homa/sock/homagrpc"
)

// names is a Resolver whose answers the test changes. It records when
// each lookup came, and can hold lookups until their context ends.
type names struct {
	mu    sync.Mutex
	hosts hosts
	err   error // when set, lookups fail with it
	hold  bool  // lookups wait for their context to end
	times []time.Duration
	ended []error // the context errors of held lookups
	start time.Time
}

func newNames(h hosts) *names { return &names{hosts: h, start: time.Now()} }

func (n *names) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	n.mu.Lock()
	n.times = append(n.times, time.Since(n.start))
	h, err, hold := n.hosts, n.err, n.hold
	n.mu.Unlock()
	if hold {
		<-ctx.Done()
		n.mu.Lock()
		n.ended = append(n.ended, ctx.Err())
		n.mu.Unlock()
		return nil, ctx.Err()
	}
	if err != nil {
		return nil, err
	}
	return h.LookupNetIP(ctx, network, host)
}

// set makes host stand for addrs, and lookups succeed.
func (n *names) set(host string, addrs ...string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.hosts = hosts{host: addrs}
	n.err = nil
}

// fail makes lookups fail with err.
func (n *names) fail(err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.err = err
}

// holdLookups makes lookups wait for their context to end, or not.
func (n *names) holdLookups(hold bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.hold = hold
}

// lookups returns when each lookup came, from when n was made.
func (n *names) lookups() []time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.times)
}

// held returns the context errors of the held lookups that ended.
func (n *names) held() []error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.ended)
}

// The addresses of the tests' servers, and the name that stands for
// one of them.
var (
	movedAddr = netip.MustParseAddrPort("10.0.0.3:4000")
	thirdAddr = netip.MustParseAddrPort("10.0.0.4:4000")
)

const svcTarget = "homa:///svc.test:4000"

// dialNames returns a ClientConn to target from a client socket on nw,
// looking names up with r (as DialTarget does), closed at the end of
// the test, and a TestService client of it.
func dialNames(t *testing.T, nw *memnet.Network, target string, r homagrpc.Resolver, opts ...homagrpc.DialOption) (*homagrpc.ClientConn, testpb.TestServiceClient) {
	t.Helper()
	cc, err := homagrpc.NewClientConnNamesForTest(clientSocket(t, nw), target, append(opts, homagrpc.WithResolver(r))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc, testpb.NewTestServiceClient(cc)
}

// wantTargets fails the test unless cc's servers are want.
func wantTargets(t *testing.T, cc *homagrpc.ClientConn, want ...netip.AddrPort) {
	t.Helper()
	if got := cc.Targets(); !slices.Equal(got, want) {
		t.Errorf("targets %v, want %v", got, want)
	}
}

// failAndWait makes a call that fails with Unavailable, and lets the
// lookup it asks for run: the default interval passes.
func failAndWait(t *testing.T, c testpb.TestServiceClient) {
	t.Helper()
	_, err := c.UnaryCall(context.Background(), &testpb.SimpleRequest{})
	wantCode(t, "a call to a server gone", err, codes.Unavailable)
	time.Sleep(30 * time.Second)
	synctest.Wait()
}

// When the name's address changes and the server at the old one stops,
// a call that finds it unavailable has the name looked up again once
// 30 s have passed since the dial's lookup, and later calls go to the
// new address; a call that waits for ready gets there by itself.
func TestReresolveFollowsName(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := newNetwork(t)
		old := serveAt(t, nw, serverAddr, &testService{})
		moved := serveAt(t, nw, movedAddr, &testService{})
		third := serveAt(t, nw, thirdAddr, &testService{})
		r := newNames(hosts{"svc.test": {"10.0.0.1"}})
		cc, c := dialNames(t, nw, svcTarget, r)
		ctx := context.Background()
		if _, err := c.UnaryCall(ctx, &testpb.SimpleRequest{}); err != nil {
			t.Fatal(err)
		}

		r.set("svc.test", "10.0.0.3")
		old.Stop()
		_, err := c.UnaryCall(ctx, &testpb.SimpleRequest{})
		wantCode(t, "a call to the stopped server", err, codes.Unavailable)
		time.Sleep(29 * time.Second)
		synctest.Wait()
		if got := r.lookups(); len(got) != 1 {
			t.Fatalf("lookups at %v before 30 s passed, want the dial's alone", got)
		}
		wantTargets(t, cc, serverAddr)
		time.Sleep(time.Second)
		synctest.Wait()
		wantTargets(t, cc, movedAddr)
		if _, err := c.UnaryCall(ctx, &testpb.SimpleRequest{}); err != nil {
			t.Fatalf("a call after the lookup: %v", err)
		}
		if n := moved.Stats().Calls; n != 1 {
			t.Errorf("the server at the new address took %d calls, want 1", n)
		}

		r.set("svc.test", "10.0.0.4")
		moved.Stop()
		_, err = c.UnaryCall(ctx, &testpb.SimpleRequest{})
		wantCode(t, "a call to the second stopped server", err, codes.Unavailable)
		wait, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		if _, err := c.UnaryCall(wait, &testpb.SimpleRequest{}, grpc.WaitForReady(true)); err != nil {
			t.Fatalf("a call waiting for ready while the name moves: %v", err)
		}
		if n := third.Stats().Calls; n != 1 {
			t.Errorf("the server at the third address took %d calls, want 1", n)
		}
		if got, want := r.lookups(), []time.Duration{0, 30 * time.Second, 60 * time.Second}; !slices.Equal(got, want) {
			t.Errorf("lookups at %v, want %v", got, want)
		}
	})
}

// However many calls fail, the name is looked up at most once per
// interval (WithResolveInterval; 0 stands for the default, 30 s): calls
// fail all the time for 35 s, three at a time (each after the socket's PeerTimeout).
func TestReresolveInterval(t *testing.T) {
	for _, tc := range []struct {
		interval time.Duration
		want     []time.Duration
	}{
		{10 * time.Second, []time.Duration{0, 10 * time.Second, 20 * time.Second, 30 * time.Second}},
		{0, []time.Duration{0, 30 * time.Second}},
	} {
		synctest.Test(t, func(t *testing.T) {
			nw := newNetwork(t) // no server: every call fails
			r := newNames(hosts{"svc.test": {"10.0.0.1"}})
			_, c := dialNames(t, nw, svcTarget, r, homagrpc.WithResolveInterval(tc.interval))
			var wg sync.WaitGroup
			for range 3 {
				wg.Go(func() {
					for time.Since(r.start) < 35*time.Second {
						_, err := c.UnaryCall(context.Background(), &testpb.SimpleRequest{})
						wantCode(t, "a call with no server", err, codes.Unavailable)
					}
				})
			}
			wg.Wait()
			synctest.Wait()
			if got := r.lookups(); !slices.Equal(got, tc.want) {
				t.Errorf("interval %v: lookups at %v, want %v", tc.interval, got, tc.want)
			}
		})
	}
}

// A lookup that fails, or finds no address of the ClientConn's family,
// keeps the servers, and ResolveErr says why; the next that succeeds
// takes the addresses of the family and clears it.
func TestReresolveFailureKeepsServers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := newNetwork(t)
		serveAt(t, nw, movedAddr, &testService{}) // none at serverAddr
		r := newNames(hosts{"svc.test": {"10.0.0.1"}})
		cc, c := dialNames(t, nw, svcTarget, r)

		errDown := errors.New("name server down")
		r.fail(errDown)
		failAndWait(t, c)
		wantTargets(t, cc, serverAddr)
		if err := cc.ResolveErr(); !errors.Is(err, errDown) {
			t.Errorf("ResolveErr after a failed lookup: %v, want %v", err, errDown)
		}

		r.set("svc.test", "fd00::3")
		failAndWait(t, c)
		wantTargets(t, cc, serverAddr)
		if err := cc.ResolveErr(); !errors.Is(err, sock.ErrBadAddress) {
			t.Errorf("ResolveErr after a lookup of IPv6 addresses only: %v, want ErrBadAddress", err)
		}

		r.set("svc.test", "fd00::3", "10.0.0.3")
		failAndWait(t, c)
		wantTargets(t, cc, movedAddr)
		if err := cc.ResolveErr(); err != nil {
			t.Errorf("ResolveErr after a lookup that succeeded: %v", err)
		}
		if _, err := c.UnaryCall(context.Background(), &testpb.SimpleRequest{}); err != nil {
			t.Errorf("a call after the lookup: %v", err)
		}
		if got := len(r.lookups()); got != 4 {
			t.Errorf("%d lookups, want 4", got)
		}
	})
}

// A target of IP addresses only is never looked up, however its calls
// fail, waiting for ready or not: no goroutine waits to look it up, and
// the resolver is not asked. One that names a host has such a goroutine
// once a call fails, and none before.
func TestReresolveLiteralsNever(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := newNetwork(t)
		r := newNames(hosts{"svc.test": {"10.0.0.1"}})
		_, c := dialNames(t, nw, "homa:///10.0.0.1:4000,10.0.0.3:4000", r)
		for range 3 {
			_, err := c.UnaryCall(context.Background(), &testpb.SimpleRequest{})
			wantCode(t, "a call with no server", err, codes.Unavailable)
			synctest.Wait()
			if reresolving() {
				t.Fatal("a goroutine looks up a target of IP addresses")
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := c.UnaryCall(ctx, &testpb.SimpleRequest{}, grpc.WaitForReady(true))
		wantCode(t, "a call waiting for ready with no server", err, codes.DeadlineExceeded)
		synctest.Wait()
		if got := r.lookups(); len(got) != 0 {
			t.Errorf("lookups at %v, want none", got)
		}

		_, c = dialNames(t, nw, svcTarget, r)
		synctest.Wait()
		if reresolving() {
			t.Fatal("a goroutine looks up a target before any call failed")
		}
		_, err = c.UnaryCall(context.Background(), &testpb.SimpleRequest{})
		wantCode(t, "a call with no server", err, codes.Unavailable)
		synctest.Wait()
		if !reresolving() {
			t.Fatal("no goroutine looks up a target naming a host after a call failed")
		}
	})
}

// reresolving reports whether a goroutine waits to look a target up, or
// looks it up.
func reresolving() bool {
	buf := make([]byte, 1<<20)
	return strings.Contains(string(buf[:runtime.Stack(buf, true)]), "homagrpc.(*ClientConn).reresolve")
}

// Close ends a lookup under way (its context is canceled) and a wait for
// the next one, and returns; no goroutine is left in the bubble.
func TestReresolveClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := newNetwork(t)
		r := newNames(hosts{"svc.test": {"10.0.0.1"}})
		cc, c := dialNames(t, nw, svcTarget, r)
		r.holdLookups(true)
		failAndWait(t, c)
		if got := len(r.lookups()); got != 2 {
			t.Fatalf("%d lookups, want the dial's and one held", got)
		}
		if err := cc.Close(); err != nil {
			t.Fatal(err)
		}
		if got := r.held(); !slices.Equal(got, []error{context.Canceled}) {
			t.Errorf("held lookups ended with %v, want [context.Canceled]", got)
		}

		r.holdLookups(false)
		waiting, c := dialNames(t, nw, svcTarget, r)
		_, err := c.UnaryCall(context.Background(), &testpb.SimpleRequest{})
		wantCode(t, "a call with no server", err, codes.Unavailable)
		if err := waiting.Close(); err != nil {
			t.Fatal(err)
		}
		if got := len(r.lookups()); got != 3 {
			t.Errorf("%d lookups, want 3: Close ended the wait for the second conn's", got)
		}
	})
}

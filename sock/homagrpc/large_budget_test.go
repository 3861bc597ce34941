package homagrpc_test

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/internal/testkit/socktest"
	"github.com/homa-go/homa/sock/homagrpc"
)

// A unary response too long for one Homa message counts against the
// server's MaxStreamMemory until the client has pulled it: one that does
// not fit beside those waiting is refused with ResourceExhausted, and
// the budget is whole again once they are pulled or abandoned. The
// server's stats handler sees the refused call end with the status its
// client got.
func TestLargeResponseBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const budget, size = 3_000_000, 1_500_000
		rec := &recorder{}
		w := newMemWorld(t, memnet.Config{}, &testService{}, homagrpc.MaxStreamMemory(budget), homagrpc.MaxStreamMemoryPerHost(budget), homagrpc.StatsHandler(rec))
		defer w.close(t)
		c := w.client(t)
		ctx := context.Background()
		big := grpc.MaxCallRecvMsgSize(8 << 20)

		// Pulled at once by the client: held meanwhile, given back after.
		r, err := c.UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: size}, big)
		if err != nil || len(r.GetPayload().GetBody()) != size {
			t.Fatalf("a long response within the budget: %v", err)
		}
		synctest.Wait()
		if got := homagrpc.StreamMemoryForTest(w.srv); got != 0 {
			t.Errorf("%d bytes held after the response was pulled", got)
		}

		// A client that takes the first part and pulls no more.
		raw, err := socktest.OpenMem(w.nw, netip.AddrPortFrom(clientHost, 0), testConfig())
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		payload, _ := proto.Marshal(&testpb.SimpleRequest{ResponseSize: size})
		id, err := raw.Send(serverAddr, homagrpc.AppendRequestForTest(nil, 77, "/grpc.testing.TestService/UnaryCall", payload), 0)
		if err != nil {
			t.Fatal(err)
		}
		m, err := raw.Recv(ctx, id)
		if err != nil || m.Err != nil {
			t.Fatalf("the first part: %v %v", err, m.Err)
		}
		m.Release()
		synctest.Wait()
		held := homagrpc.StreamMemoryForTest(w.srv)
		if held <= 0 || held >= size {
			t.Errorf("a response waiting to be pulled holds %d bytes of the budget, want its unsent part, under %d", held, size)
		}

		// Another that would pass the budget beside it is refused.
		rec.take()
		_, err = c.UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: budget}, big)
		if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "MaxStreamMemory") {
			t.Errorf("a long response past the budget: %v, want ResourceExhausted naming MaxStreamMemory", err)
		}
		synctest.Wait()
		if ev := rec.take(); len(ev) == 0 || !strings.Contains(ev[len(ev)-1], "ResourceExhausted") || slices.Contains(ev, "OutPayload") {
			t.Errorf("the server's stats handler saw %v, want the call to end ResourceExhausted with no payload out", ev)
		}
		if got := homagrpc.StreamMemoryForTest(w.srv); got != held {
			t.Errorf("the refused response changed what is held: %d bytes, want %d", got, held)
		}
		// One that fits beside it is served.
		if _, err := c.UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: size}, big); err != nil {
			t.Errorf("a long response that fits beside the one waiting: %v", err)
		}
		// The silent client is taken as gone; what it left is given back.
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if got := homagrpc.StreamMemoryForTest(w.srv); got != 0 {
			t.Errorf("%d bytes held after the silent client's response was abandoned", got)
		}
	})
}

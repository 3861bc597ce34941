package homagrpc_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
)

// A call or stream the caller cancels ends its handler's context within
// a round trip, whatever the client was doing, and the handler sees the
// client's cancel as the cause. Without the cancel frame the handler
// would wait for its context until the server abandons a silent client
// (stream) or forever (unary).
func TestCancelReachesHandler(t *testing.T) {
	for _, kind := range []string{"unary", "bidi", "server"} {
		t.Run(kind, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				svc := blocking()
				w := newStreamWorld(t, svc)
				defer w.close(t)
				c := w.client(t)
				ctx, cancel := context.WithCancel(context.Background())
				recvd := make(chan error)
				switch kind {
				case "unary":
					go func() { _, err := c.UnaryCall(ctx, &testpb.SimpleRequest{}); recvd <- err }()
				case "bidi":
					st, err := c.FullDuplexCall(ctx)
					if err != nil {
						t.Fatal(err)
					}
					go func() { _, err := st.Recv(); recvd <- err }()
				case "server":
					st, err := c.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{ResponseParameters: params(1)})
					if err != nil {
						t.Fatal(err)
					}
					go func() { _, err := st.Recv(); recvd <- err }()
				}
				<-svc.entered
				start := time.Now()
				cancel()
				wantCode(t, "after cancel", <-recvd, codes.Canceled)
				<-svc.returned
				svc.mu.Lock()
				defer svc.mu.Unlock()
				if !errors.Is(svc.ctxErr, context.Canceled) || svc.cause == nil || !strings.Contains(svc.cause.Error(), "client canceled") {
					t.Errorf("the handler's context ended with %v (cause %v), want canceled by the client", svc.ctxErr, svc.cause)
				}
				if d := time.Since(start); d >= time.Second {
					t.Errorf("the handler ended %v after the cancel, want within a round trip", d)
				}
			})
		})
	}
}

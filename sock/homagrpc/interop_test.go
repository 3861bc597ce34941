package homagrpc_test

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"

	"github.com/homa-go/homa/homa/memnet"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/reflection"
	reflectpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
)

// grpc-go's health service works over Homa, Watch (a server stream)
// included: each change of status reaches the watcher.
func TestHealthWatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hs := health.NewServer()
		w := serveMem(t, memnet.Config{}, func(r grpc.ServiceRegistrar) { healthpb.RegisterHealthServer(r, hs) })
		defer w.close(t)
		defer hs.Shutdown()
		c := healthpb.NewHealthClient(w.dial(t, serverAddr))
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()

		hs.SetServingStatus("svc", healthpb.HealthCheckResponse_SERVING)
		resp, err := c.Check(ctx, &healthpb.HealthCheckRequest{Service: "svc"})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("Check: %v, %v", resp, err)
		}
		watch, err := c.Watch(ctx, &healthpb.HealthCheckRequest{Service: "svc"})
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []healthpb.HealthCheckResponse_ServingStatus{
			healthpb.HealthCheckResponse_SERVING,
			healthpb.HealthCheckResponse_NOT_SERVING,
			healthpb.HealthCheckResponse_SERVING,
		} {
			resp, err := watch.Recv()
			if err != nil || resp.GetStatus() != want {
				t.Fatalf("Watch: %v, %v; want %v", resp, err, want)
			}
			if want == healthpb.HealthCheckResponse_SERVING {
				hs.SetServingStatus("svc", healthpb.HealthCheckResponse_NOT_SERVING)
			} else {
				hs.SetServingStatus("svc", healthpb.HealthCheckResponse_SERVING)
			}
		}
	})
}

// grpc-go's server reflection works over Homa: a client lists the
// services and fetches the file descriptor of one.
func TestReflection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := serveMem(t, memnet.Config{}, func(r grpc.ServiceRegistrar) {
			testpb.RegisterTestServiceServer(r, &streamService{})
			reflection.Register(r.(reflection.GRPCServer))
		})
		defer w.close(t)
		c := reflectpb.NewServerReflectionClient(w.dial(t, serverAddr))
		st, err := c.ServerReflectionInfo(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(&reflectpb.ServerReflectionRequest{MessageRequest: &reflectpb.ServerReflectionRequest_ListServices{}}); err != nil {
			t.Fatal(err)
		}
		resp, err := st.Recv()
		if err != nil {
			t.Fatalf("list services: %v", err)
		}
		var names []string
		for _, s := range resp.GetListServicesResponse().GetService() {
			names = append(names, s.GetName())
		}
		for _, want := range []string{"grpc.testing.TestService", "grpc.reflection.v1.ServerReflection"} {
			if !slices.Contains(names, want) {
				t.Errorf("services %v lack %s", names, want)
			}
		}
		if err := st.Send(&reflectpb.ServerReflectionRequest{MessageRequest: &reflectpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: "grpc.testing.TestService"}}); err != nil {
			t.Fatal(err)
		}
		resp, err = st.Recv()
		if err != nil || len(resp.GetFileDescriptorResponse().GetFileDescriptorProto()) == 0 {
			t.Fatalf("file containing grpc.testing.TestService: %v, %v", resp, err)
		}
		if err := st.CloseSend(); err != nil {
			t.Fatal(err)
		}
	})
}

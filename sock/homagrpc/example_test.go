package homagrpc_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"net/netip"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding/gzip"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/homa-go/homa/sock"
	"github.com/homa-go/homa/sock/homagrpc"
)

// upperService implements the protoc-generated grpc.testing.TestService
// as it would for grpc-go: its UnaryCall answers with the payload in
// upper case and says who served it in the trailer; its FullDuplexCall
// answers each message of a stream the same way.
type upperService struct {
	testpb.UnimplementedTestServiceServer
}

func (upperService) UnaryCall(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	grpc.SetTrailer(ctx, metadata.Pairs("served-by", "homa"))
	return &testpb.SimpleResponse{Payload: &testpb.Payload{Body: bytes.ToUpper(req.GetPayload().GetBody())}}, nil
}

func (upperService) FullDuplexCall(st testpb.TestService_FullDuplexCallServer) error {
	for {
		req, err := st.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		body := bytes.ToUpper(req.GetPayload().GetBody())
		if err := st.Send(&testpb.StreamingOutputCallResponse{Payload: &testpb.Payload{Body: body}}); err != nil {
			return err
		}
	}
}

// A generated gRPC server and client talking over Homa. UDP encapsulation
// needs no privileges; leave the Config out for Homa over IP.
func Example() {
	cfg := &sock.Config{Transport: sock.UDP}
	s, err := sock.Open(netip.MustParseAddrPort("127.0.0.1:27321"), cfg)
	if err != nil {
		log.Fatal(err)
	}
	srv := homagrpc.NewServer()
	testpb.RegisterTestServiceServer(srv, upperService{})
	served := make(chan error)
	go func() { served <- srv.Serve(s) }()
	defer func() { srv.Stop(); <-served }()

	cc, err := homagrpc.Dial(s.LocalAddr(), cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer cc.Close()
	client := testpb.NewTestServiceClient(cc)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var trailer metadata.MD
	resp, err := client.UnaryCall(ctx, &testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte("hello, homa")}}, grpc.Trailer(&trailer))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s %v\n", resp.GetPayload().GetBody(), trailer.Get("served-by"))

	_, err = client.EmptyCall(ctx, &testpb.Empty{}) // not implemented by upperService
	fmt.Println(status.Code(err))

	// A bidirectional stream: each message a frame of a Homa RPC.
	stream, err := client.FullDuplexCall(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, w := range []string{"one", "two"} {
		if err := stream.Send(&testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: []byte(w)}}); err != nil {
			log.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s\n", resp.GetPayload().GetBody())
	}
	stream.CloseSend()
	_, err = stream.Recv()
	fmt.Println(err == io.EOF)
	// Output:
	// HELLO, HOMA [homa]
	// Unimplemented
	// ONE
	// TWO
	// true
}

// One registration served over Homa and over grpc-go's HTTP/2: Mirror
// registers each service on both servers, so grpcurl and clients in
// other languages reach over TCP what Homa clients reach over Homa.
func ExampleMirror() {
	hs, gs := homagrpc.NewServer(), grpc.NewServer()
	both := homagrpc.Mirror(hs, gs)
	testpb.RegisterTestServiceServer(both, upperService{})
	reflection.Register(both) // grpcurl lists the same services on both

	fmt.Println(len(hs.GetServiceInfo()), len(gs.GetServiceInfo()))
	// Output:
	// 3 3
}

// A client of several servers: round robin sends each call or stream
// to the next in turn.
func ExampleDialTarget() {
	cc, err := homagrpc.DialTarget("homa:///127.0.0.1:27331,127.0.0.1:27332", &sock.Config{Transport: sock.UDP},
		homagrpc.WithBalancer(homagrpc.RoundRobin))
	if err != nil {
		log.Fatal(err)
	}
	defer cc.Close()
	fmt.Println(cc.Targets())
	// Output:
	// [127.0.0.1:27331 127.0.0.1:27332]
}

// gzipReplies answers in gzip when its client accepts it, whatever
// compressed the request.
type gzipReplies struct {
	testpb.UnimplementedTestServiceServer
}

func (gzipReplies) UnaryCall(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	names, _ := homagrpc.ClientSupportedCompressors(ctx)
	if slices.Contains(names, gzip.Name) { // every client with gzip registered
		if err := homagrpc.SetSendCompressor(ctx, gzip.Name); err != nil {
			return nil, err
		}
	}
	return &testpb.SimpleResponse{Payload: &testpb.Payload{Body: make([]byte, req.GetResponseSize())}}, nil
}

// A handler chooses its responses' compressor. SetSendCompressor works
// in handlers served by grpc-go too, so one registration through Mirror
// serves both.
func ExampleSetSendCompressor() {
	srv := homagrpc.NewServer()
	testpb.RegisterTestServiceServer(srv, gzipReplies{})
}

// A call that waits for its server: made before the server answers (it
// may be starting), it waits, probing, until one does or its context
// ends, instead of failing with Unavailable.
func ExampleClientConn_waitForReady() {
	cc, err := homagrpc.Dial(netip.MustParseAddrPort("127.0.0.1:27333"), &sock.Config{Transport: sock.UDP})
	if err != nil {
		log.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = testpb.NewTestServiceClient(cc).EmptyCall(ctx, &testpb.Empty{}, grpc.WaitForReady(true))
	fmt.Println(status.Code(err)) // nothing listens: the deadline ends the wait
	// Output:
	// DeadlineExceeded
}

package stubecho

import (
	"context"
	"errors"
	"io"

	testpb "google.golang.org/grpc/interop/grpc_testing"
)

// FullDuplexCall answers each message of a bidirectional stream with its
// payload (see Options.ReplySize), in order, until the client
// half-closes.
func (s *service) FullDuplexCall(stream testpb.TestService_FullDuplexCallServer) error {
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		s.served.Add(1)
		body := s.reply(req.GetPayload().GetBody())
		if err := stream.Send(&testpb.StreamingOutputCallResponse{Payload: &testpb.Payload{Body: body}}); err != nil {
			return err
		}
	}
}

// Stream is one bidirectional FullDuplexCall stream of a Client: each
// Exchange sends a message and receives its echo. One goroutine at a
// time may use it.
type Stream struct {
	s      testpb.TestService_FullDuplexCallClient
	cancel context.CancelFunc
}

// Stream opens a FullDuplexCall stream, which lives until Close or ctx
// ends.
func (c *Client) Stream(ctx context.Context) (*Stream, error) {
	ctx, cancel := context.WithCancel(ctx)
	s, err := c.stub.FullDuplexCall(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	return &Stream{s: s, cancel: cancel}, nil
}

// Exchange sends req as one message of the stream and returns the payload
// of the message that answers it, which belongs to the caller.
func (s *Stream) Exchange(req []byte) ([]byte, error) {
	if err := s.s.Send(&testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: req}}); err != nil {
		return nil, err
	}
	resp, err := s.s.Recv()
	if err != nil {
		return nil, err
	}
	return resp.GetPayload().GetBody(), nil
}

// Close half-closes the stream, waits for the server to end it, and
// releases it.
func (s *Stream) Close() error {
	defer s.cancel()
	if err := s.s.CloseSend(); err != nil {
		return err
	}
	if _, err := s.s.Recv(); !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

package homagrpc

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/homa-go/homa/sock"
)

// callError is the error of a call that failed before a status came back
// from the service: in the transport, in the framing, or by the caller's
// context. It is a gRPC status error (status.FromError, status.Code) that
// also unwraps to its cause, so errors.Is(err, sock.ErrPeerTimeout) or
// errors.Is(err, context.DeadlineExceeded) holds.
type callError struct {
	st    *status.Status
	cause error
}

func (e *callError) Error() string {
	return fmt.Sprintf("rpc error: code = %s desc = %s", e.st.Code(), e.st.Message())
}

// GRPCStatus makes the error a status error for package status.
func (e *callError) GRPCStatus() *status.Status { return e.st }

// Unwrap returns the cause.
func (e *callError) Unwrap() error { return e.cause }

// failure returns a status error with code c wrapping cause, described by
// the formatted message.
func failure(c codes.Code, cause error, format string, args ...any) error {
	return &callError{st: status.New(c, fmt.Sprintf(format, args...)), cause: cause}
}

// codeOf maps an error of the transport or of a context to a gRPC code:
//
//	context.DeadlineExceeded   DeadlineExceeded
//	context.Canceled           Canceled
//	sock.ErrPeerTimeout        Unavailable (the server stopped answering)
//	sock.ErrMessageTooLong     ResourceExhausted
//	sock.ErrClosed             Canceled (the client was closed)
//	sock.ErrAborted            Canceled
//	errMalformed               Internal (a response that is not a frame)
//	anything else              Unavailable
func codeOf(err error) codes.Code {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	case errors.Is(err, sock.ErrPeerTimeout):
		return codes.Unavailable
	case errors.Is(err, sock.ErrMessageTooLong):
		return codes.ResourceExhausted
	case errors.Is(err, sock.ErrClosed), errors.Is(err, sock.ErrAborted):
		return codes.Canceled
	case errors.Is(err, errMalformed):
		return codes.Internal
	}
	return codes.Unavailable
}

// transportError turns a failure of the transport or context into a
// status error that wraps it.
func transportError(err error) error {
	return &callError{st: status.New(codeOf(err), "homagrpc: "+err.Error()), cause: err}
}

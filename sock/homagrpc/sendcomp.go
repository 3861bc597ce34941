package homagrpc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// A handler may choose the compressor of its responses, as grpc-go's
// grpc.SetSendCompressor lets it, among those the client accepts. Over
// Homa the client's list travels in the request frame (flag 8, as
// grpc-accept-encoding holds it), and the server's choice, when it is
// not the request's compressor, in a header metadata entry
// grpc-encoding (taken out before the caller sees the header).
const encodingKey = "grpc-encoding"

// SetSendCompressor sets the compressor of the handler's responses, as
// grpc.SetSendCompressor does in grpc-go: name must be registered
// (encoding.RegisterCompressor) and among the compressors the client
// accepts (ClientSupportedCompressors), or be "identity", which turns
// compression off; it must be called before the header is sent. ctx is
// the handler's context. On a homagrpc server it applies to homagrpc's
// stream; on any other (a grpc.Server, through Mirror) it calls
// grpc.SetSendCompressor, so one handler serves both.
//
// grpc.SetSendCompressor itself fails in homagrpc handlers: it accepts
// only grpc-go's own transport stream, an internal type.
func SetSendCompressor(ctx context.Context, name string) error {
	sc, ok := grpc.ServerTransportStreamFromContext(ctx).(sendCompressorSetter)
	if !ok {
		return grpc.SetSendCompressor(ctx, name)
	}
	if err := validateSendCompressor(name, sc.clientAccepts()); err != nil {
		return fmt.Errorf("unable to set send compressor: %w", err)
	}
	return sc.setSendCompressor(name)
}

// ClientSupportedCompressors returns the names of the compressors the
// client accepts, as grpc.ClientSupportedCompressors does; on servers
// other than homagrpc's it calls that function.
func ClientSupportedCompressors(ctx context.Context) ([]string, error) {
	sc, ok := grpc.ServerTransportStreamFromContext(ctx).(sendCompressorSetter)
	if !ok {
		return grpc.ClientSupportedCompressors(ctx)
	}
	return sc.clientAccepts(), nil
}

// sendCompressorSetter is a homagrpc transport stream.
type sendCompressorSetter interface {
	clientAccepts() []string
	setAccepts([]byte)
	setSendCompressor(name string) error
}

var errHeaderSent = errors.New("transport: set send compressor called after headers sent or stream done")

// validateSendCompressor applies grpc-go's rules.
func validateSendCompressor(name string, accepts []string) error {
	if name == encoding.Identity {
		return nil
	}
	if encoding.GetCompressor(name) == nil {
		return fmt.Errorf("compressor not registered %q", name)
	}
	if !slices.Contains(accepts, name) {
		return fmt.Errorf("client does not support compressor %q", name)
	}
	return nil
}

// sendCompressor is the compressor a handler chose (nil: identity).
func sendCompressor(name string) encoding.Compressor {
	if name == encoding.Identity {
		return nil
	}
	return encoding.GetCompressor(name)
}

// withEncoding returns header with the response's compressor named,
// when it is not the request's.
func withEncoding(header metadata.MD, name, reqComp string) metadata.MD {
	header = header.Copy()
	if name == reqComp || name == encoding.Identity && reqComp == "" {
		delete(header, encodingKey)
		return header
	}
	if header == nil {
		header = metadata.MD{}
	}
	header.Set(encodingKey, name)
	return header
}

// parseAccept returns the names a list of accepted compressors holds.
func parseAccept(a []byte) []string {
	var names []string
	for n := range strings.SplitSeq(string(a), ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	return names
}

// recvCompressor removes from a response's header the compressor the
// server chose, when it named one, and returns the compressor of the
// response's messages: that one, or else comp, the request's.
func recvCompressor(header metadata.MD, comp encoding.Compressor) (encoding.Compressor, error) {
	vs := header[encodingKey]
	if vs == nil {
		return comp, nil
	}
	delete(header, encodingKey)
	name := vs[len(vs)-1]
	if name == encoding.Identity {
		return nil, nil
	}
	c := encoding.GetCompressor(name)
	if c == nil {
		return nil, status.Errorf(codes.Internal, "grpc: Decompressor is not installed for grpc-encoding %q", name)
	}
	return c, nil
}

// acceptFor is what a call compressed by comp advertises.
func (c *ClientConn) acceptFor(comp string) string {
	if comp == "" || comp == encoding.Identity {
		return c.accept
	}
	for n := range strings.SplitSeq(c.accept, ",") {
		if n == comp {
			return c.accept
		}
	}
	return acceptList(comp, c.opts.accept)
}

// acceptList is what a client advertises: the call's compressor, gzip
// when registered (grpc-go ships it), and the names WithAcceptCompressors
// gave that are registered, comma-separated.
func acceptList(callComp string, extra []string) string {
	var names []string
	add := func(n string) {
		if n != "" && n != encoding.Identity && !slices.Contains(names, n) && encoding.GetCompressor(n) != nil {
			names = append(names, n)
		}
	}
	add(callComp)
	add("gzip")
	for _, n := range extra {
		add(n)
	}
	return strings.Join(names, ",")
}

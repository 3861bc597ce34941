package homagrpc

import (
	"net/netip"

	"google.golang.org/grpc/codes"

	"github.com/homa-go/homa/sock"
)

// AppendOpenFrameForTest appends an open frame of stream id for method
// whose chunk carries n bytes (one message), half-closed, not pulling.
func AppendOpenFrameForTest(b []byte, id uint64, method string, n int) []byte {
	b = appendStreamReqHeader(b, opOpen, sreqFlagHalfClose, id, initialCredit)
	b, _ = appendRequestHead(b, reqHead{method: method})
	b = appendChunkHeader(b, chunkFlagLast, n)
	return append(b, make([]byte, n)...)
}

// StreamResponseCodeForTest is the status code of a stream response
// that ends its stream, or codes.OK.
func StreamResponseCodeForTest(msg []byte) codes.Code {
	r, err := parseStreamResp(msg)
	if err != nil {
		return codes.Internal
	}
	return codes.Code(r.resp.code)
}

// StreamMemoryForTest is what the server's streams hold of its budget.
func StreamMemoryForTest(s *Server) int64 { return s.streamMem.used.Load() }

// AppendRequestForTest appends a unary request frame for method with
// the call id and the encoded request payload.
func AppendRequestForTest(b []byte, callID uint64, method string, payload []byte) []byte {
	b, _ = appendRequestHead(b, reqHead{method: method, callID: callID})
	return append(b, payload...)
}

// SocketForTest is c's socket.
func SocketForTest(c *ClientConn) *sock.Socket { return c.s }

// NewClientConnNamesForTest is DialTarget from the socket s, which the
// ClientConn does not own.
func NewClientConnNamesForTest(s *sock.Socket, target string, opts ...DialOption) (*ClientConn, error) {
	return connectTarget(target, opts, func(targets []netip.AddrPort) (*ClientConn, error) {
		return newClientConn(s, targets, opts), nil
	})
}

// pullSetsForTest returns the pull sets of the server's listeners.
func (s *Server) pullSetsForTest() []*pullSet {
	s.mu.Lock()
	defer s.mu.Unlock()
	var sets []*pullSet
	for l := range s.listeners {
		l.smu.Lock()
		for _, ps := range l.pulls {
			sets = append(sets, ps)
		}
		l.smu.Unlock()
	}
	return sets
}

// HostSharesForTest is how many client hosts the server's listeners keep
// a share for.
func HostSharesForTest(s *Server) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for l := range s.listeners {
		l.smu.Lock()
		n += len(l.hosts)
		l.smu.Unlock()
	}
	return n
}

package homagrpc

import (
	"net/netip"
	"sync"

	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers "proto"
	"google.golang.org/grpc/mem"
)

// protoCodec is the codec registered for "proto", looked up at the first
// call so that a replacement registered in an init function is the one
// used, as in grpc-go.
var protoCodec = sync.OnceValue(func() encoding.CodecV2 {
	return encoding.GetCodecV2("proto")
})

// codecV1 adapts a codec of the older interface (grpc.ForceCodec).
type codecV1 struct{ c encoding.Codec }

func (c codecV1) Name() string { return c.c.Name() }

func (c codecV1) Marshal(v any) (mem.BufferSlice, error) {
	b, err := c.c.Marshal(v)
	if err != nil {
		return nil, err
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

func (c codecV1) Unmarshal(data mem.BufferSlice, v any) error {
	return c.c.Unmarshal(data.Materialize(), v)
}

// Addr is the address of a Homa peer in a peer.Peer: its host and Homa
// port.
type Addr netip.AddrPort

// Network is "homa".
func (a Addr) Network() string { return "homa" }

func (a Addr) String() string { return netip.AddrPort(a).String() }

// maxPooledBuffer is the largest frame buffer kept for reuse, so that one
// large message does not pin its memory.
const maxPooledBuffer = 64 << 10

var buffers = sync.Pool{New: func() any { return new([]byte) }}

// getBuffer returns an empty buffer from the pool.
func getBuffer() *[]byte {
	b := buffers.Get().(*[]byte)
	*b = (*b)[:0]
	return b
}

// putBuffer returns the buffer, which grew to used, to the pool.
func putBuffer(b *[]byte, used []byte) {
	if cap(used) <= maxPooledBuffer {
		*b = used[:0]
		buffers.Put(b)
	}
}

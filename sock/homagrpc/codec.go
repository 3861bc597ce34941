package homagrpc

import (
	"net/netip"
	"sync"

	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers "proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
)

// protoCodec is the codec registered for "proto", looked up at the first
// call so that a replacement registered in an init function is the one
// used, as in grpc-go.
var protoCodec = sync.OnceValue(func() encoding.CodecV2 {
	return encoding.GetCodecV2("proto")
})

// getCodec returns the codec registered for a content subtype, of
// either interface (the older first, as in grpc-go), or nil.
func getCodec(name string) encoding.CodecV2 {
	if c := encoding.GetCodec(name); c != nil {
		return codecV1{c}
	}
	return encoding.GetCodecV2(name)
}

// stockProto is the codec grpc-go registers for "proto". While it is the
// one registered, messages are encoded straight into the frame and
// decoded straight from the message, with the same bytes as the codec
// would produce and read, without its intermediate buffers.
var stockProto = encoding.GetCodecV2("proto")

// protoMessage returns v as a protobuf message, as the proto codec takes
// it, or nil.
func protoMessage(v any) proto.Message {
	switch v := v.(type) {
	case protoadapt.MessageV1:
		return protoadapt.MessageV2Of(v)
	case protoadapt.MessageV2:
		return v
	}
	return nil
}

// appendMessage appends v, encoded by codec, to b.
func appendMessage(b []byte, codec encoding.CodecV2, v any) ([]byte, error) {
	if codec == stockProto {
		if m := protoMessage(v); m != nil {
			return proto.MarshalOptions{}.MarshalAppend(b, m)
		}
	}
	data, err := codec.Marshal(v)
	if err != nil {
		return b, err
	}
	for _, d := range data {
		b = append(b, d.ReadOnlyData()...)
	}
	data.Free()
	return b, nil
}

// decodeMessage decodes data into v with codec. The codec may not keep
// data, which the message it came in owns (as in grpc-go, which recycles
// the buffers it gives codecs).
func decodeMessage(codec encoding.CodecV2, data []byte, v any) error {
	if codec == stockProto {
		if m := protoMessage(v); m != nil {
			return proto.Unmarshal(data, m)
		}
	}
	return codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(data)}, v)
}

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

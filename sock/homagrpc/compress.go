package homagrpc

import (
	"bytes"
	"io"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/status"
)

// compressor returns the compressor registered under name ("" for none)
// or a status error saying it is not installed, in grpc-go's words.
func compressor(name string) (encoding.Compressor, error) {
	if name == "" || name == "identity" {
		return nil, nil
	}
	c := encoding.GetCompressor(name)
	if c == nil {
		return nil, status.Errorf(codes.Internal, "grpc: Compressor is not installed for requested grpc-encoding %q", name)
	}
	return c, nil
}

// compress returns data compressed by c.
func compress(c encoding.Compressor, data []byte) ([]byte, error) {
	var buf bytes.Buffer
	w, err := c.Compress(&buf)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "grpc: error while compressing: %v", err)
	}
	if _, err := w.Write(data); err != nil {
		return nil, status.Errorf(codes.Internal, "grpc: error while compressing: %v", err)
	}
	if err := w.Close(); err != nil {
		return nil, status.Errorf(codes.Internal, "grpc: error while compressing: %v", err)
	}
	return buf.Bytes(), nil
}

// decompress returns data decompressed by c, failing once the result
// would exceed limit bytes: what a peer's compressed bytes expand to is
// bounded by the receiver's limit, not by the peer.
func decompress(c encoding.Compressor, data []byte, limit int) ([]byte, error) {
	r, err := c.Decompress(bytes.NewReader(data))
	if err != nil {
		return nil, status.Errorf(codes.Internal, "grpc: failed to decompress the received message: %v", err)
	}
	out, err := io.ReadAll(io.LimitReader(r, int64(limit)+1))
	if err != nil {
		return nil, status.Errorf(codes.Internal, "grpc: failed to decompress the received message: %v", err)
	}
	if len(out) > limit {
		return nil, status.Errorf(codes.ResourceExhausted, "grpc: received message after decompression larger than max (%d)", limit)
	}
	return out, nil
}

// encodeMsg encodes v for a stream: by the codec, then the compressor
// when there is one, within the send limit (negative: none). An
// uncompressed message is encoded into a buffer of the pool, which buf
// holds (nil otherwise), for the stream to give back once the message
// is sent.
func encodeMsg(codec encoding.CodecV2, comp encoding.Compressor, v any, maxSend int) (data []byte, buf *[]byte, err error) {
	buf = getBuffer()
	data, err = appendMessage(*buf, codec, v)
	if err != nil {
		putBuffer(buf, data)
		return nil, nil, status.Errorf(codes.Internal, "grpc: error while marshaling: %v", err)
	}
	if maxSend >= 0 && len(data) > maxSend {
		putBuffer(buf, data)
		return nil, nil, status.Errorf(codes.ResourceExhausted, "grpc: trying to send message larger than max (%d vs. %d)", len(data), maxSend)
	}
	if comp != nil {
		z, err := compress(comp, data)
		putBuffer(buf, data)
		return z, nil, err
	}
	return data, buf, nil
}

// decodeMsg decodes a message received on a stream into v.
func decodeMsg(codec encoding.CodecV2, comp encoding.Compressor, m inMsg, maxRecv int, v any) error {
	data := m.data
	if m.compressed {
		if comp == nil {
			return status.Error(codes.Internal, "grpc: compressed flag set with identity or empty encoding")
		}
		var err error
		if data, err = decompress(comp, data, maxRecv); err != nil {
			return err
		}
	}
	if len(data) > maxRecv {
		return status.Errorf(codes.ResourceExhausted, "grpc: received message larger than max (%d vs. %d)", len(data), maxRecv)
	}
	if err := decodeMessage(codec, data, v); err != nil {
		return status.Errorf(codes.Internal, "grpc: failed to unmarshal the received message: %v", err)
	}
	return nil
}

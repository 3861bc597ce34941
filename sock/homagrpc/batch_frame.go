package homagrpc

import (
	"encoding/binary"
	"fmt"
)

// The framing of batches. A client with data frames of several streams
// ready for one server at once carries them in one Homa request, a
// batch (kind 5), and the server answers them all in one response
// (kind 6), in the same order:
//
//	offset size field
//	0      1    version (1)
//	1      1    kind (5: batch of stream frames; 6: batch of stream
//	            responses)
//	2      2    count N: 2 to maxBatchFrames (64)
//	4      4    reserved (0)
//	8           N entries, each a 4-byte length L and L bytes: a client
//	            stream frame (kind 3, op data) in a batch request; the
//	            response to the entry of the same index (kind 4) in a
//	            batch response
//
// Nothing else follows the last entry. A server that cannot take a
// batch (too many entries, a length beyond the message, an entry that
// is not a valid data frame) answers it with one stream response (kind
// 4, sequence 0, the end flag, codes.Internal), which the client takes
// as the answer to every frame in the batch. A single frame is sent as
// before, without a batch around it.
const (
	kindBatchReq  = 5
	kindBatchResp = 6

	batchOffCount  = 2
	batchHeaderLen = 8
	batchEntryLen  = 4

	// maxBatchFrames bounds the entries of a batch, each way.
	maxBatchFrames = 64
)

// appendBatchHeader appends the header of a batch of n entries.
func appendBatchHeader(b []byte, kind byte, n int) []byte {
	b = append(b, frameVersion, kind)
	b = binary.BigEndian.AppendUint16(b, uint16(n))
	return append(b, 0, 0, 0, 0)
}

// appendBatchEntry appends one entry of a batch.
func appendBatchEntry(b, frame []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(frame)))
	return append(b, frame...)
}

// batchLen is the encoded length of a batch of the frames.
func batchLen(frames [][]byte) int {
	n := batchHeaderLen
	for _, f := range frames {
		n += batchEntryLen + len(f)
	}
	return n
}

// parseBatch splits a batch of the kind into its entries, appended to
// dst; they alias msg. It checks the layout, not the entries.
func parseBatch(msg []byte, kind byte, dst [][]byte) ([][]byte, error) {
	if err := checkHead(msg, kind, batchHeaderLen); err != nil {
		return dst, err
	}
	if binary.BigEndian.Uint32(msg[4:]) != 0 {
		return dst, fmt.Errorf("%w: reserved bytes set in a batch", errMalformed)
	}
	n := int(binary.BigEndian.Uint16(msg[batchOffCount:]))
	if n < 2 || n > maxBatchFrames {
		return dst, fmt.Errorf("%w: a batch of %d frames (2 to %d)", errMalformed, n, maxBatchFrames)
	}
	rest := msg[batchHeaderLen:]
	for i := 0; i < n; i++ {
		if len(rest) < batchEntryLen {
			return dst, fmt.Errorf("%w: batch entry %d of %d missing", errMalformed, i, n)
		}
		l := uint64(binary.BigEndian.Uint32(rest))
		rest = rest[batchEntryLen:]
		if l > uint64(len(rest)) {
			return dst, fmt.Errorf("%w: batch entry %d of %d bytes overruns the message", errMalformed, i, l)
		}
		dst = append(dst, rest[:l:l])
		rest = rest[l:]
	}
	if len(rest) != 0 {
		return dst, fmt.Errorf("%w: %d bytes after a batch's last entry", errMalformed, len(rest))
	}
	return dst, nil
}

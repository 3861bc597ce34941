package netrpc

import (
	"bytes"
	"encoding/binary"
	"sync"
)

// outMsg is a message being built: in a pooled buffer while it fits one
// Homa message, then in the parts it will travel in, each begun with
// room for its part header, so that the bytes the encoder writes are
// copied once, into the buffers that are sent. Past limit it only counts
// what is written.
type outMsg struct {
	head  bytes.Buffer
	parts [][]byte // once the message is longer than homaMax
	n     int      // the message's length
	limit int
}

// maxPooledBuffer is the largest buffer kept for reuse, so one long
// message does not pin its memory in the pool.
const maxPooledBuffer = 64 << 10

var outMsgs = sync.Pool{New: func() any { return new(outMsg) }}

// newOutMsg starts a message of at most limit bytes, from the pool.
func newOutMsg(limit int) *outMsg {
	o := outMsgs.Get().(*outMsg)
	o.limit = limit
	return o
}

// Write appends p to the message.
func (o *outMsg) Write(p []byte) (int, error) {
	o.n += len(p)
	switch {
	case o.parts == nil && o.n <= homaMax:
		return o.head.Write(p)
	case o.n > o.limit:
		o.parts = [][]byte{} // too long: keep nothing
		return len(p), nil
	case o.parts == nil:
		o.parts = [][]byte{}
		o.spill(o.head.Bytes(), len(p))
		o.head.Reset()
	}
	o.spill(p, 0)
	return len(p), nil
}

// spill appends p to the parts; more is how many bytes are known to
// follow, so the parts are made long enough for them too.
func (o *outMsg) spill(p []byte, more int) {
	for len(p) > 0 {
		if k := len(o.parts) - 1; k >= 0 && len(o.parts[k]) < partLen(partData) {
			n := min(partLen(partData)-len(o.parts[k]), len(p))
			o.parts[k] = append(o.parts[k], p[:n]...)
			p = p[n:]
			continue
		}
		c := partLen(min(partData, len(p)+more))
		o.parts = append(o.parts, make([]byte, partHeaderLen, c))
	}
}

// tooLong reports whether the message went past its limit.
func (o *outMsg) tooLong() bool { return o.n > o.limit }

// release returns o to the pool unless its buffer has grown long; the
// parts are their sender's.
func (o *outMsg) release() {
	o.head.Reset()
	o.parts, o.n = nil, 0
	if o.head.Cap() <= maxPooledBuffer {
		outMsgs.Put(o)
	}
}

// putPartHeader writes the header of the part of kind in b (a part of
// an outMsg), the k-th of a message of total bytes with this id.
func putPartHeader(b []byte, kind byte, total, k int, id uint64) {
	b[0], b[1], b[2], b[3] = frameVersion, kind, 0, 0
	binary.BigEndian.PutUint32(b[offPartTotal:], uint32(total))
	binary.BigEndian.PutUint32(b[offPartOffset:], uint32(k*partData))
	binary.BigEndian.PutUint64(b[offPartID:], id)
}

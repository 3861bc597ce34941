package homagrpc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"google.golang.org/grpc/metadata"
)

// The framing of one unary call in one Homa RPC. All integers are big
// endian. The request message is
//
//	offset size field
//	0      1    version (1)
//	1      1    kind (1: request)
//	2      1    codec name length C (0: "proto")
//	3      1    flags: 1 call id, 2 compressor, 4 payload compressed,
//	            8 accepted compressors (other bits are refused)
//	4      2    method length M (1..65535)
//	6      2    metadata entry count N
//	8      4    metadata length L in bytes
//	12     8    timeout in nanoseconds (0: none; at most 2^63-1)
//	20     8    call id, with flag 1: the id a cancel frame (a stream
//	            frame of op cancel) names to end the call's handler
//	...    1+P  compressor, with flag 2: length P and name, as in
//	            grpc-encoding
//	...    1+A  accepted compressors, with flag 8: length A and the
//	            names, comma-separated, as in grpc-accept-encoding
//	...    C    codec name: the content subtype, as in
//	            "application/grpc+NAME"
//	...    M    method, "/package.Service/Method"
//	...    L    metadata: N entries
//	...         payload: the request message, encoded by the codec
//
// and the response message is
//
//	offset size field
//	0      1    version (1)
//	1      1    kind (2: response)
//	2      1    flags: 1 payload compressed (by the compressor the header
//	            entry grpc-encoding names, else the request's)
//	3      1    reserved (0)
//	4      4    status code
//	8      4    status message length S
//	12     4    status details length D
//	16     2    header metadata entry count Nh
//	18     2    trailer metadata entry count Nt
//	20     4    header metadata length Lh
//	24     4    trailer metadata length Lt
//	28     S    status message
//	...    D    status details: a serialized google.rpc.Status, as in
//	            grpc-status-details-bin; empty when there are none
//	...    Lh   header metadata: Nh entries
//	...    Lt   trailer metadata: Nt entries
//	...         payload: the response message (status OK only)
//
// A metadata entry is a key length K (2 bytes, at least 1), a value
// length V (4 bytes), the key and the value. A key with several values
// has an entry per value. Keys follow gRPC's rules ([0-9a-z-_.]), and the
// values of keys not ending in "-bin" are printable ASCII.
const (
	frameVersion = 1

	kindRequest  = 1
	kindResponse = 2

	reqFlagCallID     = 1
	reqFlagCompressor = 2
	reqFlagCompressed = 4
	reqFlagAccept     = 8
	reqFlags          = reqFlagCallID | reqFlagCompressor | reqFlagCompressed | reqFlagAccept

	respFlagCompressed = 1

	reqOffCodecLen = 2
	reqOffFlags    = 3
	reqOffMethod   = 4
	reqOffMDCount  = 6
	reqOffMDLen    = 8
	reqOffTimeout  = 12
	reqHeaderLen   = 20

	respOffCode       = 4
	respOffMsgLen     = 8
	respOffDetailsLen = 12
	respOffHdrCount   = 16
	respOffTrlCount   = 18
	respOffHdrLen     = 20
	respOffTrlLen     = 24
	respHeaderLen     = 28

	mdEntryHeader = 6 // key length and value length
	maxMethodLen  = math.MaxUint16
	maxCodecLen   = math.MaxUint8
	maxMDEntries  = math.MaxUint16
	maxKeyLen     = math.MaxUint16
)

// errMalformed marks a message that is not a valid frame.
var errMalformed = errors.New("homagrpc: malformed message")

// request is a parsed request frame; its slices alias the message.
type request struct {
	flags   byte
	callID  uint64
	comp    []byte // compressor name; empty: none
	accept  []byte // accepted compressors, comma-separated
	codec   []byte // empty: proto
	method  []byte
	timeout time.Duration // 0: no deadline
	md      []byte        // validated entries
	mdCount int
	payload []byte
}

// response is a parsed response frame; its slices alias the message.
type response struct {
	flags             byte
	code              uint32
	message, details  []byte
	header, trailer   []byte // validated entries
	nHeader, nTrailer int
	payload           []byte
}

// appendRequestHeader appends a request's header, codec name, method and
// metadata; the payload follows. It validates what it is given.
func appendRequestHeader(b []byte, codec, method string, timeout time.Duration, md metadata.MD) ([]byte, error) {
	return appendRequestHead(b, reqHead{codec: codec, method: method, timeout: timeout, md: md})
}

// reqHead is what a request frame says before its payload.
type reqHead struct {
	codec, method string
	comp          string // compressor; empty: none
	compressed    bool   // the payload is compressed
	callID        uint64 // 0: none
	timeout       time.Duration
	md            metadata.MD
	accept        string // compressors the caller accepts, comma-separated
}

// appendRequestHead appends a request's header and the fields that
// follow it, up to the payload. It validates what it is given.
func appendRequestHead(b []byte, h reqHead) ([]byte, error) {
	codec, method, timeout := h.codec, h.method, h.timeout
	if len(codec) > maxCodecLen || !validCodecName(codec) {
		return b, fmt.Errorf("homagrpc: codec name %q is not a valid content subtype of at most %d bytes", codec, maxCodecLen)
	}
	if len(h.comp) > maxCodecLen || !validCodecName(h.comp) {
		return b, fmt.Errorf("homagrpc: compressor name %q is not valid", h.comp)
	}
	if len(h.accept) > maxCodecLen || !validAccept(h.accept) {
		return b, fmt.Errorf("homagrpc: accepted compressors %q are not a valid list of at most %d bytes", h.accept, maxCodecLen)
	}
	if len(method) > maxMethodLen || !validMethod(method) {
		return b, fmt.Errorf("homagrpc: method %q is not of the form /service/method (at most %d bytes)", method, maxMethodLen)
	}
	if timeout < 0 {
		timeout = 0
	}
	flags := byte(0)
	if h.callID != 0 {
		flags |= reqFlagCallID
	}
	if h.comp != "" {
		flags |= reqFlagCompressor
	}
	if h.compressed {
		flags |= reqFlagCompressed
	}
	if h.accept != "" {
		flags |= reqFlagAccept
	}
	start := len(b)
	b = append(b, frameVersion, kindRequest, byte(len(codec)), flags)
	b = binary.BigEndian.AppendUint16(b, uint16(len(method)))
	b = append(b, 0, 0, 0, 0, 0, 0) // count and length, set below
	b = binary.BigEndian.AppendUint64(b, uint64(timeout))
	if h.callID != 0 {
		b = binary.BigEndian.AppendUint64(b, h.callID)
	}
	if h.comp != "" {
		b = append(b, byte(len(h.comp)))
		b = append(b, h.comp...)
	}
	if h.accept != "" {
		b = append(b, byte(len(h.accept)))
		b = append(b, h.accept...)
	}
	b = append(b, codec...)
	b = append(b, method...)
	mdStart := len(b)
	b, n, err := appendMD(b, h.md)
	if err != nil {
		return b[:start], err
	}
	binary.BigEndian.PutUint16(b[start+reqOffMDCount:], uint16(n))
	binary.BigEndian.PutUint32(b[start+reqOffMDLen:], uint32(len(b)-mdStart))
	return b, nil
}

// parseRequest validates a request frame and splits it.
func parseRequest(msg []byte) (request, error) {
	var r request
	if err := checkHead(msg, kindRequest, reqHeaderLen); err != nil {
		return r, err
	}
	r.flags = msg[reqOffFlags]
	if r.flags&^reqFlags != 0 {
		return r, fmt.Errorf("%w: unknown flags %#x", errMalformed, r.flags)
	}
	c := uint64(msg[reqOffCodecLen])
	m := uint64(binary.BigEndian.Uint16(msg[reqOffMethod:]))
	n := int(binary.BigEndian.Uint16(msg[reqOffMDCount:]))
	l := uint64(binary.BigEndian.Uint32(msg[reqOffMDLen:]))
	t := binary.BigEndian.Uint64(msg[reqOffTimeout:])
	if t > math.MaxInt64 {
		return r, fmt.Errorf("%w: timeout %d ns out of range", errMalformed, t)
	}
	rest := msg[reqHeaderLen:]
	if r.flags&reqFlagCallID != 0 {
		if len(rest) < 8 {
			return r, fmt.Errorf("%w: no room for the call id", errMalformed)
		}
		r.callID, rest = binary.BigEndian.Uint64(rest), rest[8:]
		if r.callID == 0 {
			return r, fmt.Errorf("%w: call id 0", errMalformed)
		}
	}
	var err error
	if r.flags&reqFlagCompressor != 0 {
		if r.comp, rest, err = shortField(rest, "compressor name", validCodecName[[]byte]); err != nil {
			return r, err
		}
	}
	if r.flags&reqFlagAccept != 0 {
		if r.accept, rest, err = shortField(rest, "accepted compressors", validAccept[[]byte]); err != nil {
			return r, err
		}
	}
	if r.flags&reqFlagCompressed != 0 && len(r.comp) == 0 {
		return r, fmt.Errorf("%w: a compressed payload without a compressor", errMalformed)
	}
	if c+m+l > uint64(len(rest)) {
		return r, fmt.Errorf("%w: codec, method and metadata lengths %d+%d+%d exceed the %d bytes after the header", errMalformed, c, m, l, len(rest))
	}
	r.codec, rest = rest[:c], rest[c:]
	r.method, rest = rest[:m], rest[m:]
	r.md, r.payload = rest[:l], rest[l:]
	r.mdCount = n
	r.timeout = time.Duration(t)
	if !validCodecName(r.codec) {
		return r, fmt.Errorf("%w: codec name %q", errMalformed, r.codec)
	}
	if !validMethod(r.method) {
		return r, fmt.Errorf("%w: method %q", errMalformed, r.method)
	}
	if err := checkMD(r.md, n); err != nil {
		return r, err
	}
	return r, nil
}

// appendResponseHeader appends a response's header, status and metadata;
// the payload (status OK only) follows. It validates the metadata.
func appendResponseHeader(b []byte, code uint32, message string, details []byte, header, trailer metadata.MD) ([]byte, error) {
	return appendResponseHead(b, 0, code, message, details, header, trailer)
}

// appendResponseHead is appendResponseHeader with the flags.
func appendResponseHead(b []byte, flags byte, code uint32, message string, details []byte, header, trailer metadata.MD) ([]byte, error) {
	start := len(b)
	b = append(b, frameVersion, kindResponse, flags, 0)
	b = binary.BigEndian.AppendUint32(b, code)
	b = binary.BigEndian.AppendUint32(b, uint32(len(message)))
	b = binary.BigEndian.AppendUint32(b, uint32(len(details)))
	b = append(b, make([]byte, respHeaderLen-respOffHdrCount)...) // set below
	b = append(b, message...)
	b = append(b, details...)
	hStart := len(b)
	b, nh, err := appendMD(b, header)
	if err != nil {
		return b[:start], fmt.Errorf("header metadata: %w", err)
	}
	tStart := len(b)
	b, nt, err := appendMD(b, trailer)
	if err != nil {
		return b[:start], fmt.Errorf("trailer metadata: %w", err)
	}
	binary.BigEndian.PutUint16(b[start+respOffHdrCount:], uint16(nh))
	binary.BigEndian.PutUint16(b[start+respOffTrlCount:], uint16(nt))
	binary.BigEndian.PutUint32(b[start+respOffHdrLen:], uint32(tStart-hStart))
	binary.BigEndian.PutUint32(b[start+respOffTrlLen:], uint32(len(b)-tStart))
	return b, nil
}

// parseResponse validates a unary response frame and splits it.
func parseResponse(msg []byte) (response, error) { return parseResponseFrame(msg, false) }

// parseResponseFrame validates a response frame and splits it. In a
// stream's response (inStream) messages may come with a failed status:
// those the handler sent before it failed.
func parseResponseFrame(msg []byte, inStream bool) (response, error) {
	var r response
	if err := checkHead(msg, kindResponse, respHeaderLen); err != nil {
		return r, err
	}
	r.flags = msg[2]
	if r.flags&^respFlagCompressed != 0 || msg[3] != 0 || r.flags != 0 && inStream {
		return r, fmt.Errorf("%w: flags %#x or reserved byte %#x", errMalformed, msg[2], msg[3])
	}
	r.code = binary.BigEndian.Uint32(msg[respOffCode:])
	s := uint64(binary.BigEndian.Uint32(msg[respOffMsgLen:]))
	d := uint64(binary.BigEndian.Uint32(msg[respOffDetailsLen:]))
	r.nHeader = int(binary.BigEndian.Uint16(msg[respOffHdrCount:]))
	r.nTrailer = int(binary.BigEndian.Uint16(msg[respOffTrlCount:]))
	lh := uint64(binary.BigEndian.Uint32(msg[respOffHdrLen:]))
	lt := uint64(binary.BigEndian.Uint32(msg[respOffTrlLen:]))
	rest := msg[respHeaderLen:]
	if s+d+lh+lt > uint64(len(rest)) {
		return r, fmt.Errorf("%w: section lengths %d+%d+%d+%d exceed the %d bytes after the header", errMalformed, s, d, lh, lt, len(rest))
	}
	r.message, rest = rest[:s], rest[s:]
	r.details, rest = rest[:d], rest[d:]
	r.header, rest = rest[:lh], rest[lh:]
	r.trailer, r.payload = rest[:lt], rest[lt:]
	if r.code == 0 && (s != 0 || d != 0) {
		return r, fmt.Errorf("%w: status OK with a message or details", errMalformed)
	}
	if r.code != 0 && len(r.payload) != 0 && !inStream {
		return r, fmt.Errorf("%w: status %d with a payload", errMalformed, r.code)
	}
	if err := checkMD(r.header, r.nHeader); err != nil {
		return r, fmt.Errorf("header %w", err)
	}
	if err := checkMD(r.trailer, r.nTrailer); err != nil {
		return r, fmt.Errorf("trailer %w", err)
	}
	return r, nil
}

// checkHead checks a frame's length, version and kind.
func checkHead(msg []byte, kind byte, headerLen int) error {
	if len(msg) < headerLen {
		return fmt.Errorf("%w: %d bytes, shorter than the %d-byte header", errMalformed, len(msg), headerLen)
	}
	if msg[0] != frameVersion {
		return fmt.Errorf("%w: version %d, want %d", errMalformed, msg[0], frameVersion)
	}
	if msg[1] != kind {
		return fmt.Errorf("%w: kind %d, want %d", errMalformed, msg[1], kind)
	}
	return nil
}

// appendMD appends md's entries and returns how many there are.
func appendMD(b []byte, md metadata.MD) ([]byte, int, error) {
	n := 0
	for k, vs := range md {
		if err := validPair(k, vs); err != nil {
			return b, 0, err
		}
		for _, v := range vs {
			if n == maxMDEntries {
				return b, 0, fmt.Errorf("homagrpc: more than %d metadata entries", maxMDEntries)
			}
			if uint64(len(v)) > math.MaxUint32 {
				return b, 0, fmt.Errorf("homagrpc: metadata value of %q too long", k)
			}
			b = appendEntry(b, k, v)
			n++
		}
	}
	return b, n, nil
}

// appendEntry appends one metadata entry, already validated.
func appendEntry(b []byte, k, v string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(k)))
	b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
	b = append(b, k...)
	return append(b, v...)
}

// shortField splits off a field of 1 to 255 bytes after its length byte,
// which valid must accept.
func shortField(rest []byte, what string, valid func([]byte) bool) (field, after []byte, err error) {
	if len(rest) < 1 || int(rest[0]) >= len(rest) {
		return nil, rest, fmt.Errorf("%w: no room for the %s", errMalformed, what)
	}
	end := 1 + int(rest[0]) // in int: a length byte of 255 must not wrap
	field, after = rest[1:end], rest[end:]
	if len(field) == 0 || !valid(field) {
		return nil, rest, fmt.Errorf("%w: %s %q", errMalformed, what, field)
	}
	return field, after, nil
}

// validAccept reports whether a is a comma-separated list of compressor
// names (possibly with spaces), as grpc-accept-encoding holds.
func validAccept[T text](a T) bool {
	for i := range len(a) {
		if c := a[i]; c != ',' && c != ' ' && !validCodecName(a[i:i+1]) {
			return false
		}
	}
	return true
}

// checkMD checks that sec holds exactly n valid entries. It does not
// allocate.
func checkMD(sec []byte, n int) error {
	if uint64(n)*(mdEntryHeader+1) > uint64(len(sec)) {
		return fmt.Errorf("%w: %d metadata entries cannot fit in %d bytes", errMalformed, n, len(sec))
	}
	for i := range n {
		k, v, rest, ok := nextEntry(sec)
		if !ok {
			return fmt.Errorf("%w: metadata entry %d overruns its section", errMalformed, i)
		}
		if err := validPairBytes(k, v); err != nil {
			return fmt.Errorf("%w: metadata entry %d: %v", errMalformed, i, err)
		}
		sec = rest
	}
	if len(sec) != 0 {
		return fmt.Errorf("%w: %d bytes after the last metadata entry", errMalformed, len(sec))
	}
	return nil
}

// nextEntry splits the first entry off a metadata section.
func nextEntry(sec []byte) (key, value, rest []byte, ok bool) {
	if len(sec) < mdEntryHeader {
		return nil, nil, nil, false
	}
	k := uint64(binary.BigEndian.Uint16(sec))
	v := uint64(binary.BigEndian.Uint32(sec[2:]))
	sec = sec[mdEntryHeader:]
	if k+v > uint64(len(sec)) {
		return nil, nil, nil, false
	}
	return sec[:k], sec[k : k+v], sec[k+v:], true
}

// parseMD builds the metadata of a section checked by checkMD.
func parseMD(sec []byte, n int) metadata.MD {
	md := make(metadata.MD, n)
	for range n {
		k, v, rest, _ := nextEntry(sec)
		key := string(k)
		md[key] = append(md[key], string(v))
		sec = rest
	}
	return md
}

// text is a string or the bytes of one, so that validating bytes from
// the network converts nothing.
type text interface{ ~string | ~[]byte }

// validPair applies gRPC's metadata rules: a key of one or more of
// [0-9a-z-_.], and printable ASCII values unless the key ends in "-bin".
func validPair(k string, vs []string) error {
	if err := validKey(k); err != nil {
		return err
	}
	if hasBinSuffix(k) {
		return nil
	}
	for _, v := range vs {
		if !printable(v) {
			return fmt.Errorf("homagrpc: metadata %q has a value with characters outside printable ASCII", k)
		}
	}
	return nil
}

func validPairBytes(k, v []byte) error {
	if err := validKey(k); err != nil {
		return err
	}
	if !hasBinSuffix(k) && !printable(v) {
		return fmt.Errorf("homagrpc: metadata %q has a value with characters outside printable ASCII", k)
	}
	return nil
}

func validKey[T text](k T) error {
	if len(k) == 0 || len(k) > maxKeyLen {
		return fmt.Errorf("homagrpc: metadata key of %d bytes", len(k))
	}
	for i := range len(k) {
		c := k[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("homagrpc: metadata key %q has characters outside [0-9a-z-_.]", k)
		}
	}
	return nil
}

func hasBinSuffix[T text](k T) bool {
	n := len(k)
	return n >= 4 && string(k[n-4:]) == "-bin"
}

func printable[T text](s T) bool {
	for i := range len(s) {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// validMethod reports whether m is "/service/method": printable ASCII
// without spaces, a slash first, another one later, neither part empty.
func validMethod[T text](m T) bool {
	n := len(m)
	if n < 4 || m[0] != '/' || m[n-1] == '/' {
		return false
	}
	last := 0
	for i := range n {
		c := m[i]
		if c <= 0x20 || c > 0x7e {
			return false
		}
		if c == '/' {
			last = i
		}
	}
	return last > 1
}

// validCodecName reports whether c may be a content subtype: lower-case
// letters, digits and "._+-", or empty for the default.
func validCodecName[T text](c T) bool {
	for i := range len(c) {
		b := c[i]
		if !('a' <= b && b <= 'z' || '0' <= b && b <= '9' || b == '.' || b == '_' || b == '+' || b == '-') {
			return false
		}
	}
	return true
}

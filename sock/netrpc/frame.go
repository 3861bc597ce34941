package netrpc

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Framing of one net/rpc call in one Homa RPC. The request message is
//
//	offset size field
//	0      1    version (1)
//	1      1    kind (1: request)
//	2      2    method length M, big endian, 1..65535
//	4      M    service method ("Service.Method")
//	4+M    ...  body: the argument, one self-contained gob stream
//
// and the response message is
//
//	offset size field
//	0      1    version (1)
//	1      1    kind (2: response)
//	2      2    method length M, big endian, 0..65535
//	4      4    error length E, big endian
//	8      M    service method, echoed
//	8+M    E    error string; empty when the call succeeded
//	8+M+E  ...  body: the reply, one self-contained gob stream (empty
//	            when the error is set)
//
// The sequence number of net/rpc never travels: the Homa RPC is the call.
const (
	frameVersion = 1

	kindRequest  = 1
	kindResponse = 2

	offVersion   = 0
	offKind      = 1
	offMethodLen = 2

	requestHeaderLen = 4

	offErrorLen       = 4
	responseHeaderLen = 8

	maxMethodLen = 1<<16 - 1
)

// errMalformed marks a message that is not a valid frame of this
// package: too short, another version or kind, or lengths that do not
// fit the message.
var errMalformed = errors.New("netrpc: malformed message")

// appendRequest appends the header of a request for method; the body
// follows it.
func appendRequest(b []byte, method string) ([]byte, error) {
	if len(method) == 0 || len(method) > maxMethodLen {
		return b, fmt.Errorf("netrpc: service method %q: length must be 1..%d", method, maxMethodLen)
	}
	b = append(b, frameVersion, kindRequest)
	b = binary.BigEndian.AppendUint16(b, uint16(len(method)))
	return append(b, method...), nil
}

// parseRequest splits a request message into its method and body. The
// results alias msg.
func parseRequest(msg []byte) (method, body []byte, err error) {
	if len(msg) < requestHeaderLen {
		return nil, nil, fmt.Errorf("%w: request of %d bytes is shorter than its %d-byte header", errMalformed, len(msg), requestHeaderLen)
	}
	if err := checkHead(msg, kindRequest); err != nil {
		return nil, nil, err
	}
	m := int(binary.BigEndian.Uint16(msg[offMethodLen:]))
	if m == 0 {
		return nil, nil, fmt.Errorf("%w: empty service method", errMalformed)
	}
	rest := msg[requestHeaderLen:]
	if m > len(rest) {
		return nil, nil, fmt.Errorf("%w: method length %d exceeds the %d bytes that follow the header", errMalformed, m, len(rest))
	}
	return rest[:m], rest[m:], nil
}

// appendResponse appends the header of a response; the body follows
// it. A method longer than a request may carry is cut, since it is only
// an echo.
func appendResponse(b []byte, method, errMsg string) []byte {
	if len(method) > maxMethodLen {
		method = method[:maxMethodLen]
	}
	b = append(b, frameVersion, kindResponse)
	b = binary.BigEndian.AppendUint16(b, uint16(len(method)))
	b = binary.BigEndian.AppendUint32(b, uint32(len(errMsg)))
	b = append(b, method...)
	return append(b, errMsg...)
}

// parseResponse splits a response message into its method, error string
// and body. The results alias msg.
func parseResponse(msg []byte) (method, errMsg, body []byte, err error) {
	if len(msg) < responseHeaderLen {
		return nil, nil, nil, fmt.Errorf("%w: response of %d bytes is shorter than its %d-byte header", errMalformed, len(msg), responseHeaderLen)
	}
	if err := checkHead(msg, kindResponse); err != nil {
		return nil, nil, nil, err
	}
	m := uint64(binary.BigEndian.Uint16(msg[offMethodLen:]))
	e := uint64(binary.BigEndian.Uint32(msg[offErrorLen:]))
	rest := msg[responseHeaderLen:]
	if m+e > uint64(len(rest)) {
		return nil, nil, nil, fmt.Errorf("%w: method and error lengths %d+%d exceed the %d bytes that follow the header", errMalformed, m, e, len(rest))
	}
	return rest[:m], rest[m : m+e], rest[m+e:], nil
}

// checkHead checks the version and kind bytes.
func checkHead(msg []byte, kind byte) error {
	if v := msg[offVersion]; v != frameVersion {
		return fmt.Errorf("%w: version %d, want %d", errMalformed, v, frameVersion)
	}
	if k := msg[offKind]; k != kind {
		return fmt.Errorf("%w: kind %d, want %d", errMalformed, k, kind)
	}
	return nil
}

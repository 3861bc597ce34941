package netrpc

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestRequestFrame(t *testing.T) {
	b, err := appendRequest(nil, "Arith.Multiply")
	if err != nil {
		t.Fatal(err)
	}
	want := append([]byte{1, 1, 0, 14}, "Arith.Multiply"...)
	if !bytes.Equal(b, want) {
		t.Fatalf("request header = %x, want %x", b, want)
	}
	msg := append(b, "body"...)
	method, body, err := parseRequest(msg)
	if err != nil || string(method) != "Arith.Multiply" || string(body) != "body" {
		t.Fatalf("parseRequest = %q, %q, %v", method, body, err)
	}
	// Every truncation into the method is an error; the body may be
	// any length, including none.
	for n := range len(b) {
		if _, _, err := parseRequest(msg[:n]); !errors.Is(err, errMalformed) {
			t.Errorf("request cut to %d bytes: %v, want errMalformed", n, err)
		}
	}
	if _, err := appendRequest(nil, ""); err == nil {
		t.Error("empty method accepted")
	}
	if _, err := appendRequest(nil, strings.Repeat("x", 1<<16)); err == nil {
		t.Error("method of 65,536 bytes accepted")
	}
}

func TestResponseFrame(t *testing.T) {
	b := appendResponse(nil, "A.B", "oops")
	want := append([]byte{1, 2, 0, 3, 0, 0, 0, 4}, "A.Boops"...)
	if !bytes.Equal(b, want) {
		t.Fatalf("response header = %x, want %x", b, want)
	}
	msg := append(b, "reply"...)
	method, e, body, err := parseResponse(msg)
	if err != nil || string(method) != "A.B" || string(e) != "oops" || string(body) != "reply" {
		t.Fatalf("parseResponse = %q, %q, %q, %v", method, e, body, err)
	}
	for n := range len(b) {
		if _, _, _, err := parseResponse(msg[:n]); !errors.Is(err, errMalformed) {
			t.Errorf("response cut to %d bytes: %v, want errMalformed", n, err)
		}
	}
	// An overlong method is cut to what the length field holds.
	long := strings.Repeat("m", 1<<16+5)
	method, _, _, err = parseResponse(appendResponse(nil, long, ""))
	if err != nil || len(method) != maxMethodLen {
		t.Fatalf("long method: %d bytes, %v", len(method), err)
	}
}

func TestFrameKinds(t *testing.T) {
	req, _ := appendRequest(nil, "A.B")
	resp := appendResponse(nil, "A.B", "")
	if _, _, _, err := parseResponse(append(req, 0, 0, 0, 0)); !errors.Is(err, errMalformed) {
		t.Errorf("request parsed as a response: %v", err)
	}
	if _, _, err := parseRequest(resp); !errors.Is(err, errMalformed) {
		t.Errorf("response parsed as a request: %v", err)
	}
	req[0] = 2
	if _, _, err := parseRequest(req); !errors.Is(err, errMalformed) {
		t.Errorf("version 2 accepted: %v", err)
	}
}

// FuzzParseRequest: parsing never panics, and what parses re-encodes to
// the same bytes.
func FuzzParseRequest(f *testing.F) {
	good, _ := appendRequest(nil, "Arith.Multiply")
	f.Add(append(good, 1, 2, 3))
	f.Add([]byte{1, 1, 0, 0})
	f.Add([]byte{1, 1, 0xff, 0xff, 'x'})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, msg []byte) {
		method, body, err := parseRequest(msg)
		if err != nil {
			if !errors.Is(err, errMalformed) {
				t.Fatalf("error %v is not errMalformed", err)
			}
			return
		}
		b, err := appendRequest(nil, string(method))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(append(b, body...), msg) {
			t.Fatalf("re-encoded %x, want %x", append(b, body...), msg)
		}
	})
}

// FuzzParseResponse: parsing never panics, and what parses re-encodes to
// the same bytes.
func FuzzParseResponse(f *testing.F) {
	f.Add(append(appendResponse(nil, "A.B", "err"), 9, 9))
	f.Add(appendResponse(nil, "", ""))
	f.Add([]byte{1, 2, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{1, 2, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, msg []byte) {
		method, e, body, err := parseResponse(msg)
		if err != nil {
			if !errors.Is(err, errMalformed) {
				t.Fatalf("error %v is not errMalformed", err)
			}
			return
		}
		b := append(appendResponse(nil, string(method), string(e)), body...)
		if !bytes.Equal(b, msg) {
			t.Fatalf("re-encoded %x, want %x", b, msg)
		}
	})
}

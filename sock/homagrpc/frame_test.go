package homagrpc

import (
	"bytes"
	"context"
	"errors"
	"math"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/homa-go/homa/internal/testkit/socktest"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/sock"
)

func TestRequestFrame(t *testing.T) {
	md := metadata.Pairs("k", "v")
	b, err := appendRequestHeader(nil, "json", "/s.S/M", 1500*time.Millisecond, md)
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{
		1, 1, 4, 0, // version, kind, codec length, flags
		0, 6, // method length
		0, 1, 0, 0, 0, 8, // one entry of 8 bytes
		0, 0, 0, 0, 0x59, 0x68, 0x2f, 0x00, // 1.5 s in ns
	}
	want = append(want, "json/s.S/M"...)
	want = append(want, 0, 1, 0, 0, 0, 1, 'k', 'v')
	if !bytes.Equal(b, want) {
		t.Fatalf("request header\n got %x\nwant %x", b, want)
	}
	msg := append(b, "payload"...)
	r, err := parseRequest(msg)
	if err != nil {
		t.Fatal(err)
	}
	if string(r.codec) != "json" || string(r.method) != "/s.S/M" || r.timeout != 1500*time.Millisecond ||
		string(r.payload) != "payload" || !reflect.DeepEqual(parseMD(r.md, r.mdCount), md) {
		t.Fatalf("parsed %+v", r)
	}
	for n := range len(b) {
		if _, err := parseRequest(msg[:n]); !errors.Is(err, errMalformed) {
			t.Errorf("request cut to %d bytes: %v, want errMalformed", n, err)
		}
	}
}

func TestResponseFrame(t *testing.T) {
	hdr := metadata.Pairs("h", "1")
	trl := metadata.Pairs("t-bin", "\x00\xff")
	b, err := appendResponseHeader(nil, 5, "gone", []byte{9}, hdr, trl)
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{
		1, 2, 0, 0, // version, kind, reserved
		0, 0, 0, 5, // code
		0, 0, 0, 4, // message length
		0, 0, 0, 1, // details length
		0, 1, 0, 1, // entry counts
		0, 0, 0, 8, // header length
		0, 0, 0, 13, // trailer length
	}
	want = append(want, "gone"...)
	want = append(want, 9)
	want = append(want, 0, 1, 0, 0, 0, 1, 'h', '1')
	want = append(want, 0, 5, 0, 0, 0, 2, 't', '-', 'b', 'i', 'n', 0, 0xff)
	if !bytes.Equal(b, want) {
		t.Fatalf("response header\n got %x\nwant %x", b, want)
	}
	r, err := parseResponse(b)
	if err != nil {
		t.Fatal(err)
	}
	if r.code != 5 || string(r.message) != "gone" || !bytes.Equal(r.details, []byte{9}) ||
		!reflect.DeepEqual(parseMD(r.header, r.nHeader), hdr) || !reflect.DeepEqual(parseMD(r.trailer, r.nTrailer), trl) {
		t.Fatalf("parsed %+v", r)
	}
	for n := range len(b) {
		if _, err := parseResponse(b[:n]); !errors.Is(err, errMalformed) {
			t.Errorf("response cut to %d bytes: %v, want errMalformed", n, err)
		}
	}
	ok, _ := appendResponseHeader(nil, 0, "", nil, nil, nil)
	if r, err := parseResponse(append(ok, "reply"...)); err != nil || string(r.payload) != "reply" {
		t.Errorf("OK response: %+v, %v", r, err)
	}
}

// Fields that break the rules are refused when building and parsing.
func TestFrameValidation(t *testing.T) {
	for _, tc := range []struct {
		codec, method string
		md            metadata.MD
	}{
		{"", "nope", nil},
		{"", "/onlyservice", nil},
		{"", "//m", nil},
		{"", "/s/", nil},
		{"", "/s s/m", nil},
		{"UPPER", "/s/m", nil},
		{"", "/s/m", metadata.MD{"Upper": {"v"}}},
		{"", "/s/m", metadata.MD{"k": {"new\nline"}}},
		{"", "/s/m", metadata.MD{"": {"v"}}},
		{"", "/s/" + strings.Repeat("m", math.MaxUint16), nil},
	} {
		if _, err := appendRequestHeader(nil, tc.codec, tc.method, 0, tc.md); err == nil {
			t.Errorf("appendRequestHeader(%q, %.20q, %v) accepted", tc.codec, tc.method, tc.md)
		}
	}
	if _, err := appendResponseHeader(nil, 2, "", nil, metadata.MD{"k!": {"v"}}, nil); err == nil {
		t.Error("appendResponseHeader accepted the header key k!")
	}

	good, _ := appendRequestHeader(nil, "", "/s/m", 0, metadata.Pairs("k", "v"))
	mutate := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	for name, bad := range map[string][]byte{
		"version":        mutate(func(b []byte) []byte { b[0] = 2; return b }),
		"kind":           mutate(func(b []byte) []byte { b[1] = 2; return b }),
		"flags":          mutate(func(b []byte) []byte { b[3] = 1; return b }),
		"timeout":        mutate(func(b []byte) []byte { b[12] = 0x80; return b }),
		"entry count":    mutate(func(b []byte) []byte { b[7] = 2; return b }),
		"no entries":     mutate(func(b []byte) []byte { b[7] = 0; return b }),
		"key character":  mutate(func(b []byte) []byte { b[len(b)-2] = 'K'; return b }),
		"value":          mutate(func(b []byte) []byte { b[len(b)-1] = 0; return b }),
		"method":         mutate(func(b []byte) []byte { b[20] = 'x'; return b }),
		"key length":     mutate(func(b []byte) []byte { b[len(b)-7] = 9; return b }),
		"metadata space": mutate(func(b []byte) []byte { b[11] = 9; return append(b, 0) }),
	} {
		if _, err := parseRequest(bad); !errors.Is(err, errMalformed) {
			t.Errorf("%s: %x parsed (%v)", name, bad, err)
		}
	}
	okResp, _ := appendResponseHeader(nil, 0, "", nil, nil, nil)
	if _, err := parseResponse(append(bytes.Clone(okResp[:4]), append([]byte{0, 0, 0, 0, 0, 0, 0, 1}, append(okResp[12:], 'x')...)...)); !errors.Is(err, errMalformed) {
		t.Errorf("OK status with details parsed: %v", err)
	}
	fail, _ := appendResponseHeader(nil, 3, "m", nil, nil, nil)
	if _, err := parseResponse(append(fail, 'p')); !errors.Is(err, errMalformed) {
		t.Errorf("error status with a payload parsed: %v", err)
	}
}

// FuzzParseRequest: parsing never panics; what parses is rebuilt from
// its fields into a frame that parses to the same fields.
func FuzzParseRequest(f *testing.F) {
	seed, _ := appendRequestHeader(nil, "proto", "/grpc.testing.TestService/UnaryCall", time.Second, metadata.Pairs("a", "b", "a", "c", "x-bin", "\x00"))
	f.Add(append(seed, 1, 2, 3))
	f.Add(seed[:reqHeaderLen])
	f.Add([]byte{1, 1, 0, 0, 0, 4, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, '/', 'a', '/', 'b'})
	ext, _ := appendRequestHead(nil, reqHead{comp: "gzip", compressed: true, callID: 9, method: "/a/b"})
	f.Add(append(ext, 7))
	acc, _ := appendRequestHead(nil, reqHead{comp: "gzip", accept: "gzip, zstd", method: "/a/b"})
	f.Add(append(acc, 7))
	long, _ := appendRequestHead(nil, reqHead{comp: strings.Repeat("z", maxCodecLen), method: "/a/b"})
	f.Add(long)
	f.Fuzz(func(t *testing.T, msg []byte) {
		r, err := parseRequest(msg)
		if err != nil {
			if !errors.Is(err, errMalformed) {
				t.Fatalf("error %v is not errMalformed", err)
			}
			return
		}
		md := parseMD(r.md, r.mdCount)
		b, err := appendRequestHead(nil, reqHead{codec: string(r.codec), comp: string(r.comp), accept: string(r.accept), compressed: r.flags&reqFlagCompressed != 0,
			callID: r.callID, method: string(r.method), timeout: r.timeout, md: md})
		if err != nil {
			t.Fatalf("fields of a parsed request do not rebuild: %v", err)
		}
		r2, err := parseRequest(append(b, r.payload...))
		if err != nil {
			t.Fatalf("rebuilt request does not parse: %v", err)
		}
		if !bytes.Equal(r2.codec, r.codec) || !bytes.Equal(r2.method, r.method) || r2.timeout != r.timeout ||
			!bytes.Equal(r2.comp, r.comp) || !bytes.Equal(r2.accept, r.accept) || r2.callID != r.callID || r2.flags != r.flags ||
			!bytes.Equal(r2.payload, r.payload) || !reflect.DeepEqual(parseMD(r2.md, r2.mdCount), md) {
			t.Fatalf("rebuilt %+v, want %+v", r2, r)
		}
	})
}

// FuzzParseResponse: parsing never panics; what parses rebuilds.
func FuzzParseResponse(f *testing.F) {
	seed, _ := appendResponseHeader(nil, 3, "bad argument", []byte{8, 3}, metadata.Pairs("h", "v"), metadata.Pairs("t-bin", "\xff"))
	f.Add(seed)
	ok, _ := appendResponseHeader(nil, 0, "", nil, nil, nil)
	f.Add(append(ok, "payload"...))
	f.Add(ok[:respHeaderLen-1])
	f.Fuzz(func(t *testing.T, msg []byte) {
		r, err := parseResponse(msg)
		if err != nil {
			if !errors.Is(err, errMalformed) {
				t.Fatalf("error %v is not errMalformed", err)
			}
			return
		}
		hdr, trl := parseMD(r.header, r.nHeader), parseMD(r.trailer, r.nTrailer)
		b, err := appendResponseHead(nil, r.flags, r.code, string(r.message), r.details, hdr, trl)
		if err != nil {
			t.Fatalf("fields of a parsed response do not rebuild: %v", err)
		}
		r2, err := parseResponse(append(b, r.payload...))
		if err != nil {
			t.Fatalf("rebuilt response does not parse: %v", err)
		}
		if r2.code != r.code || r2.flags != r.flags || !bytes.Equal(r2.message, r.message) || !bytes.Equal(r2.details, r.details) ||
			!bytes.Equal(r2.payload, r.payload) || !reflect.DeepEqual(parseMD(r2.header, r2.nHeader), hdr) ||
			!reflect.DeepEqual(parseMD(r2.trailer, r2.nTrailer), trl) {
			t.Fatalf("rebuilt %+v, want %+v", r2, r)
		}
	})
}

// A request that is not a frame is answered with codes.Internal and
// counted; the server goes on serving.
func TestMalformedRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := &sock.Config{PollDuration: -1}
		nw := memnet.New(memnet.Config{})
		defer nw.Close()
		addr := netip.MustParseAddrPort("10.0.0.1:4000")
		sc, err := socktest.OpenMem(nw, addr, cfg)
		if err != nil {
			t.Fatal(err)
		}
		srv := NewServer()
		served := make(chan error)
		go func() { served <- srv.Serve(sc) }()
		defer func() { srv.Stop(); <-served }()
		cc, err := socktest.OpenMem(nw, netip.AddrPortFrom(netip.MustParseAddr("10.0.0.2"), 0), cfg)
		if err != nil {
			t.Fatal(err)
		}
		raw := cc
		defer raw.Close()
		good, _ := appendRequestHeader(nil, "", "/s/m", 0, nil)
		junk := [][]byte{{1}, {1, 2, 3, 4, 5}, bytes.Repeat([]byte{0xff}, 40), good[:reqHeaderLen+2]}
		for _, j := range junk {
			m, err := raw.Call(context.Background(), addr, j)
			if err != nil {
				t.Fatal(err)
			}
			r, err := parseResponse(m.Data)
			if err != nil || codes.Code(r.code) != codes.Internal || !strings.Contains(string(r.message), "malformed") {
				t.Errorf("junk %x answered with %+v, %v", j, r, err)
			}
			m.Release()
		}
		if got := srv.Stats().Malformed; got != uint64(len(junk)) {
			t.Errorf("Stats().Malformed = %d, want %d", got, len(junk))
		}
		m, err := raw.Call(context.Background(), addr, good)
		if err != nil {
			t.Fatal(err)
		}
		if r, err := parseResponse(m.Data); err != nil || codes.Code(r.code) != codes.Unimplemented {
			t.Errorf("good request for an unknown method answered with %+v, %v", r, err)
		}
	})
}

// Status details that do not decode, or disagree with the status code,
// make the call's status Internal rather than what they claim.
func TestResponseStatusDetails(t *testing.T) {
	st, err := status.New(codes.NotFound, "gone").WithDetails(&spb.Status{Code: 1})
	if err != nil {
		t.Fatal(err)
	}
	good, _ := proto.Marshal(st.Proto())
	for _, tc := range []struct {
		code    uint32
		details []byte
		want    codes.Code
	}{
		{uint32(codes.NotFound), good, codes.NotFound},
		{uint32(codes.Aborted), good, codes.Internal},
		{uint32(codes.NotFound), []byte{0xff, 0xff, 0xff}, codes.Internal},
		{uint32(codes.NotFound), nil, codes.NotFound},
	} {
		got := responseStatus(response{code: tc.code, message: []byte("gone"), details: tc.details})
		if got.Code() != tc.want {
			t.Errorf("code %d with details %x: status %v, want code %v", tc.code, tc.details, got, tc.want)
		}
		if tc.want == codes.NotFound && tc.details != nil && len(got.Details()) != 1 {
			t.Errorf("details lost: %v", got.Details())
		}
	}
}

// The accepted compressors round-trip, and a list with characters no
// compressor name has is refused at both ends.
func TestRequestAccept(t *testing.T) {
	b, err := appendRequestHead(nil, reqHead{accept: "gzip, zstd", method: "/a/b"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := parseRequest(b)
	if err != nil || string(r.accept) != "gzip, zstd" {
		t.Fatalf("parsed %q, %v", r.accept, err)
	}
	if got := parseAccept(r.accept); !reflect.DeepEqual(got, []string{"gzip", "zstd"}) {
		t.Errorf("parseAccept = %q", got)
	}
	if _, err := appendRequestHead(nil, reqHead{accept: "gzip;q=1", method: "/a/b"}); err == nil {
		t.Error("appendRequestHead took an invalid list")
	}
	i := bytes.Index(b, []byte("gzip, zstd"))
	b[i+4] = ';'
	if _, err := parseRequest(b); !errors.Is(err, errMalformed) {
		t.Errorf("an invalid list parsed: %v", err)
	}
}

// Compressor names and accepted lists of the largest length, 255 bytes,
// round-trip: the length byte's end offset must not wrap (a peer's
// 255-byte field once crashed the parser).
func TestRequestLongestShortFields(t *testing.T) {
	name := strings.Repeat("z", maxCodecLen)
	for _, h := range []reqHead{
		{comp: name, method: "/a/b"},
		{accept: name, method: "/a/b"},
		{comp: name, accept: name, compressed: true, method: "/a/b"},
	} {
		b, err := appendRequestHead(nil, h)
		if err != nil {
			t.Fatal(err)
		}
		r, err := parseRequest(append(b, 1, 2))
		if err != nil {
			t.Fatalf("comp %d bytes, accept %d: %v", len(h.comp), len(h.accept), err)
		}
		if string(r.comp) != h.comp || string(r.accept) != h.accept || string(r.method) != h.method || !bytes.Equal(r.payload, []byte{1, 2}) {
			t.Errorf("parsed comp %d bytes, accept %d, method %q, payload %v", len(r.comp), len(r.accept), r.method, r.payload)
		}
		// Cut anywhere inside the fields: refused, never a panic.
		for n := reqHeaderLen; n < len(b)-len(h.method); n++ {
			if _, err := parseRequest(b[:n]); !errors.Is(err, errMalformed) {
				t.Fatalf("frame cut at %d of %d: %v", n, len(b), err)
			}
		}
	}
}

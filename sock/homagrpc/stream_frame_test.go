package homagrpc

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"
)

// A client frame has the layout of stream_frame.go, byte for byte, and
// parses back; every truncation of it either fails or drops whole
// chunks from the end.
func TestStreamReqFrame(t *testing.T) {
	b := appendStreamReqHeader(nil, opData, sreqFlagHalfClose, 0x0102030405060708, 0x1112131415161718)
	b = appendChunkHeader(b, chunkFlagLast, 3)
	b = append(b, "abc"...)
	b = appendChunkHeader(b, chunkFlagCompressed, 2)
	b = append(b, "de"...)
	want := []byte{1, 3, 2, 1, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18,
		1, 0, 0, 0, 0, 0, 0, 3, 'a', 'b', 'c', 2, 0, 0, 0, 0, 0, 0, 2, 'd', 'e'}
	if !bytes.Equal(b, want) {
		t.Fatalf("data frame\n%v, want\n%v", b, want)
	}
	r, err := parseStreamReq(b)
	if err != nil || r.op != opData || r.flags != sreqFlagHalfClose || r.id != 0x0102030405060708 || r.credit != 0x1112131415161718 {
		t.Fatalf("parse: %+v, %v", r, err)
	}
	f, d, rest := nextChunk(r.chunks)
	f2, d2, rest := nextChunk(rest)
	if f != chunkFlagLast || string(d) != "abc" || f2 != chunkFlagCompressed || string(d2) != "de" || len(rest) != 0 {
		t.Errorf("chunks %d %q %d %q %q", f, d, f2, d2, rest)
	}
	for n := range len(b) {
		r, err := parseStreamReq(b[:n])
		if err == nil && !bytes.HasPrefix(b[sreqHeaderLen:], r.chunks) {
			t.Errorf("truncated to %d bytes: parsed chunks %v", n, r.chunks)
		}
		if err != nil && !errors.Is(err, errMalformed) {
			t.Errorf("truncated to %d bytes: %v is not errMalformed", n, err)
		}
	}

	open, _ := appendRequestHead(appendStreamReqHeader(nil, opOpen, sreqFlagHalfClose|sreqFlagPull, 5, 6), reqHead{method: "/s/m", timeout: time.Second, md: metadata.Pairs("k", "v")})
	open = appendChunkHeader(open, chunkFlagLast, 0)
	r, err = parseStreamReq(open)
	if err != nil || string(r.open.method) != "/s/m" || r.open.timeout != time.Second || len(r.chunks) != chunkHeaderLen {
		t.Errorf("open frame: %+v, %v", r, err)
	}
	for _, bad := range [][]byte{
		appendStreamReqHeader(nil, 9, 0, 1, 1),                                      // unknown op
		appendStreamReqHeader(nil, opPull, sreqFlagHalfClose, 1, 1),                 // flag not for pulls
		append(appendStreamReqHeader(nil, opCancel, 0, 1, 1), 0),                    // bytes after a cancel
		appendStreamReqHeader(nil, opData, sreqFlagPull, 1, 1),                      // pull flag on data
		append(appendStreamReqHeader(nil, opData, 0, 1, 1), 4, 0, 0, 0, 0, 0, 0, 0), // unknown chunk flag
		append(appendStreamReqHeader(nil, opData, 0, 1, 1), 0, 0, 0, 0, 0, 0, 0, 9), // chunk overruns
	} {
		if _, err := parseStreamReq(bad); !errors.Is(err, errMalformed) {
			t.Errorf("%v parsed: %v", bad, err)
		}
	}
}

// A server response has the layout of stream_frame.go and parses back;
// a status or trailer without the end flag, or header metadata without
// the header flag, is refused.
func TestStreamRespFrame(t *testing.T) {
	b := appendStreamRespHeader(nil, srespFlagEnd|srespFlagHeader, 0x0a0b0c0d, 0x0102030405060708)
	b, _ = appendResponseHeader(b, 5, "gone", nil, metadata.Pairs("h", "1"), metadata.Pairs("t", "2"))
	b = appendChunkHeader(b, chunkFlagLast, 1)
	b = append(b, 'z')
	if want := []byte{1, 4, 3, 0, 0x0a, 0x0b, 0x0c, 0x0d, 1, 2, 3, 4, 5, 6, 7, 8}; !bytes.Equal(b[:srespHeaderLen], want) {
		t.Errorf("header %v, want %v", b[:srespHeaderLen], want)
	}
	r, err := parseStreamResp(b)
	if err != nil || r.flags != srespFlagEnd|srespFlagHeader || r.seq != 0x0a0b0c0d || r.credit != 0x0102030405060708 || r.resp.code != 5 || len(r.resp.payload) != chunkHeaderLen+1 {
		t.Fatalf("parse: %+v, %v", r, err)
	}
	noEnd := bytes.Clone(b)
	noEnd[srespOffFlags] = srespFlagHeader
	noHdr := bytes.Clone(b)
	noHdr[srespOffFlags] = srespFlagEnd
	for _, bad := range [][]byte{noEnd, noHdr, b[:srespHeaderLen+3]} {
		if _, err := parseStreamResp(bad); !errors.Is(err, errMalformed) {
			t.Errorf("%v parsed: %v", bad, err)
		}
	}
}

// FuzzParseStreamReq: parsing never panics, and the chunks of what
// parses add up to the frame.
func FuzzParseStreamReq(f *testing.F) {
	b := appendStreamReqHeader(nil, opData, 0, 1, 2)
	b = appendChunkHeader(b, chunkFlagLast, 1)
	f.Add(append(b, 'x'))
	o, _ := appendRequestHead(appendStreamReqHeader(nil, opOpen, 0, 1, 2), reqHead{method: "/a/b"})
	f.Add(o)
	f.Add(appendPullEntry(appendPullEntry(appendStreamReqHeader(nil, opPulls, 0, 5, 0), 7, 1<<20), 9, 0))
	f.Fuzz(func(t *testing.T, msg []byte) {
		r, err := parseStreamReq(msg)
		if err != nil {
			if !errors.Is(err, errMalformed) {
				t.Fatalf("error %v is not errMalformed", err)
			}
			return
		}
		if r.op == opPulls {
			again := appendStreamReqHeader(nil, opPulls, 0, r.id, 0)
			for i := range len(r.pulls) / pullEntryLen {
				id, credit := pullEntry(r.pulls, i)
				again = appendPullEntry(again, id, credit)
			}
			if !bytes.Equal(again, msg) || len(r.chunks) != 0 {
				t.Fatalf("pull set rebuilt as %x, want %x", again, msg)
			}
			return
		}
		n := 0
		for sec := r.chunks; len(sec) > 0; {
			_, d, rest := nextChunk(sec)
			n += chunkHeaderLen + len(d)
			sec = rest
		}
		if n != len(r.chunks) || binary.BigEndian.Uint64(msg[sreqOffID:]) != r.id {
			t.Fatalf("chunks of %d bytes in %d", n, len(r.chunks))
		}
	})
}

// FuzzParseStreamResp: parsing never panics, and what parses has a
// status only with the end flag and chunks that add up.
func FuzzParseStreamResp(f *testing.F) {
	b := appendStreamRespHeader(nil, srespFlagEnd|srespFlagHeader, 3, 9)
	b, _ = appendResponseHeader(b, 2, "x", nil, metadata.Pairs("h", "1"), metadata.Pairs("t", "2"))
	b = appendChunkHeader(b, chunkFlagLast, 1)
	f.Add(append(b, 'y'))
	f.Fuzz(func(t *testing.T, msg []byte) {
		r, err := parseStreamResp(msg)
		if err != nil {
			if !errors.Is(err, errMalformed) {
				t.Fatalf("error %v is not errMalformed", err)
			}
			return
		}
		if r.flags&srespFlagEnd == 0 && r.resp.code != 0 {
			t.Fatalf("status %d without the end flag", r.resp.code)
		}
		n := 0
		for sec := r.resp.payload; len(sec) > 0; {
			_, d, rest := nextChunk(sec)
			n += chunkHeaderLen + len(d)
			sec = rest
		}
		if n != len(r.resp.payload) {
			t.Fatalf("chunks of %d bytes in %d", n, len(r.resp.payload))
		}
	})
}

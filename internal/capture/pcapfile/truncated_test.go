package pcapfile

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"time"
)

// TestParseIPTruncated: a frame cut by the snapshot length inside the IP
// payload gives the captured part of the payload and the length the IP
// header claims; one cut inside the headers gives ErrTruncated. IPPayload
// refuses both.
func TestParseIPTruncated(t *testing.T) {
	payload := make([]byte, 100)
	for i := range payload {
		payload[i] = byte(i)
	}
	v4 := ether(0x0800, nil, ipv4Packet(0xe0, 146, "10.146.12.2", "10.146.12.1", payload))
	v4opts := ipv4Packet(0, 146, "10.146.12.2", "10.146.12.1", append(make([]byte, 8), payload...))
	v4opts[0] = 0x47 // 28-byte header: 8 bytes of options
	// Destination options (8 bytes), then Homa.
	ext := append(unhex(t, "9200 000000000000"), payload...)
	v6ext := ipv6Packet(0x20, 60, "fd00::2", "fd00::1", ext)

	cut := []struct {
		name     string
		link     LinkType
		frame    []byte
		captured int // bytes of the frame kept
		payload  int // bytes of the payload in them
	}{
		{"ethernet ipv4, 1 byte of payload", LinkEthernet, v4, 14 + 20 + 1, 1},
		{"ethernet ipv4, half the payload", LinkEthernet, v4, 14 + 20 + 50, 50},
		{"ethernet ipv4, all but 1 byte", LinkEthernet, v4, len(v4) - 1, 99},
		{"ethernet ipv4, no payload", LinkEthernet, v4, 14 + 20, 0},
		{"ipv4 options", LinkIPv4, v4opts, 28 + 30, 30},
		{"ipv6 extension header", LinkIPv6, v6ext, 40 + 8 + 30, 30},
	}
	for _, tc := range cut {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ParseIP(tc.frame[:tc.captured], tc.link)
			if err != nil {
				t.Fatal(err)
			}
			if p.Proto != 146 || !p.Truncated() || p.PayloadLen != len(payload) || !bytes.Equal(p.Payload, payload[:tc.payload]) {
				t.Errorf("proto %d, truncated %v, payload %d of %d bytes (%x); want 146, true, %d of %d",
					p.Proto, p.Truncated(), len(p.Payload), p.PayloadLen, p.Payload, tc.payload, len(payload))
			}
			if _, _, _, _, _, err := IPPayload(tc.frame[:tc.captured], tc.link); !errors.Is(err, ErrTruncated) {
				t.Errorf("IPPayload: %v, want ErrTruncated", err)
			}
			whole, err := ParseIP(tc.frame, tc.link)
			if err != nil || whole.Truncated() || !bytes.Equal(whole.Payload, payload) || whole.PayloadLen != len(payload) {
				t.Errorf("whole frame: %d of %d bytes, truncated %v, %v", len(whole.Payload), whole.PayloadLen, whole.Truncated(), err)
			}
		})
	}

	headers := []struct {
		name     string
		link     LinkType
		frame    []byte
		captured int
	}{
		{"ethernet header", LinkEthernet, v4, 13},
		{"ipv4 header", LinkEthernet, v4, 14 + 19},
		{"ipv4 options", LinkIPv4, v4opts, 27},
		{"ipv6 header", LinkIPv6, v6ext, 39},
		{"ipv6 extension header", LinkIPv6, v6ext, 40 + 7},
	}
	for _, tc := range headers {
		if _, err := ParseIP(tc.frame[:tc.captured], tc.link); !errors.Is(err, ErrTruncated) {
			t.Errorf("cut in the %s: %v, want ErrTruncated", tc.name, err)
		}
	}
}

// TestWriteRecordOrigLen: a record written with an original length longer
// than its frame reads back cut; one without reads back whole.
func TestWriteRecordOrigLen(t *testing.T) {
	frame := ether(0x0800, nil, ipv4Packet(0, 146, "10.0.0.1", "10.0.0.2", make([]byte, 1000)))
	at := time.Date(2025, 11, 22, 4, 35, 0, 0, time.UTC)
	recs := []Record{
		{Time: at, Frame: frame[:96], OrigLen: len(frame)},
		{Time: at, Frame: frame},
		{Time: at, Frame: frame[:50], OrigLen: 10}, // less than the frame: whole
	}
	var buf bytes.Buffer
	w, err := NewWriter(&buf, LinkEthernet)
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range recs {
		if err := w.WriteRecord(rec); err != nil {
			t.Fatal(err)
		}
	}
	r, err := NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []int{len(frame), len(frame), 50} {
		rec, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(rec.Frame, recs[i].Frame) || rec.OrigLen != want {
			t.Errorf("record %d: %d bytes of %d, want %d of %d", i, len(rec.Frame), rec.OrigLen, len(recs[i].Frame), want)
		}
	}
	if _, err := r.Next(); err != io.EOF {
		t.Errorf("after the last record: %v", err)
	}
}

package erpc

import (
	"bytes"
	"encoding/hex"
	"errors"
	"testing"
)

// validHeaders are headers of every kind, as the layer sends them.
var validHeaders = []header{
	{kind: kindRequest, reqType: 7, session: 3, token: 9},
	{kind: kindRequest, reqType: 1, flags: flagExactlyOnce, retry: 2, session: 1, token: 2,
		clientID: 0x1122334455667788, seq: 42, ackFloor: 40},
	{kind: kindRequest, reqType: 1, flags: flagExactlyOnce | flagAck, session: 1, token: 2,
		clientID: 5, seq: 42, ackFloor: 40, ackSeq: 41, ackRetries: 3},
	{kind: kindResponse, reqType: 7},
	{kind: kindResponse, reqType: 7, status: statusNoSuchType},
	{kind: kindResponse, reqType: 1, flags: flagExactlyOnce, clientID: 5, seq: 42, status: statusInProgress},
	{kind: kindConnect, session: 4, token: 1},
	{kind: kindConnectReply, session: 4, token: 17},
	{kind: kindDisconnect, session: 4, token: 17},
	{kind: kindDisconnectReply, status: statusNoSession},
	{kind: kindAck, flags: flagExactlyOnce | flagAck, session: 1, token: 2, clientID: 5, ackFloor: 9, ackSeq: 12},
	{kind: kindAck, flags: flagExactlyOnce, session: 1, token: 2, clientID: 5, ackFloor: 9},
	{kind: kindAckReply},
	{kind: kindHeartbeat},
	{kind: kindHeartbeatReply},
	{kind: kindRequest, reqType: 3, flags: flagFragment, session: 1, token: 2, msgID: 7, fragOff: 0, total: 2_000_000},
	{kind: kindResponse, reqType: 3, flags: flagFragment, msgID: 7, fragOff: fragChunk, total: 2_000_000},
	{kind: kindPull, flags: flagFragment, session: 1, token: 2, msgID: 9, fragOff: fragChunk},
	{kind: kindRequest, reqType: 3, flags: flagFragment | flagExactlyOnce | flagAck, retry: 1, session: 1, token: 2,
		clientID: 5, seq: 42, ackFloor: 40, ackSeq: 41, ackRetries: 3, fragOff: 2 * fragChunk, total: 8 << 20},
	{kind: kindResponse, reqType: 3, flags: flagFragment | flagExactlyOnce, clientID: 5, seq: 42, fragOff: fragChunk, total: 8 << 20},
	{kind: kindPull, flags: flagFragment | flagExactlyOnce, session: 1, token: 2, clientID: 5, seq: 42, fragOff: 7 * fragChunk},
}

// TestHeaderBytes pins the layout: named offsets, big-endian.
func TestHeaderBytes(t *testing.T) {
	h := header{kind: kindRequest, reqType: 0xAB, flags: flagExactlyOnce | flagAck, retry: 0x0102,
		session: 0x03040506, token: 0x0708090A, clientID: 0x1112131415161718, seq: 0x2122232425262728,
		ackFloor: 0x2122232425262720, ackSeq: 0x4142434445464748, ackRetries: 0x5152}
	want := "e5" + "03" + "01" + "ab" + "03" + "00" + "0102" + "03040506" + "0708090a" +
		"1112131415161718" + "2122232425262728" + "2122232425262720" + "4142434445464748" + "5152" + "000000000000"
	b := h.Append(nil)
	if got := hex.EncodeToString(b); got != want {
		t.Fatalf("encoded\n%s\nwant\n%s", got, want)
	}
	if len(b) != h.Len() || h.Len() != eoHeaderLen {
		t.Fatalf("length %d, Len %d", len(b), h.Len())
	}
	f := header{kind: kindRequest, reqType: 1, flags: flagFragment, session: 2, token: 3, msgID: 0x0A0B0C0D, fragOff: 0x000F4240, total: 0x00800000}
	if got := hex.EncodeToString(f.Append(nil)); got != "e5030101040000000000000200000003"+"0a0b0c0d"+"000f4240"+"00800000"+"00000000" {
		t.Fatalf("fragment header %s", got)
	}
	// An exactly-once fragment: the index and total in the extension's
	// last six bytes.
	ef := header{kind: kindRequest, reqType: 1, flags: flagExactlyOnce | flagFragment, session: 2, token: 3,
		clientID: 9, seq: 8, ackFloor: 7, fragOff: 0x0102 * fragChunk, total: 0x00800000}
	if got := hex.EncodeToString(ef.Append(nil)); got != "e5030101050000000000000200000003"+"0000000000000009"+"0000000000000008"+
		"0000000000000007"+"0000000000000000"+"0000"+"0102"+"00800000" {
		t.Fatalf("exactly-once fragment header %s", got)
	}
	base := header{kind: kindResponse, status: statusStale, session: 1, token: 2}
	if got := hex.EncodeToString(base.Append(nil)); got != "e5030200000700000000000100000002" {
		t.Fatalf("base header %s", got)
	}
}

// TestHeaderRoundTrip: every valid header parses back to itself, with
// trailing payload left alone, and every truncation is an error.
func TestHeaderRoundTrip(t *testing.T) {
	for i, h := range validHeaders {
		b := h.Append([]byte{})
		if len(b) != h.Len() {
			t.Fatalf("header %d: %d bytes, Len %d", i, len(b), h.Len())
		}
		var p header
		payload := "payload"
		if h.kind == kindPull {
			payload = "" // a pull carries no data
		}
		n, err := p.Parse(append(b, payload...))
		if err != nil || n != len(b) || p != h {
			t.Fatalf("header %d: parsed %+v (%d bytes, %v), want %+v", i, p, n, err, h)
		}
		for k := range len(b) {
			var q header
			if _, err := q.Parse(b[:k]); !errors.Is(err, ErrProtocol) {
				t.Fatalf("header %d truncated to %d bytes: %v", i, k, err)
			}
			if q != (header{}) {
				t.Fatalf("header %d: a failed parse changed the header", i)
			}
		}
	}
}

// TestHeaderRejects: each rule of Parse, broken once.
func TestHeaderRejects(t *testing.T) {
	eo := header{kind: kindRequest, flags: flagExactlyOnce, clientID: 5, seq: 10, ackFloor: 3}
	for _, tc := range []struct {
		name string
		b    []byte
		want *ProtocolError
	}{
		{"magic", patch(validHeaders[0], 0, 0x00), errMagic},
		{"version 1", patch(validHeaders[0], 1, 1), errVersion},
		{"version 2", patch(validHeaders[0], 1, 2), errVersion},
		{"version 4", patch(validHeaders[0], 1, 4), errVersion},
		{"kind 0", patch(validHeaders[0], 2, 0), errKind},
		{"kind 12", patch(validHeaders[0], 2, 12), errKind},
		{"type on connect", patch(header{kind: kindConnect}, 3, 1), errReqType},
		{"unknown flag", patch(validHeaders[0], 4, 0x80), errFlags},
		{"ack without eo", patch(validHeaders[0], 4, flagAck), errFlags},
		{"eo on connect", patch(header{kind: kindConnect}, 4, flagExactlyOnce), errFlags},
		{"ack kind without eo", (&header{kind: kindAck}).Append(nil), errFlags},
		{"status on request", patch(validHeaders[0], 5, 1), errStatus},
		{"unknown status", patch(header{kind: kindResponse}, 5, 99), errStatus},
		{"retry without eo", patch(validHeaders[0], 7, 1), errRetry},
		{"reserved", patch(eo, 55, 1), errReserved},
		{"client id 0", (&header{kind: kindRequest, flags: flagExactlyOnce, seq: 1}).Append(nil), errClientID},
		{"seq 0", (&header{kind: kindRequest, flags: flagExactlyOnce, clientID: 1}).Append(nil), errSeq},
		{"seq on ack", (&header{kind: kindAck, flags: flagExactlyOnce, clientID: 1, seq: 1}).Append(nil), errSeq},
		{"floor past seq", (&header{kind: kindRequest, flags: flagExactlyOnce, clientID: 1, seq: 4, ackFloor: 5}).Append(nil), errFloor},
		{"ack fields without flag", (&header{kind: kindRequest, flags: flagExactlyOnce, clientID: 1, seq: 4, ackSeq: 2}).Append(nil), errAck},
		{"ack flag without seq", (&header{kind: kindRequest, flags: flagExactlyOnce | flagAck, clientID: 1, seq: 4}).Append(nil), errAck},
		{"exactly-once index past total", (&header{kind: kindRequest, flags: flagFragment | flagExactlyOnce, clientID: 1, seq: 1, fragOff: 2 * fragChunk, total: 2 * fragChunk}).Append(nil), errFragment},
		{"exactly-once index beyond 32 bits", patch(header{kind: kindRequest, flags: flagFragment | flagExactlyOnce, clientID: 1, seq: 1, total: 10}, offEOFragIdx, 0xFF), errFragment},
		{"exactly-once data past total", append((&header{kind: kindRequest, flags: flagFragment | flagExactlyOnce, clientID: 1, seq: 1, total: 2}).Append(nil), 1, 2, 3), errFragment},
		{"exactly-once index without fragment", patch(eo, offEOFragIdx+1, 1), errReserved},
		{"exactly-once total without fragment", patch(eo, offEOFragTot+3, 1), errReserved},
		{"pull with data", append((&header{kind: kindPull, flags: flagFragment, fragOff: 5}).Append(nil), 1), errFragment},
		{"exactly-once pull with a floor", (&header{kind: kindPull, flags: flagFragment | flagExactlyOnce, clientID: 1, seq: 4, ackFloor: 1}).Append(nil), errAck},
		{"exactly-once pull with a retry", (&header{kind: kindPull, flags: flagFragment | flagExactlyOnce, retry: 1, clientID: 1, seq: 4}).Append(nil), errRetry},
		{"exactly-once pull without sequence", (&header{kind: kindPull, flags: flagFragment | flagExactlyOnce, clientID: 1}).Append(nil), errSeq},
		{"pull without fragment", (&header{kind: kindPull}).Append(nil), errFlags},
		{"pull with a total", (&header{kind: kindPull, flags: flagFragment, total: 5}).Append(nil), errFragment},
		{"fragment offset past total", (&header{kind: kindRequest, flags: flagFragment, fragOff: 10, total: 10}).Append(nil), errFragment},
		{"fragment data past total", append((&header{kind: kindRequest, flags: flagFragment, fragOff: 8, total: 10}).Append(nil), 1, 2, 3), errFragment},
		{"fragment reserved", patch(header{kind: kindRequest, flags: flagFragment, total: 10}, 31, 1), errReserved},
		{"ack fields on response", (&header{kind: kindResponse, flags: flagExactlyOnce, clientID: 1, seq: 4, ackFloor: 1}).Append(nil), errAck},
	} {
		var h header
		if _, err := h.Parse(tc.b); err != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}

func patch(h header, off int, v byte) []byte {
	b := h.Append(nil)
	b[off] = v
	return b
}

// TestBodies: the control bodies round-trip, and refuse a wrong length,
// reserved bytes and out-of-range fields.
func TestBodies(t *testing.T) {
	base := (&header{kind: kindConnect}).Append(nil)
	c := connectBody{dstRpc: 3, srcRpc: 4, fresh: true, clientID: 99}
	b := c.Append(bytes.Clone(base))
	var pc connectBody
	if n, err := pc.Parse(b); err != nil || pc != c || n != c.Len() || len(b) != connectLen {
		t.Fatalf("connect: %+v %d %v", pc, n, err)
	}
	if _, err := pc.Parse(b[:len(b)-1]); err != errLength {
		t.Fatalf("short connect: %v", err)
	}
	b[offConnReserved] = 1
	if _, err := pc.Parse(b); err != errReserved {
		t.Fatalf("connect reserved: %v", err)
	}
	b[offConnReserved] = 0
	b[offConnFlags] = 2
	if _, err := pc.Parse(b); err != errReserved {
		t.Fatalf("connect unknown flag: %v", err)
	}
	if _, err := pc.Parse((&connectBody{dstRpc: 1}).Append(bytes.Clone(base))); err != errClientID {
		t.Fatalf("connect client id 0: %v", err)
	}

	r := connectReplyBody{port: 4000, leaseMs: 4000}
	b = r.Append((&header{kind: kindConnectReply}).Append(nil))
	var pr connectReplyBody
	if n, err := pr.Parse(b); err != nil || pr != r || n != r.Len() {
		t.Fatalf("connect reply: %+v %d %v", pr, n, err)
	}
	for _, port := range []uint16{0, 40000} {
		b := (&connectReplyBody{port: port, leaseMs: 1}).Append((&header{kind: kindConnectReply}).Append(nil))
		if _, err := pr.Parse(b); err != errPort {
			t.Fatalf("connect reply port %d: %v", port, err)
		}
	}

	if _, err := pr.Parse((&connectReplyBody{port: 4000}).Append((&header{kind: kindConnectReply}).Append(nil))); err != errLease {
		t.Fatalf("connect reply lease 0: %v", err)
	}

	hb := heartbeatBody{ids: []uint64{1, 0x0102030405060708}}
	b = hb.Append((&header{kind: kindHeartbeat}).Append(nil))
	if got := hex.EncodeToString(b[baseHeaderLen:]); got != "00020000"+"0000000000000001"+"0102030405060708" {
		t.Fatalf("heartbeat body %s", got)
	}
	var phb heartbeatBody
	if n, err := phb.Parse(b); err != nil || len(phb.ids) != 2 || phb.ids[1] != hb.ids[1] || n != len(b)-baseHeaderLen {
		t.Fatalf("heartbeat: %+v %d %v", phb, n, err)
	}
	for i := baseHeaderLen; i < len(b); i++ {
		if _, err := phb.Parse(b[:i]); err == nil {
			t.Fatalf("heartbeat cut to %d bytes parsed", i)
		}
	}
	huge := bytes.Clone(b)
	huge[offHbCount], huge[offHbCount+1] = 0xFF, 0xFF // claims 65535 ids
	if _, err := phb.Parse(huge); err != errCount {
		t.Fatalf("heartbeat claiming 65535 ids: %v", err)
	}
	if _, err := phb.Parse((&heartbeatBody{ids: []uint64{0}}).Append((&header{kind: kindHeartbeat}).Append(nil))); err != errClientID {
		t.Fatalf("heartbeat of id 0: %v", err)
	}
	hr := heartbeatReplyBody{unknown: []bool{false, true}}
	b = hr.Append((&header{kind: kindHeartbeatReply}).Append(nil))
	var phr heartbeatReplyBody
	if _, err := phr.Parse(b); err != nil || len(phr.unknown) != 2 || phr.unknown[0] || !phr.unknown[1] {
		t.Fatalf("heartbeat reply: %+v %v", phr, err)
	}
	b[len(b)-1] = 2
	if _, err := phr.Parse(b); err != errReserved {
		t.Fatalf("heartbeat reply entry 2: %v", err)
	}

	d := disconnectBody{dstRpc: 200}
	b = d.Append((&header{kind: kindDisconnect}).Append(nil))
	var pd disconnectBody
	if n, err := pd.Parse(b); err != nil || pd != d || n != d.Len() {
		t.Fatalf("disconnect: %+v %d %v", pd, n, err)
	}
	b[disconnectLen-1] = 1
	if _, err := pd.Parse(b); err != errReserved {
		t.Fatalf("disconnect reserved: %v", err)
	}
}

// FuzzParse: Parse never panics on any bytes, and whatever it accepts
// encodes back to the same bytes. The seeds (every valid header, and some
// broken ones) run as a test.
func FuzzParse(f *testing.F) {
	for _, h := range validHeaders {
		f.Add(h.Append(nil))
		f.Add(append(h.Append(nil), 1, 2, 3))
	}
	f.Add([]byte{})
	f.Add([]byte{hdrMagic, hdrVersion, byte(kindRequest)})
	f.Add((&connectBody{dstRpc: 1, clientID: 7}).Append((&header{kind: kindConnect}).Append(nil)))
	f.Add((&heartbeatBody{ids: []uint64{3, 5}}).Append((&header{kind: kindHeartbeat}).Append(nil)))
	f.Add((&heartbeatReplyBody{unknown: []bool{true}}).Append((&header{kind: kindHeartbeatReply}).Append(nil)))
	f.Fuzz(func(t *testing.T, b []byte) {
		var h header
		n, err := h.Parse(b)
		if err != nil {
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("error %v does not match ErrProtocol", err)
			}
			return
		}
		if n != h.Len() || n > len(b) {
			t.Fatalf("consumed %d of %d bytes, Len %d", n, len(b), h.Len())
		}
		if got := h.Append(nil); !bytes.Equal(got, b[:n]) {
			t.Fatalf("re-encoded %x, parsed from %x", got, b[:n])
		}
		var c connectBody
		var r connectReplyBody
		var d disconnectBody
		_, _ = c.Parse(b)
		_, _ = r.Parse(b)
		_, _ = d.Parse(b)
		var hb heartbeatBody
		if _, err := hb.Parse(b); err == nil {
			if got := hb.Append(append([]byte(nil), b[:baseHeaderLen]...)); !bytes.Equal(got, b) {
				t.Fatalf("heartbeat re-encoded %x, parsed from %x", got, b)
			}
		}
		var hr heartbeatReplyBody
		_, _ = hr.Parse(b)
	})
}

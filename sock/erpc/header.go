package erpc

import "encoding/binary"

// The erpc header opens every Homa message the layer sends. It is a wire
// format of its own, big-endian, with a fixed base and one fixed
// extension:
//
//	offset size field
//	 0      1   magic (0xE5)
//	 1      1   version (3)
//	 2      1   kind (request, response, connect, ...)
//	 3      1   request type (requests and their responses; else 0)
//	 4      1   flags (exactly-once, carries an acknowledgment)
//	 5      1   status (replies only; 0 in requests)
//	 6      2   retry (exactly-once: which attempt this is, 0 first; 0 in pulls)
//	 8      4   session number (the receiver's)
//	12      4   session token (the receiver's)
//	--- exactly-once extension, present when flagExactlyOnce is set ---
//	16      8   client id
//	24      8   sequence number
//	32      8   ack floor (every sequence below it is acknowledged)
//	40      8   acknowledged sequence (with flagAck)
//	48      2   retries of the acknowledged sequence (with flagAck)
//	50      2   with flagFragment: the fragment's index (its data starts at
//	            index x fragChunk); else zero
//	52      4   with flagFragment: total length of the message (0 in a
//	            pull); else zero
//	--- fragment extension, present when flagFragment is set without
//	    flagExactlyOnce ---
//	16      4   message id (a request's: the client's; a response's: the server's)
//	20      4   offset of this fragment's data in the message
//	24      4   total length of the message
//	28      4   reserved, zero
//
// A fragment of an exactly-once message (request, response, pull) is
// named by the exactly-once identity (client id, sequence) instead of a
// message id, so it carries the exactly-once extension with the index and
// total in what is otherwise reserved: the header stays 56 bytes.
//
// An exactly-once pull of index 0 is a resume query (a response's first
// fragment is never pulled: it comes with the reply): it asks how much of
// the request of (client id, sequence) the server holds. The answer is a
// response with flagFragment whose index is the first fragment the server
// misses (it holds all before it) and whose total is the request's, or
// both zero when it holds nothing. A server of version 3 answers it
// stale, so it needed no new version (see package doc).
//
// Control messages carry a fixed body after the base header (see
// connectBody, connectReplyBody and disconnectBody). A request or a
// response carries the application's bytes after its header.
const (
	hdrMagic = 0xE5
	// hdrVersion 2: connects carry a lease (fresh flag, the lease's
	// duration in the reply), heartbeats, statusLeaseExpired.
	// hdrVersion 3: fragments of exactly-once messages (the fragment
	// index and total in the exactly-once extension), exactly-once
	// pulls, fragments of MaxMsgSize bytes.
	hdrVersion = 3

	offMagic   = 0
	offVersion = 1
	offKind    = 2
	offReqType = 3
	offFlags   = 4
	offStatus  = 5
	offRetry   = 6
	offSession = 8
	offToken   = 12
	// baseHeaderLen is the length of the header without the extension.
	baseHeaderLen = 16

	offClientID   = 16
	offSeq        = 24
	offAckFloor   = 32
	offAckSeq     = 40
	offAckRetries = 48
	offReserved   = 50 // without flagFragment
	offEOFragIdx  = 50 // with flagFragment
	offEOFragTot  = 52
	// eoHeaderLen is the length of the header with the exactly-once
	// extension.
	eoHeaderLen = 56

	offFragID       = 16
	offFragOffset   = 20
	offFragTotal    = 24
	offFragReserved = 28
	// fragHeaderLen is the length of the header with the fragment
	// extension.
	fragHeaderLen = 32

	// maxHeaderLen is the longest header: every MsgBuffer keeps this much
	// room in front of its data, so a header is written in place and
	// header and data go to the transport as one slice.
	maxHeaderLen = eoHeaderLen
)

// kind says what a message is.
type kind uint8

const (
	kindRequest         kind = 1 // client Rpc -> server Rpc: a request
	kindResponse        kind = 2 // its response, or an error status
	kindConnect         kind = 3 // client Rpc -> server Nexus: open a session
	kindConnectReply    kind = 4
	kindDisconnect      kind = 5 // client Rpc -> server Nexus: close a session
	kindDisconnectReply kind = 6
	kindAck             kind = 7 // client Rpc -> server Rpc: exactly-once acknowledgments alone
	kindAckReply        kind = 8
	kindHeartbeat       kind = 9 // client Nexus -> server Nexus: these leases are alive
	kindHeartbeatReply  kind = 10
	kindPull            kind = 11 // client Rpc -> server Rpc: the next fragment of a large response
	kindMax                  = kindPull
)

func (k kind) isReply() bool { return k%2 == 0 && k <= kindHeartbeatReply }

// Flags.
const (
	// flagExactlyOnce: the extension follows the base header.
	flagExactlyOnce = 1 << 0
	// flagAck: the extension's acknowledged sequence and retries are set.
	flagAck = 1 << 1
	// flagFragment: the fragment extension follows the base header; the
	// message is part of one larger than a Homa message.
	flagFragment = 1 << 2
)

// status is a reply's outcome. Requests carry statusOK.
type status uint8

const (
	statusOK              status = 0
	statusNoSuchType      status = 1  // no handler for the request type
	statusNoSession       status = 2  // the server has no such session
	statusNoSuchRpc       status = 3  // no Rpc with that id at the Nexus
	statusTooManySessions status = 4  // the server Rpc's session table is full
	statusRecordsFull     status = 5  // no room for another completion record
	statusServerBusy      status = 6  // the background queue is full
	statusStale           status = 7  // exactly-once: a sequence already acknowledged and forgotten
	statusInProgress      status = 8  // exactly-once: superseded by a newer attempt still in progress
	statusTooLarge        status = 9  // the handler's response exceeded the limit for a record
	statusBadRequest      status = 10 // the request did not parse
	statusLeaseExpired    status = 11 // the client's lease is unknown: expired, or the server restarted
	statusResponseLost    status = 12 // exactly-once: it ran, but the record could not keep the response
	statusMax                    = statusResponseLost
)

// header is the decoded erpc header.
type header struct {
	kind    kind
	reqType uint8
	flags   uint8
	status  status
	retry   uint16
	session uint32
	token   uint32

	// The extension (flagExactlyOnce).
	clientID   uint64
	seq        uint64
	ackFloor   uint64
	ackSeq     uint64 // with flagAck
	ackRetries uint16 // with flagAck

	// The fragment extension (flagFragment).
	msgID, fragOff, total uint32
}

// Len is the encoded length of h.
func (h *header) Len() int {
	switch {
	case h.flags&flagExactlyOnce != 0:
		return eoHeaderLen
	case h.flags&flagFragment != 0:
		return fragHeaderLen
	}
	return baseHeaderLen
}

// put encodes h into b, which holds at least h.Len() bytes.
func (h *header) put(b []byte) {
	b[offMagic] = hdrMagic
	b[offVersion] = hdrVersion
	b[offKind] = byte(h.kind)
	b[offReqType] = h.reqType
	b[offFlags] = h.flags
	b[offStatus] = byte(h.status)
	binary.BigEndian.PutUint16(b[offRetry:], h.retry)
	binary.BigEndian.PutUint32(b[offSession:], h.session)
	binary.BigEndian.PutUint32(b[offToken:], h.token)
	if h.flags&flagFragment != 0 && h.flags&flagExactlyOnce == 0 {
		binary.BigEndian.PutUint32(b[offFragID:], h.msgID)
		binary.BigEndian.PutUint32(b[offFragOffset:], h.fragOff)
		binary.BigEndian.PutUint32(b[offFragTotal:], h.total)
		clear(b[offFragReserved:fragHeaderLen])
		return
	}
	if h.flags&flagExactlyOnce == 0 {
		return
	}
	binary.BigEndian.PutUint64(b[offClientID:], h.clientID)
	binary.BigEndian.PutUint64(b[offSeq:], h.seq)
	binary.BigEndian.PutUint64(b[offAckFloor:], h.ackFloor)
	binary.BigEndian.PutUint64(b[offAckSeq:], h.ackSeq)
	binary.BigEndian.PutUint16(b[offAckRetries:], h.ackRetries)
	if h.flags&flagFragment != 0 {
		binary.BigEndian.PutUint16(b[offEOFragIdx:], uint16(h.fragOff/fragChunk))
		binary.BigEndian.PutUint32(b[offEOFragTot:], h.total)
		return
	}
	clear(b[offReserved:eoHeaderLen])
}

// Append appends the encoded header to b.
func (h *header) Append(b []byte) []byte {
	n := len(b)
	b = append(b, zeroHeader[:h.Len()]...)
	h.put(b[n:])
	return b
}

var zeroHeader [maxHeaderLen]byte

// allowedFlags are the flags each kind may carry.
var allowedFlags = [kindMax + 1]uint8{
	kindRequest:  flagExactlyOnce | flagAck | flagFragment,
	kindResponse: flagExactlyOnce | flagFragment,
	kindAck:      flagExactlyOnce | flagAck,
	kindPull:     flagFragment | flagExactlyOnce,
}

// Parse decodes the header at the start of b, which comes from the
// network: every field is checked, and a message that breaks any rule is
// refused with a *ProtocolError. It returns the header's length; the
// payload is b[n:]. On error h is unchanged.
func (h *header) Parse(b []byte) (n int, err error) {
	if len(b) < baseHeaderLen {
		return 0, errShort
	}
	if b[offMagic] != hdrMagic {
		return 0, errMagic
	}
	if b[offVersion] != hdrVersion {
		return 0, errVersion
	}
	var p header
	p.kind = kind(b[offKind])
	if p.kind == 0 || p.kind > kindMax {
		return 0, errKind
	}
	p.reqType = b[offReqType]
	if p.reqType != 0 && p.kind != kindRequest && p.kind != kindResponse {
		return 0, errReqType
	}
	p.flags = b[offFlags]
	if p.flags&^allowedFlags[p.kind] != 0 {
		return 0, errFlags
	}
	if p.flags&flagAck != 0 && p.flags&flagExactlyOnce == 0 {
		return 0, errFlags
	}
	if p.kind == kindAck && p.flags&flagExactlyOnce == 0 {
		return 0, errFlags
	}
	if p.kind == kindPull && p.flags&flagFragment == 0 {
		return 0, errFlags
	}
	p.status = status(b[offStatus])
	if p.status > statusMax || (p.status != statusOK && !p.kind.isReply()) {
		return 0, errStatus
	}
	p.retry = binary.BigEndian.Uint16(b[offRetry:])
	if p.retry != 0 && (p.flags&flagExactlyOnce == 0 || p.kind == kindPull) {
		return 0, errRetry // a pull names a response, not an attempt
	}
	p.session = binary.BigEndian.Uint32(b[offSession:])
	p.token = binary.BigEndian.Uint32(b[offToken:])
	if p.flags&flagFragment != 0 && p.flags&flagExactlyOnce == 0 {
		return h.parseFragment(b, p)
	}
	if p.flags&flagExactlyOnce == 0 {
		*h = p
		return baseHeaderLen, nil
	}
	if len(b) < eoHeaderLen {
		return 0, errShort
	}
	p.clientID = binary.BigEndian.Uint64(b[offClientID:])
	p.seq = binary.BigEndian.Uint64(b[offSeq:])
	p.ackFloor = binary.BigEndian.Uint64(b[offAckFloor:])
	p.ackSeq = binary.BigEndian.Uint64(b[offAckSeq:])
	p.ackRetries = binary.BigEndian.Uint16(b[offAckRetries:])
	if p.flags&flagFragment != 0 {
		off := uint64(binary.BigEndian.Uint16(b[offEOFragIdx:])) * fragChunk
		if off > 1<<32-1 {
			return 0, errFragment
		}
		p.fragOff, p.total = uint32(off), binary.BigEndian.Uint32(b[offEOFragTot:])
		if err := p.checkFragment(len(b) - eoHeaderLen); err != nil {
			return 0, err
		}
	} else {
		for _, x := range b[offReserved:eoHeaderLen] {
			if x != 0 {
				return 0, errReserved
			}
		}
	}
	if p.clientID == 0 {
		return 0, errClientID
	}
	switch {
	case p.kind == kindAck && p.seq != 0:
		return 0, errSeq // an acknowledgment alone names no request
	case p.kind != kindAck && p.seq == 0:
		return 0, errSeq // sequences start at 1
	case p.kind == kindRequest && p.ackFloor > p.seq:
		// The request's own sequence is incomplete at the client, so
		// the floor cannot have passed it.
		return 0, errFloor
	case (p.kind == kindResponse || p.kind == kindPull) && (p.ackFloor != 0 || p.ackSeq != 0 || p.ackRetries != 0):
		return 0, errAck
	case p.flags&flagAck == 0 && (p.ackSeq != 0 || p.ackRetries != 0):
		return 0, errAck
	case p.flags&flagAck != 0 && p.ackSeq == 0:
		return 0, errAck
	}
	*h = p
	return eoHeaderLen, nil
}

// parseFragment decodes the fragment extension of b into p (its base
// already decoded) and stores p in h. It checks the fields against each
// other only: whether a message of that total is welcome is the
// receiver's decision.
func (h *header) parseFragment(b []byte, p header) (int, error) {
	if len(b) < fragHeaderLen {
		return 0, errShort
	}
	p.msgID = binary.BigEndian.Uint32(b[offFragID:])
	p.fragOff = binary.BigEndian.Uint32(b[offFragOffset:])
	p.total = binary.BigEndian.Uint32(b[offFragTotal:])
	for _, x := range b[offFragReserved:fragHeaderLen] {
		if x != 0 {
			return 0, errReserved
		}
	}
	if err := p.checkFragment(len(b) - fragHeaderLen); err != nil {
		return 0, err
	}
	*h = p
	return fragHeaderLen, nil
}

// checkFragment checks a fragment's offset and total against each other
// and against the n bytes of data that follow the header.
func (p *header) checkFragment(n int) error {
	switch {
	case p.kind == kindPull && (p.total != 0 || n != 0):
		return errFragment // a pull names an offset only
	case p.kind != kindPull && p.fragOff >= p.total && !(p.total == 0 && p.fragOff == 0):
		return errFragment
	case p.kind != kindPull && uint64(p.fragOff)+uint64(n) > uint64(p.total):
		return errFragment // data beyond the claimed total
	}
	return nil
}

// Bodies of the control messages, after the base header.
//
//	connect (session and token: the client's session number and generation)
//	 16     1   Rpc id the session goes to
//	 17     1   Rpc id of the client
//	 18     1   connect flags: 1 = fresh (the client id was never accepted)
//	 19     1   reserved, zero
//	 20     8   client id: the lease, and the exactly-once identity
//
//	connect reply (session and token: the server session's)
//	 16     2   Homa port of the server Rpc's socket
//	 18     2   reserved, zero
//	 20     4   lease duration at the server, milliseconds
//
//	heartbeat (session and token zero)
//	 16     2   count n of client ids, 1..maxHeartbeatIDs
//	 18     2   reserved, zero
//	 20   8*n   client ids whose leases the client renews
//
//	heartbeat reply
//	 16     2   count n, as in the heartbeat
//	 18     2   reserved, zero
//	 20     n   per client id: 0 renewed, 1 unknown (the lease expired)
//
//	disconnect (session and token: the server session's)
//	 16     1   Rpc id the session goes to
//	 17     3   reserved, zero
const (
	offConnDstRpc   = 16
	offConnSrcRpc   = 17
	offConnFlags    = 18
	offConnReserved = 19
	offConnClientID = 20
	connectLen      = 28

	offReplyPort     = 16
	offReplyReserved = 18
	offReplyLease    = 20
	connectReplyLen  = 24

	offHbCount    = 16
	offHbReserved = 18
	offHbIDs      = 20
	// maxHeartbeatIDs bounds the client ids of one heartbeat (one per Rpc
	// of the client's Nexus).
	maxHeartbeatIDs = 256

	connFresh = 1 // connect flag: the client id is new

	offDiscDstRpc   = 16
	offDiscReserved = 17
	disconnectLen   = 20
)

// connectBody is what a connect request asks for.
type connectBody struct {
	dstRpc, srcRpc uint8
	fresh          bool
	clientID       uint64
}

// Len is connectLen less the base header.
func (c *connectBody) Len() int { return connectLen - baseHeaderLen }

// Append appends the body to b (which holds the base header).
func (c *connectBody) Append(b []byte) []byte {
	var f byte
	if c.fresh {
		f = connFresh
	}
	b = append(b, c.dstRpc, c.srcRpc, f, 0)
	return binary.BigEndian.AppendUint64(b, c.clientID)
}

// Parse decodes the body of a whole connect message m, which must be
// exactly connectLen bytes.
func (c *connectBody) Parse(m []byte) (int, error) {
	if len(m) != connectLen {
		return 0, errLength
	}
	if m[offConnFlags]&^connFresh != 0 || m[offConnReserved] != 0 {
		return 0, errReserved
	}
	p := connectBody{
		dstRpc:   m[offConnDstRpc],
		srcRpc:   m[offConnSrcRpc],
		fresh:    m[offConnFlags]&connFresh != 0,
		clientID: binary.BigEndian.Uint64(m[offConnClientID:]),
	}
	if p.clientID == 0 {
		return 0, errClientID
	}
	*c = p
	return connectLen - baseHeaderLen, nil
}

// connectReplyBody tells the client where the server Rpc listens.
type connectReplyBody struct {
	port    uint16
	leaseMs uint32 // the server's lease duration
}

// Len is connectReplyLen less the base header.
func (c *connectReplyBody) Len() int { return connectReplyLen - baseHeaderLen }

// Append appends the body to b (which holds the base header).
func (c *connectReplyBody) Append(b []byte) []byte {
	b = binary.BigEndian.AppendUint16(b, c.port)
	b = append(b, 0, 0)
	return binary.BigEndian.AppendUint32(b, c.leaseMs)
}

// Parse decodes the body of a whole connect reply m. A reply with a
// status other than OK may be just the base header.
func (c *connectReplyBody) Parse(m []byte) (int, error) {
	if len(m) != connectReplyLen {
		return 0, errLength
	}
	if m[offReplyReserved] != 0 || m[offReplyReserved+1] != 0 {
		return 0, errReserved
	}
	port := binary.BigEndian.Uint16(m[offReplyPort:])
	if port == 0 || port > maxServerPort {
		return 0, errPort
	}
	lease := binary.BigEndian.Uint32(m[offReplyLease:])
	if lease == 0 {
		return 0, errLease
	}
	c.port, c.leaseMs = port, lease
	return connectReplyLen - baseHeaderLen, nil
}

// disconnectBody names the Rpc whose session ends.
type disconnectBody struct {
	dstRpc uint8
}

// Len is disconnectLen less the base header.
func (d *disconnectBody) Len() int { return disconnectLen - baseHeaderLen }

// Append appends the body to b (which holds the base header).
func (d *disconnectBody) Append(b []byte) []byte {
	return append(b, d.dstRpc, 0, 0, 0)
}

// Parse decodes the body of a whole disconnect message m.
func (d *disconnectBody) Parse(m []byte) (int, error) {
	if len(m) != disconnectLen {
		return 0, errLength
	}
	for _, x := range m[offDiscReserved:disconnectLen] {
		if x != 0 {
			return 0, errReserved
		}
	}
	d.dstRpc = m[offDiscDstRpc]
	return disconnectLen - baseHeaderLen, nil
}

// maxServerPort is the largest Homa server port; client ports lie above.
const maxServerPort = 32767

// The parse errors: fixed values, so that a flood of bad messages
// allocates nothing.
var (
	errShort    = &ProtocolError{"message shorter than its header"}
	errLength   = &ProtocolError{"control message of the wrong length"}
	errMagic    = &ProtocolError{"bad magic"}
	errVersion  = &ProtocolError{"unknown version"}
	errKind     = &ProtocolError{"unknown kind"}
	errReqType  = &ProtocolError{"request type on a control message"}
	errFlags    = &ProtocolError{"flags not allowed for the kind"}
	errStatus   = &ProtocolError{"status unknown or on a request"}
	errRetry    = &ProtocolError{"retry count without exactly-once"}
	errReserved = &ProtocolError{"reserved bytes not zero"}
	errClientID = &ProtocolError{"client id zero"}
	errSeq      = &ProtocolError{"sequence number out of place"}
	errFloor    = &ProtocolError{"ack floor beyond the request's sequence"}
	errAck      = &ProtocolError{"acknowledgment fields out of place"}
	errPort     = &ProtocolError{"port is not a server port"}
	errLease    = &ProtocolError{"lease duration zero"}
	errCount    = &ProtocolError{"heartbeat count out of range or not matching the length"}
	errFragment = &ProtocolError{"fragment offset or length beyond the message's total, or data in a pull"}
)

// heartbeatBody lists the client ids whose leases a client renews.
type heartbeatBody struct {
	ids []uint64
}

// Append appends the body to b (which holds the base header).
func (hb *heartbeatBody) Append(b []byte) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(hb.ids)))
	b = append(b, 0, 0)
	for _, id := range hb.ids {
		b = binary.BigEndian.AppendUint64(b, id)
	}
	return b
}

// Parse decodes the body of a whole heartbeat m, appending its ids to
// hb.ids (reset first); the count must match the length exactly.
func (hb *heartbeatBody) Parse(m []byte) (int, error) {
	n, err := countOf(m, 8)
	if err != nil {
		return 0, err
	}
	hb.ids = hb.ids[:0]
	for i := range n {
		id := binary.BigEndian.Uint64(m[offHbIDs+8*i:])
		if id == 0 {
			return 0, errClientID
		}
		hb.ids = append(hb.ids, id)
	}
	return len(m) - baseHeaderLen, nil
}

// heartbeatReplyBody says, per client id of a heartbeat, whether the
// server knew its lease.
type heartbeatReplyBody struct {
	unknown []bool
}

// Append appends the body to b (which holds the base header).
func (hr *heartbeatReplyBody) Append(b []byte) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(hr.unknown)))
	b = append(b, 0, 0)
	for _, u := range hr.unknown {
		var x byte
		if u {
			x = 1
		}
		b = append(b, x)
	}
	return b
}

// Parse decodes the body of a whole heartbeat reply m into hr.unknown
// (reset first).
func (hr *heartbeatReplyBody) Parse(m []byte) (int, error) {
	n, err := countOf(m, 1)
	if err != nil {
		return 0, err
	}
	hr.unknown = hr.unknown[:0]
	for _, x := range m[offHbIDs : offHbIDs+n] {
		if x > 1 {
			return 0, errReserved
		}
		hr.unknown = append(hr.unknown, x == 1)
	}
	return len(m) - baseHeaderLen, nil
}

// countOf checks the count and reserved field of a heartbeat or its reply
// m, whose entries are size bytes each, against m's length.
func countOf(m []byte, size int) (int, error) {
	if len(m) < offHbIDs {
		return 0, errLength
	}
	if m[offHbReserved] != 0 || m[offHbReserved+1] != 0 {
		return 0, errReserved
	}
	n := int(binary.BigEndian.Uint16(m[offHbCount:]))
	if n == 0 || n > maxHeartbeatIDs || len(m) != offHbIDs+size*n {
		return 0, errCount
	}
	return n, nil
}

package homagrpc

import (
	"encoding/binary"
	"fmt"
)

// The framing of streams. A stream is a sequence of Homa RPCs from the
// client, each a stream frame; every frame names the stream by an id the
// client chose. The client's frame (kind 3) is
//
//	offset size field
//	0      1    version (1)
//	1      1    kind (3: stream frame)
//	2      1    op: 1 open, 2 data, 3 pull, 4 cancel, 5 pull set
//	3      1    flags: 1 half-close (open, data: the client sends no
//	            more messages); 2 pull (open only: the open is also the
//	            stream's first pull)
//	4      4    reserved (0)
//	8      8    stream id (the caller's, unique per client socket)
//	16     8    credit: how many message bytes the client accepts from
//	            the server in all, counted from the stream's start
//	24          open: a request frame (kind 1, as for a unary call) whose
//	            payload is chunks; data: chunks; pull, cancel: nothing;
//	            pull set: entries, below
//
// A pull set pulls several streams of the client's socket at once: its
// stream id names the puller (a ClientConn's, for each server; a
// socket may have several), its credit is 0, and each 16-byte entry
// names a stream (8 bytes) and its credit (8 bytes), as a pull frame
// would. Its answer (kind 5) carries the answers of those of the
// puller's pulled streams that have something to say:
//
//	offset size field
//	0      1    version (1)
//	1      1    kind (5: pull answers)
//	2      2    reserved (0)
//	4      4    count N
//	8           N entries: stream id (8), length L (4), reserved (4),
//	            and L bytes: the stream's response (kind 4)
//
// and the server's response to it (kind 4) is
//
//	offset size field
//	0      1    version (1)
//	1      1    kind (4: stream response)
//	2      1    flags: 1 end (the status and trailer are final);
//	            2 header (the header metadata is in this response)
//	3      1    reserved (0)
//	4      4    sequence number: 1 for the stream's first response, one
//	            more for each next one, whichever frame it answers (the
//	            client takes them in this order); 0 for the answers of a
//	            server that does not know the stream
//	8      8    credit: how many message bytes the server accepts from
//	            the client in all, counted from the stream's start
//	16          a response frame (kind 2, as for a unary call) whose
//	            status is OK unless the end flag is set and whose
//	            payload is chunks
//
// Messages travel as chunks, each a piece of one message:
//
//	offset size field
//	0      1    flags: 1 last (the message ends with this chunk);
//	            2 compressed (the message is compressed; the same on
//	            every chunk of a message)
//	1      3    reserved (0)
//	4      4    length C
//	8      C    the bytes
//
// A message longer than what one Homa message holds, or than the credit
// left, is cut into several chunks in several frames.
const (
	kindStreamReq   = 3
	kindStreamResp  = 4
	kindPullAnswers = 5

	opOpen   = 1
	opData   = 2
	opPull   = 3
	opCancel = 4
	opPulls  = 5

	sreqFlagHalfClose = 1
	sreqFlagPull      = 2

	srespFlagEnd    = 1
	srespFlagHeader = 2

	sreqOffOp     = 2
	sreqOffFlags  = 3
	sreqOffID     = 8
	sreqOffCredit = 16
	sreqHeaderLen = 24

	srespOffFlags  = 2
	srespOffSeq    = 4
	srespOffCredit = 8
	srespHeaderLen = 16

	pullEntryLen       = 16
	pullAnswersHdrLen  = 8
	pullAnswerEntryLen = 16

	chunkFlagLast       = 1
	chunkFlagCompressed = 2
	chunkHeaderLen      = 8

	// maxFrame is the longest frame this package sends: what one Homa
	// message holds, less a margin.
	maxFrame = 1_000_000
)

// streamReq is a parsed client stream frame; its slices alias the
// message.
type streamReq struct {
	op     byte
	flags  byte
	id     uint64
	credit uint64
	open   request // op open: the request frame; its payload is chunks
	chunks []byte
	pulls  []byte // op pull set: the entries (pullEntry)
}

// appendStreamReqHeader appends the fixed header of a client frame.
func appendStreamReqHeader(b []byte, op, flags byte, id, credit uint64) []byte {
	b = append(b, frameVersion, kindStreamReq, op, flags, 0, 0, 0, 0)
	b = binary.BigEndian.AppendUint64(b, id)
	return binary.BigEndian.AppendUint64(b, credit)
}

// parseStreamReq validates a client frame and splits it.
func parseStreamReq(msg []byte) (streamReq, error) {
	var r streamReq
	if err := checkHead(msg, kindStreamReq, sreqHeaderLen); err != nil {
		return r, err
	}
	if binary.BigEndian.Uint32(msg[4:]) != 0 {
		return r, fmt.Errorf("%w: reserved bytes set", errMalformed)
	}
	r.op, r.flags = msg[sreqOffOp], msg[sreqOffFlags]
	r.id = binary.BigEndian.Uint64(msg[sreqOffID:])
	r.credit = binary.BigEndian.Uint64(msg[sreqOffCredit:])
	rest := msg[sreqHeaderLen:]
	allowed := byte(0)
	switch r.op {
	case opOpen:
		allowed = sreqFlagHalfClose | sreqFlagPull
		var err error
		if r.open, err = parseRequest(rest); err != nil {
			return r, err
		}
		rest = r.open.payload
	case opData:
		allowed = sreqFlagHalfClose
	case opPull, opCancel:
		if len(rest) != 0 {
			return r, fmt.Errorf("%w: %d bytes after a pull or cancel frame", errMalformed, len(rest))
		}
	case opPulls:
		if r.id == 0 || r.credit != 0 || len(rest)%pullEntryLen != 0 {
			return r, fmt.Errorf("%w: a pull set with id %d, credit %d and %d bytes of entries", errMalformed, r.id, r.credit, len(rest))
		}
		if r.flags != 0 {
			return r, fmt.Errorf("%w: stream flags %#x for op %d", errMalformed, r.flags, r.op)
		}
		r.pulls = rest
		return r, nil
	default:
		return r, fmt.Errorf("%w: stream op %d", errMalformed, r.op)
	}
	if r.flags&^allowed != 0 {
		return r, fmt.Errorf("%w: stream flags %#x for op %d", errMalformed, r.flags, r.op)
	}
	if r.flags&sreqFlagPull != 0 && r.flags&sreqFlagHalfClose == 0 {
		return r, fmt.Errorf("%w: an open that pulls must half-close", errMalformed)
	}
	if err := checkChunks(rest); err != nil {
		return r, err
	}
	r.chunks = rest
	return r, nil
}

// streamResp is a parsed server stream response; its slices alias the
// message.
type streamResp struct {
	flags  byte
	seq    uint32
	credit uint64
	resp   response // its payload is chunks
}

// appendStreamRespHeader appends the fixed header of a server response.
func appendStreamRespHeader(b []byte, flags byte, seq uint32, credit uint64) []byte {
	b = append(b, frameVersion, kindStreamResp, flags, 0)
	b = binary.BigEndian.AppendUint32(b, seq)
	return binary.BigEndian.AppendUint64(b, credit)
}

// parseStreamResp validates a server response and splits it.
func parseStreamResp(msg []byte) (streamResp, error) {
	var r streamResp
	if err := checkHead(msg, kindStreamResp, srespHeaderLen); err != nil {
		return r, err
	}
	r.flags = msg[srespOffFlags]
	if r.flags&^(srespFlagEnd|srespFlagHeader) != 0 || msg[3] != 0 {
		return r, fmt.Errorf("%w: stream response flags %#x or reserved byte", errMalformed, r.flags)
	}
	r.seq = binary.BigEndian.Uint32(msg[srespOffSeq:])
	r.credit = binary.BigEndian.Uint64(msg[srespOffCredit:])
	var err error
	if r.resp, err = parseResponseFrame(msg[srespHeaderLen:], true); err != nil {
		return r, err
	}
	if r.flags&srespFlagEnd == 0 && (r.resp.code != 0 || r.resp.nTrailer != 0) {
		return r, fmt.Errorf("%w: a status or trailer in a stream response that is not the end", errMalformed)
	}
	if r.flags&srespFlagHeader == 0 && r.resp.nHeader != 0 {
		return r, fmt.Errorf("%w: header metadata without the header flag", errMalformed)
	}
	if err := checkChunks(r.resp.payload); err != nil {
		return r, err
	}
	return r, nil
}

// appendChunkHeader appends a chunk's header; its n bytes follow.
func appendChunkHeader(b []byte, flags byte, n int) []byte {
	b = append(b, flags, 0, 0, 0)
	return binary.BigEndian.AppendUint32(b, uint32(n))
}

// nextChunk splits the first chunk off a section checked by checkChunks.
func nextChunk(sec []byte) (flags byte, data, rest []byte) {
	n := binary.BigEndian.Uint32(sec[4:])
	flags = sec[0]
	sec = sec[chunkHeaderLen:]
	return flags, sec[:n], sec[n:]
}

// checkChunks checks that sec is a whole number of valid chunks.
func checkChunks(sec []byte) error {
	for len(sec) > 0 {
		if len(sec) < chunkHeaderLen {
			return fmt.Errorf("%w: %d bytes left, shorter than a chunk header", errMalformed, len(sec))
		}
		if sec[0]&^(chunkFlagLast|chunkFlagCompressed) != 0 || sec[1]|sec[2]|sec[3] != 0 {
			return fmt.Errorf("%w: chunk flags %#x or reserved bytes", errMalformed, sec[0])
		}
		n := uint64(binary.BigEndian.Uint32(sec[4:]))
		if n > uint64(len(sec)-chunkHeaderLen) {
			return fmt.Errorf("%w: a chunk of %d bytes overruns its frame", errMalformed, n)
		}
		sec = sec[chunkHeaderLen+n:]
	}
	return nil
}

// appendPullEntry appends a pull set's entry: stream id pulls with
// credit.
func appendPullEntry(b []byte, id, credit uint64) []byte {
	b = binary.BigEndian.AppendUint64(b, id)
	return binary.BigEndian.AppendUint64(b, credit)
}

// pullEntry returns the i-th entry of a pull set's entries, checked by
// parseStreamReq.
func pullEntry(entries []byte, i int) (id, credit uint64) {
	e := entries[i*pullEntryLen:]
	return binary.BigEndian.Uint64(e), binary.BigEndian.Uint64(e[8:])
}

// appendPullAnswersHeader appends the header of the answer to a pull
// set carrying n answers.
func appendPullAnswersHeader(b []byte, n int) []byte {
	b = append(b, frameVersion, kindPullAnswers, 0, 0)
	return binary.BigEndian.AppendUint32(b, uint32(n))
}

// appendPullAnswer appends one answer, stream id's response frame.
func appendPullAnswer(b []byte, id uint64, frame []byte) []byte {
	b = binary.BigEndian.AppendUint64(b, id)
	b = binary.BigEndian.AppendUint32(b, uint32(len(frame)))
	b = append(b, 0, 0, 0, 0)
	return append(b, frame...)
}

// parsePullAnswers validates the answer to a pull set and calls each for
// each of its answers in order; frame aliases msg. It checks the layout
// only: each stream checks its own response (parseStreamResp).
func parsePullAnswers(msg []byte, each func(id uint64, frame []byte)) error {
	if err := checkHead(msg, kindPullAnswers, pullAnswersHdrLen); err != nil {
		return err
	}
	if msg[2]|msg[3] != 0 {
		return fmt.Errorf("%w: reserved bytes set", errMalformed)
	}
	n := uint64(binary.BigEndian.Uint32(msg[4:]))
	rest := msg[pullAnswersHdrLen:]
	if n*pullAnswerEntryLen > uint64(len(rest)) {
		return fmt.Errorf("%w: %d pull answers cannot fit in %d bytes", errMalformed, n, len(rest))
	}
	// Check everything before handing anything over.
	sec := rest
	for range n {
		if len(sec) < pullAnswerEntryLen || binary.BigEndian.Uint32(sec[12:]) != 0 {
			return fmt.Errorf("%w: a pull answer's header", errMalformed)
		}
		l := uint64(binary.BigEndian.Uint32(sec[8:]))
		if l > uint64(len(sec)-pullAnswerEntryLen) {
			return fmt.Errorf("%w: a pull answer of %d bytes overruns the message", errMalformed, l)
		}
		sec = sec[pullAnswerEntryLen+l:]
	}
	if len(sec) != 0 {
		return fmt.Errorf("%w: %d bytes after the pull answers", errMalformed, len(sec))
	}
	for range n {
		l := binary.BigEndian.Uint32(rest[8:])
		each(binary.BigEndian.Uint64(rest), rest[pullAnswerEntryLen:pullAnswerEntryLen+l])
		rest = rest[pullAnswerEntryLen+l:]
	}
	return nil
}

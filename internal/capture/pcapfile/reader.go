package pcapfile

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"iter"
	"math/bits"
	"os"
	"time"
)

// File header layout.
const (
	fileHeaderLen   = 24
	offMagic        = 0
	offVersionMajor = 4
	offVersionMinor = 6
	offSnapLen      = 16
	offLinkType     = 20

	magicMicro uint32 = 0xa1b2c3d4
	magicNano  uint32 = 0xa1b23c4d

	// linkTypeMask keeps the link type from the header field, whose upper
	// bits may describe frame check sequences.
	linkTypeMask uint32 = 0xffff
	// maxFrameBytes bounds a record, so a corrupt header cannot make the
	// reader allocate gigabytes.
	maxFrameBytes = 1 << 20
)

// Record header layout.
const (
	recordHeaderLen = 16
	offTimeSec      = 0
	offTimeFrac     = 4 // microseconds or nanoseconds
	offCapLen       = 8
	offOrigLen      = 12
)

// Record is one captured frame.
type Record struct {
	// Time is the capture time, in UTC.
	Time time.Time
	// Frame is the captured bytes, starting with the link-layer header.
	// It is newly allocated for each record and owned by the caller.
	Frame []byte
	// OrigLen is the frame's length on the wire; more than len(Frame) when
	// the capture was cut at the snap length.
	OrigLen int
}

// Reader reads records from a classic pcap file.
type Reader struct {
	r        *bufio.Reader
	closer   io.Closer
	order    binary.ByteOrder
	nano     bool
	linkType LinkType
	snapLen  uint32
	hdr      [recordHeaderLen]byte
}

// Open opens the pcap file at path. Close the Reader when done.
func Open(path string) (*Reader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	r, err := NewReader(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	r.closer = f
	return r, nil
}

// NewReader reads the file header from r and returns a Reader for the
// records that follow.
func NewReader(r io.Reader) (*Reader, error) {
	pr := &Reader{r: bufio.NewReaderSize(r, 64<<10)}
	var h [fileHeaderLen]byte
	if _, err := io.ReadFull(pr.r, h[:]); err != nil {
		return nil, fmt.Errorf("%w: reading file header: %v", ErrNotPcap, err)
	}
	switch binary.LittleEndian.Uint32(h[offMagic:]) {
	case magicMicro, magicNano:
		pr.order = binary.LittleEndian
	case bits.ReverseBytes32(magicMicro), bits.ReverseBytes32(magicNano):
		pr.order = binary.BigEndian
	default:
		return nil, fmt.Errorf("%w: magic % x", ErrNotPcap, h[offMagic:offMagic+4])
	}
	pr.nano = pr.order.Uint32(h[offMagic:]) == magicNano
	if v := pr.order.Uint16(h[offVersionMajor:]); v != 2 {
		return nil, fmt.Errorf("%w: version %d", ErrNotPcap, v)
	}
	pr.snapLen = pr.order.Uint32(h[offSnapLen:])
	pr.linkType = LinkType(pr.order.Uint32(h[offLinkType:]) & linkTypeMask)
	return pr, nil
}

// LinkType returns the link-layer type of the file's frames.
func (r *Reader) LinkType() LinkType { return r.linkType }

// SnapLen returns the largest frame length the capture kept.
func (r *Reader) SnapLen() uint32 { return r.snapLen }

// Next returns the next record, or io.EOF after the last one. A file that
// ends inside a record gives io.ErrUnexpectedEOF.
func (r *Reader) Next() (Record, error) {
	if _, err := io.ReadFull(r.r, r.hdr[:]); err != nil {
		return Record{}, err
	}
	sec := r.order.Uint32(r.hdr[offTimeSec:])
	frac := r.order.Uint32(r.hdr[offTimeFrac:])
	capLen := r.order.Uint32(r.hdr[offCapLen:])
	origLen := r.order.Uint32(r.hdr[offOrigLen:])
	if capLen > maxFrameBytes || origLen < capLen {
		return Record{}, fmt.Errorf("%w: captured length %d, original length %d", ErrCorrupt, capLen, origLen)
	}
	nsec := int64(frac)
	if !r.nano {
		nsec *= 1000
	}
	rec := Record{
		Time:    time.Unix(int64(sec), nsec).UTC(),
		Frame:   make([]byte, capLen),
		OrigLen: int(origLen),
	}
	if _, err := io.ReadFull(r.r, rec.Frame); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return Record{}, err
	}
	return rec, nil
}

// Records returns an iterator over the remaining records, for use in a
// range loop. It ends at the end of the file; a read error is yielded once,
// with a zero Record, and ends it too.
func (r *Reader) Records() iter.Seq2[Record, error] {
	return func(yield func(Record, error) bool) {
		for {
			rec, err := r.Next()
			if err == io.EOF || !yield(rec, err) || err != nil {
				return
			}
		}
	}
}

// Close closes the file opened by Open; for a Reader from NewReader it does
// nothing.
func (r *Reader) Close() error {
	if r.closer == nil {
		return nil
	}
	return r.closer.Close()
}

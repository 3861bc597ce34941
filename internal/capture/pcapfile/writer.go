package pcapfile

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"time"
)

// writerSnapLen is the snap length written in the file header; longer
// frames are refused.
const writerSnapLen = 262144

// Writer writes a little-endian, microsecond-resolution classic pcap file.
type Writer struct {
	w   io.Writer
	buf []byte
}

// NewWriter writes a file header for frames of the given link type to w and
// returns a Writer for the records.
func NewWriter(w io.Writer, linkType LinkType) (*Writer, error) {
	var h [fileHeaderLen]byte
	le := binary.LittleEndian
	le.PutUint32(h[offMagic:], magicMicro)
	le.PutUint16(h[offVersionMajor:], 2)
	le.PutUint16(h[offVersionMinor:], 4)
	le.PutUint32(h[offSnapLen:], writerSnapLen)
	le.PutUint32(h[offLinkType:], uint32(linkType))
	if _, err := w.Write(h[:]); err != nil {
		return nil, err
	}
	return &Writer{w: w}, nil
}

// WritePacket writes one record holding frame, captured whole at t, in a
// single Write call.
func (w *Writer) WritePacket(t time.Time, frame []byte) error {
	return w.WriteRecord(Record{Time: t, Frame: frame})
}

// WriteRecord writes rec in a single Write call, keeping its original
// length, so that a frame the capture cut (OrigLen more than
// len(rec.Frame)) reads back as cut. An OrigLen below len(rec.Frame),
// such as 0, means the frame is whole.
func (w *Writer) WriteRecord(rec Record) error {
	if len(rec.Frame) > writerSnapLen {
		return fmt.Errorf("pcapfile: frame of %d bytes exceeds the snap length %d", len(rec.Frame), writerSnapLen)
	}
	origLen := max(rec.OrigLen, len(rec.Frame))
	if origLen > math.MaxUint32 {
		return fmt.Errorf("pcapfile: original length %d does not fit a record", origLen)
	}
	var h [recordHeaderLen]byte
	le := binary.LittleEndian
	le.PutUint32(h[offTimeSec:], uint32(rec.Time.Unix()))
	le.PutUint32(h[offTimeFrac:], uint32(rec.Time.Nanosecond()/1000))
	le.PutUint32(h[offCapLen:], uint32(len(rec.Frame)))
	le.PutUint32(h[offOrigLen:], uint32(origLen))
	w.buf = append(append(w.buf[:0], h[:]...), rec.Frame...)
	_, err := w.w.Write(w.buf)
	return err
}

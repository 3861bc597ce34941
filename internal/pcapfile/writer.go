package pcapfile

import (
	"encoding/binary"
	"fmt"
	"io"
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

// WritePacket writes one record holding frame, captured at t, in a single
// Write call.
func (w *Writer) WritePacket(t time.Time, frame []byte) error {
	if len(frame) > writerSnapLen {
		return fmt.Errorf("pcapfile: frame of %d bytes exceeds the snap length %d", len(frame), writerSnapLen)
	}
	var h [recordHeaderLen]byte
	le := binary.LittleEndian
	le.PutUint32(h[offTimeSec:], uint32(t.Unix()))
	le.PutUint32(h[offTimeFrac:], uint32(t.Nanosecond()/1000))
	le.PutUint32(h[offCapLen:], uint32(len(frame)))
	le.PutUint32(h[offOrigLen:], uint32(len(frame)))
	w.buf = append(append(w.buf[:0], h[:]...), frame...)
	_, err := w.w.Write(w.buf)
	return err
}

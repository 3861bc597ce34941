package workload

import (
	"bufio"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"
)

// samplesHeader is the first line of a samples file.
const samplesHeader = "size,rtt_ns"

// ErrSamplesHeader is returned by [ReadSamples] when the first line is not
// the samples header.
var ErrSamplesHeader = errors.New("workload: samples file does not start with \"" + samplesHeader + "\"")

// WriteSamples writes s as CSV: the header line "size,rtt_ns", then one
// "size,rtt_ns" line per sample with the RTT in nanoseconds.
func WriteSamples(w io.Writer, s []Sample) error {
	bw := bufio.NewWriter(w)
	bw.WriteString(samplesHeader + "\n")
	var line []byte
	for _, x := range s {
		line = strconv.AppendInt(line[:0], int64(x.Size), 10)
		line = append(line, ',')
		line = strconv.AppendInt(line, int64(x.RTT), 10)
		line = append(line, '\n')
		if _, err := bw.Write(line); err != nil {
			return fmt.Errorf("workload: writing samples: %w", err)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("workload: writing samples: %w", err)
	}
	return nil
}

// ReadSamples reads a file written by [WriteSamples]. The header line is
// required; sizes and RTTs must be non-negative integers. A malformed line
// is a *ParseError naming it.
func ReadSamples(r io.Reader) ([]Sample, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = 2
	cr.TrimLeadingSpace = true
	cr.ReuseRecord = true
	head, err := cr.Read()
	if err == io.EOF || (err == nil && (head[0] != "size" || head[1] != "rtt_ns")) {
		return nil, &ParseError{Line: 1, Err: ErrSamplesHeader}
	}
	if err != nil {
		return nil, csvError(err)
	}
	var out []Sample
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, csvError(err)
		}
		s, err := parseSample(rec)
		if err != nil {
			line, _ := cr.FieldPos(0)
			return nil, &ParseError{Line: line, Err: err}
		}
		out = append(out, s)
	}
}

// parseSample parses the two fields of one samples line.
func parseSample(rec []string) (Sample, error) {
	size, err := strconv.Atoi(rec[0])
	if err != nil || size < 0 {
		return Sample{}, fmt.Errorf("bad size %q", rec[0])
	}
	ns, err := strconv.ParseInt(rec[1], 10, 64)
	if err != nil || ns < 0 {
		return Sample{}, fmt.Errorf("bad rtt_ns %q", rec[1])
	}
	return Sample{Size: size, RTT: time.Duration(ns)}, nil
}

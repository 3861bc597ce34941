package dcsim

import (
	"embed"
	"encoding/csv"
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"strconv"

	"github.com/homa-go/homa/internal/tools/workload"
)

// The workload package truncates every distribution at the core's
// largest message. tails/wN.csv holds the rows of /work/shared/workloads'
// wN.csv at or above that size (the same "length_bytes,weight" lines,
// weights relative), so that the simulator can draw the longer messages
// W2 to W5 really have: a draw of workload.MaxMessage from the truncated
// distribution (its atom carries exactly the weight of those rows) is
// redrawn from the tail.
//
//go:embed tails/*.csv
var tailFiles embed.FS

// sizes is a message-size distribution without the truncation.
type sizes struct {
	d       *workload.Dist
	below   float64 // P(size < MaxMessage) of d
	tail    []int   // ascending sizes >= MaxMessage
	tailCDF []float64
	mean    float64
}

// newSizes returns d with its tail restored, if the workload has one.
func newSizes(d *workload.Dist) (*sizes, error) {
	s := &sizes{d: d, below: 1}
	if f, err := tailFiles.Open("tails/" + d.Name() + ".csv"); err == nil {
		defer f.Close()
		if err := s.readTail(f); err != nil {
			return nil, fmt.Errorf("dcsim: tail of %s: %w", d.Name(), err)
		}
		// P(size < MaxMessage): the largest q whose quantile is below it.
		lo, hi := 0.0, 1.0
		for range 64 {
			if m := (lo + hi) / 2; d.Quantile(m) < workload.MaxMessage {
				lo = m
			} else {
				hi = m
			}
		}
		s.below = lo
	}
	const n = 100_000
	for i := range n {
		s.mean += float64(s.quantile((float64(i) + 0.5) / n))
	}
	s.mean /= n
	return s, nil
}

func (s *sizes) readTail(r io.Reader) error {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = 2
	var cum float64
	for first := true; ; first = false {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		if first {
			continue // the header
		}
		n, err1 := strconv.Atoi(rec[0])
		w, err2 := strconv.ParseFloat(rec[1], 64)
		if err1 != nil || err2 != nil || n < workload.MaxMessage || n > 1<<30 || !(w > 0) ||
			len(s.tail) > 0 && n <= s.tail[len(s.tail)-1] {
			return fmt.Errorf("bad row %q", rec)
		}
		cum += w
		s.tail = append(s.tail, n)
		s.tailCDF = append(s.tailCDF, cum)
	}
	if len(s.tail) == 0 {
		return fmt.Errorf("no rows")
	}
	for i := range s.tailCDF {
		s.tailCDF[i] /= cum
	}
	s.tailCDF[len(s.tailCDF)-1] = 1
	return nil
}

// name is the workload's name.
func (s *sizes) name() string { return s.d.Name() }

// sample draws a size.
func (s *sizes) sample(r *rand.Rand) int {
	n := s.d.Sample(r)
	if n < workload.MaxMessage || len(s.tail) == 0 {
		return n
	}
	return s.fromTail(r.Float64())
}

func (s *sizes) fromTail(u float64) int {
	i := sort.Search(len(s.tailCDF), func(i int) bool { return s.tailCDF[i] > u })
	return s.tail[min(i, len(s.tail)-1)]
}

// quantile is the smallest size whose cumulative probability is at
// least q.
func (s *sizes) quantile(q float64) int {
	if len(s.tail) == 0 || q <= s.below {
		return s.d.Quantile(q)
	}
	u := (q - s.below) / (1 - s.below)
	i := sort.SearchFloat64s(s.tailCDF, u)
	return s.tail[min(i, len(s.tail)-1)]
}

// bounds are the sizes at the n quantiles i/n, distinct.
func (s *sizes) bounds(n int) []int {
	var out []int
	for i := 1; i <= n; i++ {
		q := float64(i) / float64(n)
		if b := s.quantile(q); len(out) == 0 || b > out[len(out)-1] {
			out = append(out, b)
		}
	}
	return out
}

package workload

import (
	"embed"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// MaxMessage is the largest message Homa carries, in bytes. Distribution
// sizes above it are truncated to it.
const MaxMessage = 1_000_000

//go:embed testdata/w*.csv
var workloadFiles embed.FS

// names lists the embedded workloads in order.
var names = []string{"w1", "w2", "w3", "w4", "w5"}

// ErrUnknownWorkload is returned by [Named] for a name it does not know.
var ErrUnknownWorkload = errors.New("workload: unknown workload")

// ErrEmptyDist is returned by [Parse] when no size has a positive weight.
var ErrEmptyDist = errors.New("workload: distribution has no positive weight")

// ParseError reports a malformed line of a CSV input: a distribution file
// or a samples file.
type ParseError struct {
	Line int   // 1-based line number
	Err  error // what was wrong with it
}

func (e *ParseError) Error() string {
	return fmt.Sprintf("workload: line %d: %v", e.Line, e.Err)
}

func (e *ParseError) Unwrap() error { return e.Err }

// Dist is a discrete message-size distribution, already truncated to
// [MaxMessage]. Make one with [Named], [Fixed] or [Parse]; the zero value
// has no sizes. A Dist is immutable and safe for concurrent use; Sample is
// as safe as the generator passed to it.
type Dist struct {
	name    string
	sizes   []int     // ascending, distinct, each in [1, MaxMessage]
	cdf     []float64 // cdf[i] = P(size <= sizes[i]); the last is exactly 1
	mean    float64   // mean of the truncated distribution
	rawMean float64   // mean before truncation
}

// Names returns the names [Named] accepts, in order.
func Names() []string { return slices.Clone(names) }

// Named returns the workload called name: "w1" to "w5", in any case.
func Named(name string) (*Dist, error) {
	key := strings.ToLower(strings.TrimSpace(name))
	if !slices.Contains(names, key) {
		return nil, fmt.Errorf("%w %q (want one of %s)", ErrUnknownWorkload, name, strings.Join(names, ", "))
	}
	f, err := workloadFiles.Open("testdata/" + key + ".csv")
	if err != nil {
		return nil, fmt.Errorf("workload %s: %w", key, err)
	}
	defer f.Close()
	return Parse(key, f)
}

// Fixed returns the distribution whose every message is size bytes. A
// size outside [1, MaxMessage] is clamped into it.
func Fixed(size int) *Dist { return FixedLarge(min(size, MaxMessage)) }

// FixedLarge is Fixed without the bound of one Homa message, for RPC
// layers that carry longer messages in several: every message is size
// bytes, at least 1.
func FixedLarge(size int) *Dist {
	size = max(size, 1)
	return &Dist{
		name:    "fixed-" + strconv.Itoa(size),
		sizes:   []int{size},
		cdf:     []float64{1},
		mean:    float64(size),
		rawMean: float64(size),
	}
}

// Parse reads a distribution from CSV lines "length_bytes,weight". A first
// line that does not start with a digit is taken as a header and skipped.
// Lengths must be at least 1 and weights non-negative and finite; lines may
// come in any order and a length may repeat (its weights add up).
func Parse(name string, r io.Reader) (*Dist, error) {
	weights, err := readWeights(r)
	if err != nil {
		return nil, err
	}
	return fromWeights(name, weights)
}

// readWeights reads the CSV lines of a distribution into size -> weight.
func readWeights(r io.Reader) (map[int]float64, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = 2
	cr.TrimLeadingSpace = true
	weights := make(map[int]float64)
	for first := true; ; first = false {
		rec, err := cr.Read()
		if err == io.EOF {
			return weights, nil
		}
		if err != nil {
			return nil, csvError(err)
		}
		line, _ := cr.FieldPos(0)
		if first && isHeader(rec[0]) {
			continue
		}
		size, err := strconv.Atoi(rec[0])
		if err != nil || size < 1 {
			return nil, &ParseError{Line: line, Err: fmt.Errorf("bad length %q", rec[0])}
		}
		w, err := strconv.ParseFloat(rec[1], 64)
		if err != nil || w < 0 || math.IsInf(w, 0) || math.IsNaN(w) {
			return nil, &ParseError{Line: line, Err: fmt.Errorf("bad weight %q", rec[1])}
		}
		weights[size] += w
	}
}

// csvError turns an error of encoding/csv into a *ParseError.
func csvError(err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return &ParseError{Line: pe.Line, Err: pe.Err}
	}
	return err
}

// isHeader reports whether a first field is a column name rather than a
// number.
func isHeader(field string) bool {
	return field == "" || field[0] < '0' || field[0] > '9'
}

// fromWeights builds a Dist from size -> weight, truncating sizes to
// MaxMessage.
func fromWeights(name string, weights map[int]float64) (*Dist, error) {
	var total, rawSum float64
	trunc := make(map[int]float64, len(weights))
	for s, w := range weights {
		if w == 0 {
			continue
		}
		total += w
		rawSum += float64(s) * w
		trunc[min(s, MaxMessage)] += w
	}
	if len(trunc) == 0 || total <= 0 || math.IsInf(total, 0) {
		return nil, fmt.Errorf("%w: %s", ErrEmptyDist, name)
	}
	d := &Dist{name: name, rawMean: rawSum / total}
	for s := range trunc {
		d.sizes = append(d.sizes, s)
	}
	slices.Sort(d.sizes)
	d.cdf = make([]float64, len(d.sizes))
	var cum, sum float64
	for i, s := range d.sizes {
		cum += trunc[s]
		sum += float64(s) * trunc[s]
		d.cdf[i] = cum / total
	}
	d.cdf[len(d.cdf)-1] = 1
	d.mean = sum / total
	return d, nil
}

// Name returns the workload's name: "w1" to "w5" for [Named] ones,
// "fixed-N" for [Fixed](N).
func (d *Dist) Name() string { return d.name }

// Sample draws a size from the distribution using r (the package-wide
// generator when r is nil). The result is in [1, MaxMessage].
func (d *Dist) Sample(r *rand.Rand) int {
	if len(d.sizes) == 0 {
		return 1
	}
	var u float64
	if r != nil {
		u = r.Float64()
	} else {
		u = rand.Float64()
	}
	// u is in [0, 1): pick the first size whose cumulative probability
	// exceeds it, so each size is chosen with its own probability.
	i := sort.Search(len(d.cdf), func(i int) bool { return d.cdf[i] > u })
	return d.sizes[min(i, len(d.sizes)-1)]
}

// Mean returns the mean message size in bytes of the truncated
// distribution, the one [Dist.Sample] draws from. It is what a sender
// puts on the wire per message on average.
func (d *Dist) Mean() float64 { return d.mean }

// Quantile returns the smallest size s with P(size <= s) >= q. q is meant
// to be in (0, 1]; smaller values (and NaN) give the smallest size and
// larger ones the largest.
func (d *Dist) Quantile(q float64) int {
	if len(d.sizes) == 0 {
		return 1
	}
	if !(q > 0) {
		return d.sizes[0]
	}
	i := sort.SearchFloat64s(d.cdf, q)
	return d.sizes[min(i, len(d.sizes)-1)]
}

// Max returns the largest size the distribution produces.
func (d *Dist) Max() int {
	if len(d.sizes) == 0 {
		return 1
	}
	return d.sizes[len(d.sizes)-1]
}

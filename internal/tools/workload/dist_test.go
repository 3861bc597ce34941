package workload

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func mustNamed(t interface {
	Helper()
	Fatalf(string, ...any)
}, name string) *Dist {
	t.Helper()
	d, err := Named(name)
	if err != nil {
		t.Fatalf("Named(%q): %v", name, err)
	}
	return d
}

// relClose reports whether got is within tol (a fraction) of want.
func relClose(got, want, tol float64) bool {
	return math.Abs(got-want) <= tol*math.Abs(want)
}

// TestNamedMeans checks the means against the workloads' README: the
// README gives the mean before truncation, which Mean reports after it.
// The truncated means were computed separately from the CSV files.
func TestNamedMeans(t *testing.T) {
	cases := []struct {
		name      string
		readme    float64 // README mean before truncation
		truncated float64 // mean after truncation to MaxMessage
		points    int     // README "points"
	}{
		{"w1", 189, 189.2, 300},
		{"w2", 442, 433.3, 152},
		{"w3", 2.9e3, 2423.1, 842},
		{"w4", 128e3, 60175.1, 460},
		{"w5", 2.6e6, 385315.5, 400},
	}
	for _, c := range cases {
		d := mustNamed(t, c.name)
		if !relClose(d.rawMean, c.readme, 0.03) {
			t.Errorf("%s: mean before truncation %.1f, README says ~%.0f", c.name, d.rawMean, c.readme)
		}
		if !relClose(d.Mean(), c.truncated, 0.001) {
			t.Errorf("%s: Mean() = %.1f, want %.1f", c.name, d.Mean(), c.truncated)
		}
		if d.Mean() > d.rawMean*(1+1e-12) {
			t.Errorf("%s: truncated mean %.1f above untruncated %.1f", c.name, d.Mean(), d.rawMean)
		}
		// Truncation merges the sizes at or above MaxMessage into one.
		raw := rawWeights(t, c.name)
		want := 0
		for s := range raw {
			if s < MaxMessage {
				want++
			}
		}
		if len(raw) != c.points {
			t.Errorf("%s: %d points, README says %d", c.name, len(raw), c.points)
		}
		if len(raw) > want {
			want++
		}
		if len(d.sizes) != want {
			t.Errorf("%s: %d distinct sizes after truncation, want %d", c.name, len(d.sizes), want)
		}
		if d.Name() != c.name {
			t.Errorf("Name() = %q, want %q", d.Name(), c.name)
		}
		if d.Max() > MaxMessage {
			t.Errorf("%s: Max() = %d above MaxMessage", c.name, d.Max())
		}
	}
	if d := mustNamed(t, "w1"); d.Max() != 100000 {
		t.Errorf("w1 Max() = %d, want 100000 (nothing truncated)", d.Max())
	}
	if d := mustNamed(t, "w5"); d.Max() != MaxMessage {
		t.Errorf("w5 Max() = %d, want %d", d.Max(), MaxMessage)
	}
}

func TestNamedCaseAndErrors(t *testing.T) {
	for _, n := range []string{"W3", " w3", "w3"} {
		if d, err := Named(n); err != nil || d.Name() != "w3" {
			t.Errorf("Named(%q) = %v, %v", n, d, err)
		}
	}
	for _, n := range []string{"", "w0", "w6", "w1.csv", "../w1"} {
		if _, err := Named(n); !errors.Is(err, ErrUnknownWorkload) {
			t.Errorf("Named(%q) error = %v, want ErrUnknownWorkload", n, err)
		}
	}
	if got := Names(); !slices.Equal(got, []string{"w1", "w2", "w3", "w4", "w5"}) {
		t.Errorf("Names() = %v", got)
	}
}

func TestFixed(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, c := range []struct{ in, want int }{{100, 100}, {0, 1}, {-5, 1}, {2_000_000, MaxMessage}} {
		d := Fixed(c.in)
		if d.Sample(r) != c.want || d.Max() != c.want || d.Mean() != float64(c.want) ||
			d.Quantile(0.01) != c.want || d.Quantile(1) != c.want {
			t.Errorf("Fixed(%d): sample %d max %d mean %v", c.in, d.Sample(r), d.Max(), d.Mean())
		}
	}
	if d := FixedLarge(4_000_000); d.Sample(r) != 4_000_000 || d.Max() != 4_000_000 || FixedLarge(0).Max() != 1 {
		t.Errorf("FixedLarge(4000000): sample %d max %d", d.Sample(r), d.Max())
	}
	if Fixed(100).Name() != "fixed-100" {
		t.Errorf("Fixed(100).Name() = %q", Fixed(100).Name())
	}
}

func TestParse(t *testing.T) {
	in := "length_bytes,weight\n10,1\n2000000,1\n5, 2\n10,1\n3000000,0\n"
	d, err := Parse("t", strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(d.sizes, []int{5, 10, MaxMessage}) {
		t.Errorf("sizes %v", d.sizes)
	}
	if !slices.Equal(d.cdf, []float64{0.4, 0.8, 1}) {
		t.Errorf("cdf %v", d.cdf)
	}
	if want := (5*2 + 10*2 + 1e6) / 5.0; d.Mean() != want {
		t.Errorf("Mean %v, want %v", d.Mean(), want)
	}
	if want := (5*2 + 10*2 + 2e6) / 5.0; d.rawMean != want {
		t.Errorf("mean before truncation %v, want %v", d.rawMean, want)
	}
	bad := []struct {
		in   string
		line int
	}{
		{"a,b\n0,1\n", 2},
		{"1,1\n2,-1\n", 2},
		{"1,1\n2,x\n", 2},
		{"1,1\n2,NaN\n", 2},
		{"1,1\n2\n", 2},
		{"1,1,1\n", 1},
	}
	for _, c := range bad {
		_, err := Parse("t", strings.NewReader(c.in))
		var pe *ParseError
		if !errors.As(err, &pe) || pe.Line != c.line {
			t.Errorf("Parse(%q) error = %v, want ParseError on line %d", c.in, err, c.line)
		}
	}
	for _, in := range []string{"", "length_bytes,weight\n", "5,0\n"} {
		if _, err := Parse("t", strings.NewReader(in)); !errors.Is(err, ErrEmptyDist) {
			t.Errorf("Parse(%q) error = %v, want ErrEmptyDist", in, err)
		}
	}
}

// rawWeights reads an embedded workload file without truncating it.
func rawWeights(t *testing.T, name string) map[int]float64 {
	t.Helper()
	f, err := workloadFiles.Open("testdata/" + name + ".csv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := readWeights(f)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// variance returns the variance of the size under d.
func (d *Dist) variance() float64 {
	var v, prev float64
	for i, s := range d.sizes {
		dev := float64(s) - d.mean
		v += (d.cdf[i] - prev) * dev * dev
		prev = d.cdf[i]
	}
	return v
}

// prob returns P(size <= s) under d.
func (d *Dist) prob(s int) float64 {
	i, found := slices.BinarySearch(d.sizes, s)
	if found {
		return d.cdf[i]
	}
	if i == 0 {
		return 0
	}
	return d.cdf[i-1]
}

// TestSampleMatchesDistribution draws a fixed number of samples with a
// fixed seed and compares the empirical distribution with the CDF: a
// chi-square statistic over about 20 equal-probability cells, and the
// largest CDF gap at every size (a Kolmogorov-Smirnov distance).
func TestSampleMatchesDistribution(t *testing.T) {
	const n = 100_000
	for _, name := range Names() {
		d := mustNamed(t, name)
		r := rand.New(rand.NewPCG(42, uint64(len(name))))
		got := make([]int, n)
		var sum float64
		for i := range got {
			got[i] = d.Sample(r)
			if got[i] < 1 || got[i] > MaxMessage {
				t.Fatalf("%s: sample %d out of range", name, got[i])
			}
			sum += float64(got[i])
		}
		slices.Sort(got)
		checkChiSquare(t, d, got)
		checkKS(t, d, got)
		// The sample mean is within 4.5 standard errors of Mean().
		if m, se := sum/n, math.Sqrt(d.variance()/n); math.Abs(m-d.Mean()) > 4.5*se {
			t.Errorf("%s: sample mean %.1f, Mean() %.1f, standard error %.1f", name, m, d.Mean(), se)
		}
	}
}

// checkChiSquare compares counts in the cells delimited by Bounds(d, 20)
// with their expected counts.
func checkChiSquare(t *testing.T, d *Dist, sorted []int) {
	t.Helper()
	n := float64(len(sorted))
	var chi float64
	prevP, prevIdx := 0.0, 0
	bounds := Bounds(d, 20)
	for _, b := range bounds {
		idx, _ := slices.BinarySearch(sorted, b+1)
		observed := float64(idx - prevIdx)
		expected := (d.prob(b) - prevP) * n
		chi += (observed - expected) * (observed - expected) / expected
		prevP, prevIdx = d.prob(b), idx
	}
	// The 99.9th percentile of chi-square with 19 degrees of freedom is
	// 43.8; fewer cells only lower it.
	if df := len(bounds) - 1; chi > 43.8 {
		t.Errorf("%s: chi-square %.1f with %d degrees of freedom", d.Name(), chi, df)
	}
}

// checkKS checks the largest gap between the empirical and true CDFs.
func checkKS(t *testing.T, d *Dist, sorted []int) {
	t.Helper()
	n := float64(len(sorted))
	var worst float64
	for _, s := range d.sizes {
		idx, _ := slices.BinarySearch(sorted, s+1)
		worst = max(worst, math.Abs(float64(idx)/n-d.prob(s)))
	}
	// The KS critical value at 0.1% is about 1.95/sqrt(n).
	if limit := 1.95 / math.Sqrt(n); worst > limit {
		t.Errorf("%s: KS distance %.4f above %.4f", d.Name(), worst, limit)
	}
}

func TestQuantileDefinition(t *testing.T) {
	for _, name := range Names() {
		d := mustNamed(t, name)
		for _, q := range []float64{1e-9, 0.01, 0.1, 0.25, 0.5, 0.9, 0.99, 0.999, 1} {
			s := d.Quantile(q)
			if d.prob(s) < q-1e-12 {
				t.Errorf("%s: Quantile(%v) = %d has P(size<=s) = %v < q", name, q, s, d.prob(s))
			}
			if s > d.sizes[0] && d.prob(s-1) >= q {
				t.Errorf("%s: Quantile(%v) = %d not the smallest", name, q, s)
			}
		}
		if d.Quantile(1) != d.Max() || d.Quantile(2) != d.Max() {
			t.Errorf("%s: Quantile(1) = %d, Max %d", name, d.Quantile(1), d.Max())
		}
		if d.Quantile(0) != d.sizes[0] || d.Quantile(math.NaN()) != d.sizes[0] {
			t.Errorf("%s: Quantile(0) = %d", name, d.Quantile(0))
		}
	}
	if got := mustNamed(t, "w1").Quantile(0.3); got != 8 {
		t.Errorf("w1 Quantile(0.3) = %d, want 8 (31%% of messages are 8 bytes)", got)
	}
}

func TestQuantileMonotone(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		name := rapid.SampledFrom(Names()).Draw(t, "name")
		d := mustNamed(t, name)
		q1 := rapid.Float64Range(0, 1).Draw(t, "q1")
		q2 := rapid.Float64Range(q1, 1).Draw(t, "q2")
		if a, b := d.Quantile(q1), d.Quantile(q2); a > b {
			t.Fatalf("%s: Quantile(%v) = %d > Quantile(%v) = %d", name, q1, a, q2, b)
		}
	})
}

func TestBounds(t *testing.T) {
	for _, name := range Names() {
		d := mustNamed(t, name)
		for _, n := range []int{-1, 0, 1, 2, 10, 20, 100} {
			b := Bounds(d, n)
			if len(b) == 0 || len(b) > max(n, 1) || b[len(b)-1] != d.Max() {
				t.Fatalf("%s: Bounds(%d) = %v, Max %d", name, n, b, d.Max())
			}
			for i := 1; i < len(b); i++ {
				if b[i] <= b[i-1] {
					t.Fatalf("%s: Bounds(%d) not strictly increasing: %v", name, n, b)
				}
			}
		}
	}
	// 31% of W1 is 8 bytes: quantiles 0.1, 0.2 and 0.3 are all 8.
	b := Bounds(mustNamed(t, "w1"), 10)
	if b[0] != 8 || b[1] <= 8 || len(b) != 8 {
		t.Errorf("w1 Bounds(10) = %v, want 8 once and 8 bounds", b)
	}
	if got := Bounds(Fixed(100), 10); !slices.Equal(got, []int{100}) {
		t.Errorf("Bounds(Fixed(100), 10) = %v", got)
	}
	d, _ := Parse("t", strings.NewReader("1,1\n2,1\n3,1\n4,1\n"))
	if got := Bounds(d, 4); !slices.Equal(got, []int{1, 2, 3, 4}) {
		t.Errorf("Bounds(uniform 1..4, 4) = %v", got)
	}
	if got := Bounds(d, 2); !slices.Equal(got, []int{2, 4}) {
		t.Errorf("Bounds(uniform 1..4, 2) = %v", got)
	}
}

package benchplot

import (
	"errors"
	"math"
	"slices"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// CDF is one protocol's round-trip times, for WriteCDF.
type CDF struct {
	Name string
	RTTs []time.Duration // in any order
}

// ErrNoRTTs is returned by WriteCDF when no series has a round-trip time.
var ErrNoRTTs = errors.New("benchplot: no round-trip times to plot")

// A curve of WriteCDF has about cdfPoints points, evenly spaced
// quantiles, and a point for each of its cdfTail slowest RTTs.
const (
	cdfPoints = 400
	cdfTail   = 100
)

// WriteCDF draws the distribution of each series' round-trip times as a
// cumulative distribution: the fraction of RPCs (y, 0 to 1) that took at
// most a time (x, microseconds, logarithmic), one step curve per series,
// with a dotted line at the median. The format follows the file name's
// extension: .svg or .png.
func WriteCDF(path, title string, series []CDF) error {
	if _, err := format(path); err != nil {
		return err
	}
	fig, err := newCDFFigure(title, series)
	if err != nil {
		return err
	}
	return fig.write(path)
}

// newCDFFigure lays out the plot of WriteCDF.
func newCDFFigure(title string, series []CDF) (*figure, error) {
	lo, hi := math.Inf(1), 0.0
	for _, s := range series {
		for _, d := range s.RTTs {
			if us := micros(d); us > 0 {
				lo, hi = math.Min(lo, us), math.Max(hi, us)
			}
		}
	}
	if hi == 0 {
		return nil, ErrNoRTTs
	}
	p, leg := newPlot(title)
	p.X.Label.Text = "Round-trip time (µs)"
	p.X.Scale = plot.LogScale{}
	p.X.Min, p.X.Max = lo/1.1, hi*1.1
	p.X.Tick.Marker = plot.TickerFunc(logTicks)
	p.Y.Label.Text = "Fraction of RPCs"
	p.Y.Min, p.Y.Max = 0, 1
	median := plotter.NewFunction(func(float64) float64 { return 0.5 })
	median.LineStyle = draw.LineStyle{Color: palette[len(palette)-1], Width: vg.Points(0.6), Dashes: []vg.Length{vg.Points(1), vg.Points(2)}}
	p.Add(median)
	for i, s := range series {
		pts := cdfSteps(s.RTTs)
		if len(pts) == 0 {
			continue
		}
		l := &plotter.Line{XYs: pts}
		l.LineStyle = draw.LineStyle{Color: palette[i%len(palette)], Width: vg.Points(lineWidth)}
		p.Add(l)
		leg.Add(s.Name, l)
	}
	return &figure{plot: p, legend: leg}, nil
}

// cdfSteps returns the points of the empirical distribution of rtts (in
// microseconds, the positive ones), at most about cdfPoints of them: for
// each kept sample, the fraction of samples at or below it.
func cdfSteps(rtts []time.Duration) plotter.XYs {
	us := make([]float64, 0, len(rtts))
	for _, d := range rtts {
		if v := micros(d); v > 0 {
			us = append(us, v)
		}
	}
	slices.Sort(us)
	n := len(us)
	if n == 0 {
		return nil
	}
	// The slowest cdfTail samples, where a few slow RPCs matter, are
	// all drawn; the others every step-th.
	tail := n - min(n, cdfTail)
	step := max(1, (tail+cdfPoints-1)/cdfPoints)
	pts := make(plotter.XYs, 0, tail/step+cdfTail+1)
	pts = append(pts, plotter.XY{X: us[0], Y: 0})
	for i := 0; i < n; i++ {
		if i >= tail || i%step == step-1 {
			pts = append(pts, plotter.XY{X: us[i], Y: float64(i+1) / float64(n)})
		}
	}
	return pts
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

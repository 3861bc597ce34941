// Package benchplot draws the slowdown figures of workload benchmarks.
//
// A figure shows, for each protocol (a [Series]), the median and 99th
// percentile slowdown of its RPCs by message size class, the way the Homa
// papers present them. Slowdown is an RPC's round-trip time divided by the
// unloaded round-trip time of a message of the same size (see package
// workload), so 1 is the best possible value; the y axis is logarithmic
// and starts at 1.
//
// The x axis is not message size itself but the cumulative fraction of
// messages: each size bucket ([workload.Bucket]) takes up a width equal to
// its share of the messages, and ticks at bucket boundaries carry the
// bucket's largest size ("100", "1K", "1M"). A workload in which most
// messages are short thus gives most of the width to short messages,
// which is where most RPCs are. Each bucket's values are drawn at the
// middle of its width.
//
// Medians are solid lines and 99th percentiles dashed lines of the same
// colour; the legend names the protocols and the two line styles.
package benchplot

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"image/color"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/homa-go/homa/internal/tools/workload"
)

// Series is one protocol's results: its name, shown in the legend, and its
// buckets from [workload.Summarize].
type Series struct {
	Name    string
	Buckets []workload.Bucket
}

// ErrFormat is returned for a file name whose extension is neither .svg
// nor .png.
var ErrFormat = errors.New("benchplot: unsupported image format (want .svg or .png)")

// ErrNoData is returned when no bucket of any series has a positive
// slowdown to draw (for example when the RPCs were summarized without a
// baseline).
var ErrNoData = errors.New("benchplot: no slowdown to plot")

// Figure geometry and style.
const (
	figWidth     = 6.5 * vg.Inch
	figHeight    = 3.6 * vg.Inch
	pngDPI       = 200
	lineWidth    = 1.4 // points
	markerRadius = 1.8 // points
	legendGap    = 10  // points between the axes and the legend
	minLabelGap  = 0.075
)

// palette holds colours that stay distinct for colour-blind readers and in
// greyscale print.
var palette = []color.Color{
	color.RGBA{0x00, 0x72, 0xb2, 0xff}, // blue
	color.RGBA{0xd5, 0x5e, 0x00, 0xff}, // vermillion
	color.RGBA{0x00, 0x9e, 0x73, 0xff}, // bluish green
	color.RGBA{0xcc, 0x79, 0xa7, 0xff}, // reddish purple
	color.RGBA{0xe6, 0x9f, 0x00, 0xff}, // orange
	color.RGBA{0x56, 0xb4, 0xe9, 0xff}, // sky blue
	color.RGBA{0x55, 0x55, 0x55, 0xff}, // grey
}

var dashes = []vg.Length{vg.Points(5), vg.Points(2.5)}

// WriteSlowdown draws slowdown (log y) against message size class (x:
// cumulative fraction of messages, ticks labelled with the bucket MaxSize,
// the way the Homa papers do), one p50 and one p99 line per series. The
// format follows the file name's extension: .svg or .png.
func WriteSlowdown(path, title string, series []Series) error {
	if _, err := format(path); err != nil {
		return err
	}
	fig, err := newFigure(title, series)
	if err != nil {
		return err
	}
	return fig.write(path)
}

// format returns the image format of path, its extension: .svg or .png.
func format(path string) (string, error) {
	ext := strings.ToLower(filepath.Ext(path))
	if ext != ".svg" && ext != ".png" {
		return "", fmt.Errorf("%w: %q", ErrFormat, path)
	}
	return ext, nil
}

// CheckPath reports whether a figure can be written to path, before the
// work that makes it: the format its extension names, and that the file
// (or, if it does not exist, its folder) is writable. It leaves an
// existing file as it is and creates none.
func CheckPath(path string) error {
	if _, err := format(path); err != nil {
		return err
	}
	if f, err := os.OpenFile(path, os.O_WRONLY, 0); err == nil {
		return f.Close()
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	dir := filepath.Dir(path)
	probe, err := os.CreateTemp(dir, ".benchplot-probe-*")
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return fmt.Errorf("cannot create a file in %s: %w", dir, err)
	}
	probe.Close()
	return os.Remove(probe.Name())
}

// write renders the figure into the file path, in the format its
// extension names; on failure no file is left.
func (fig *figure) write(path string) error {
	ext, err := format(path)
	if err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("benchplot: %w", err)
	}
	werr := fig.render(f, ext)
	if cerr := f.Close(); werr == nil && cerr != nil {
		werr = fmt.Errorf("benchplot: %w", cerr)
	}
	if werr != nil {
		os.Remove(path)
	}
	return werr
}

// figure is a plot with its legend, drawn beside the axes.
type figure struct {
	plot   *plot.Plot
	legend plot.Legend
}

// newFigure lays out the plot for the series.
func newFigure(title string, series []Series) (*figure, error) {
	xs := positions(series)
	lo, hi, ok := slowdownRange(series)
	if !ok {
		return nil, ErrNoData
	}
	p, leg := newPlot(title)
	styleAxes(p, xs, lo, hi)
	for i, s := range series {
		c := palette[i%len(palette)]
		p50l, p50m := curve(points(s, xs, func(b workload.Bucket) float64 { return b.Slowdown50 }), c, false)
		p99l, p99m := curve(points(s, xs, func(b workload.Bucket) float64 { return b.Slowdown99 }), c, true)
		p.Add(p99l, p99m, p50l, p50m)
		l, _ := curve(nil, c, false)
		leg.Add(s.Name, l)
	}
	leg.Add("")
	p50l, p50m := curve(nil, color.Black, false)
	leg.Add("median (p50)", p50l, p50m)
	p99l, p99m := curve(nil, color.Black, true)
	leg.Add("p99", p99l, p99m)
	return &figure{plot: p, legend: leg}, nil
}

// newPlot returns a plot with the title and a grid, and an empty legend,
// styled alike for every figure.
func newPlot(title string) (*plot.Plot, plot.Legend) {
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font.Size = vg.Points(11)
	p.Title.Padding = vg.Points(6)
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle.Font.Size = vg.Points(10)
		a.Tick.Label.Font.Size = vg.Points(9)
		a.Padding = 0
	}
	grid := plotter.NewGrid()
	grid.Vertical.Color = color.Gray{0xe4}
	grid.Vertical.Width = vg.Points(0.5)
	grid.Horizontal.Color = color.Gray{0xd8}
	grid.Horizontal.Width = vg.Points(0.5)
	p.Add(grid)

	leg := plot.NewLegend()
	leg.TextStyle.Font.Size = vg.Points(9)
	leg.ThumbnailWidth = vg.Points(22)
	leg.Padding = vg.Points(2)
	leg.Left = true
	leg.Top = true
	return p, leg
}

// styleAxes sets the axes' ranges, scales, ticks and labels.
func styleAxes(p *plot.Plot, xs map[int]edge, lo, hi float64) {
	p.X.Label.Text = "Message size (bytes); width proportional to share of messages"
	p.X.Min, p.X.Max = 0, 1
	p.X.Tick.Marker = plot.ConstantTicks(sizeTicks(xs))
	p.Y.Label.Text = "Slowdown"
	p.Y.Scale = plot.LogScale{}
	p.Y.Min = math.Min(1, lo)
	p.Y.Max = math.Max(2, hi*1.25)
	p.Y.Tick.Marker = plot.TickerFunc(logTicks)
}

// edge is where a bucket sits on the x axis: from the previous bucket's
// boundary to its own.
type edge struct{ left, right float64 }

// positions places every bucket bound found in the series on the x axis:
// its right edge is the mean over the series of the bucket's cumulative
// fraction, its left edge the right edge of the next smaller bound (0 for
// the smallest). Sharing positions keeps the series' points aligned.
func positions(series []Series) map[int]edge {
	sum := make(map[int]float64)
	n := make(map[int]int)
	for _, s := range series {
		for _, b := range s.Buckets {
			sum[b.MaxSize] += clamp01(b.Fraction)
			n[b.MaxSize]++
		}
	}
	bounds := make([]int, 0, len(sum))
	for b := range sum {
		bounds = append(bounds, b)
	}
	sort.Ints(bounds)
	xs := make(map[int]edge, len(bounds))
	left := 0.0
	for _, b := range bounds {
		right := math.Max(left, sum[b]/float64(n[b]))
		xs[b] = edge{left, right}
		left = right
	}
	return xs
}

func clamp01(v float64) float64 {
	if !(v > 0) {
		return 0
	}
	return math.Min(v, 1)
}

// plottable reports whether v can go on the log axis.
func plottable(v float64) bool { return v > 0 && !math.IsInf(v, 0) }

// slowdownRange returns the smallest and largest positive slowdowns of
// non-empty buckets, and whether there are any.
func slowdownRange(series []Series) (lo, hi float64, ok bool) {
	lo, hi = math.Inf(1), 0
	for _, s := range series {
		for _, b := range s.Buckets {
			if b.Count == 0 {
				continue
			}
			for _, v := range []float64{b.Slowdown50, b.Slowdown99} {
				if plottable(v) {
					lo, hi, ok = math.Min(lo, v), math.Max(hi, v), true
				}
			}
		}
	}
	return lo, hi, ok
}

// points returns one point per non-empty bucket of s with a plottable
// value, at the middle of the bucket's width.
func points(s Series, xs map[int]edge, value func(workload.Bucket) float64) plotter.XYs {
	var pts plotter.XYs
	for _, b := range s.Buckets {
		v := value(b)
		if b.Count == 0 || !plottable(v) {
			continue
		}
		e := xs[b.MaxSize]
		pts = append(pts, plotter.XY{X: (e.left + e.right) / 2, Y: v})
	}
	return pts
}

// curve returns a line through pts in colour c and a marker at each
// point: a solid line with filled dots, or a dashed line with rings.
func curve(pts plotter.XYs, c color.Color, dashed bool) (*plotter.Line, *plotter.Scatter) {
	l := &plotter.Line{XYs: pts}
	l.LineStyle = draw.LineStyle{Color: c, Width: vg.Points(lineWidth)}
	m := &plotter.Scatter{XYs: pts}
	m.GlyphStyle = draw.GlyphStyle{Color: c, Radius: vg.Points(markerRadius), Shape: draw.CircleGlyph{}}
	if dashed {
		l.LineStyle.Dashes = dashes
		m.GlyphStyle.Shape = draw.RingGlyph{}
	}
	return l, m
}

// sizeTicks returns a tick at every bucket boundary, labelled with the
// bucket's size where the label has room.
func sizeTicks(xs map[int]edge) []plot.Tick {
	bounds := make([]int, 0, len(xs))
	for b := range xs {
		bounds = append(bounds, b)
	}
	sort.Ints(bounds)
	ticks := []plot.Tick{{Value: 0}}
	lastLabel := -1 // index in ticks of the last labelled tick
	for _, b := range bounds {
		x := xs[b].right
		ticks = append(ticks, plot.Tick{Value: x})
		label := sizeLabel(b)
		if lastLabel >= 0 {
			prev := ticks[lastLabel]
			if prev.Label == label {
				continue
			}
			if x-prev.Value < minLabelGap {
				if b != bounds[len(bounds)-1] {
					continue
				}
				// The largest size is always labelled; it displaces a
				// neighbour that is too close.
				ticks[lastLabel].Label = ""
			}
		}
		ticks[len(ticks)-1].Label = label
		lastLabel = len(ticks) - 1
	}
	return ticks
}

// sizeLabel formats a size in bytes the way figure axes do: exact below
// 1000, else in the largest decimal unit (K = 1000, M, G, T) that keeps
// the number below 1000, with one decimal below 10 and none above ("1.4K",
// "15K", "150K", "1M").
func sizeLabel(n int) string {
	if n < 1000 {
		return strconv.Itoa(n)
	}
	v := float64(n)
	units := []string{"K", "M", "G", "T"}
	for i, u := range units {
		v /= 1000
		r := roundSignificant(v)
		if r < 1000 || i == len(units)-1 {
			return strconv.FormatFloat(r, 'f', -1, 64) + u
		}
	}
	return strconv.Itoa(n)
}

// roundSignificant rounds v >= 1 to a whole number, or to one decimal
// below 10: two significant digits for small values, more for large ones.
func roundSignificant(v float64) float64 {
	if v >= 10 {
		return math.Round(v)
	}
	return math.Round(v*10) / 10
}

// logTicks returns ticks for a log axis: labelled at 1, 2 and 5 times
// powers of ten, unlabelled at the other integer multiples.
func logTicks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	if !(lo > 0) || !(hi >= lo) {
		return nil
	}
	for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
		decade := math.Pow(10, e)
		for m := 1; m <= 9; m++ {
			v := float64(m) * decade
			if v < lo*(1-1e-9) || v > hi*(1+1e-9) {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 || m == 2 || m == 5 {
				t.Label = strconv.FormatFloat(v, 'f', -1, 64)
			}
			ticks = append(ticks, t)
		}
	}
	return ticks
}

// render draws the figure in the given format (".svg" or ".png") to w.
// A panic inside the plotting library becomes an error.
func (f *figure) render(w io.Writer, ext string) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("benchplot: drawing failed: %v", r)
		}
	}()
	var c vg.CanvasWriterTo
	if ext == ".svg" {
		c = vgsvg.New(figWidth, figHeight)
	} else {
		c = vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(figWidth, figHeight), vgimg.UseDPI(pngDPI))}
	}
	f.draw(draw.New(c))
	var t *titled
	if ext == ".svg" {
		// The figure's title, as the SVG's own, for readers and tools
		// that do not look at the picture.
		t = &titled{w: w, title: f.plot.Title.Text}
		w = t
	}
	if _, err := c.WriteTo(w); err != nil {
		return fmt.Errorf("benchplot: writing image: %w", err)
	}
	if t != nil && !t.done { // no <svg> tag: pass what came through
		if _, err := t.w.Write(t.head); err != nil {
			return fmt.Errorf("benchplot: writing image: %w", err)
		}
	}
	return nil
}

// titled passes an SVG through, inserting a <title> element right after
// the opening <svg ...> tag.
type titled struct {
	w     io.Writer
	title string
	head  []byte // what came before the end of the opening tag
	done  bool
}

func (t *titled) Write(p []byte) (int, error) {
	if t.done {
		return t.w.Write(p)
	}
	t.head = append(t.head, p...)
	i := bytes.Index(t.head, []byte("<svg"))
	if i < 0 {
		return len(p), nil
	}
	j := bytes.IndexByte(t.head[i:], '>')
	if j < 0 {
		return len(p), nil
	}
	t.done = true
	end := i + j + 1
	var b bytes.Buffer
	b.Write(t.head[:end])
	b.WriteString("<title>")
	xml.EscapeText(&b, []byte(t.title))
	b.WriteString("</title>")
	b.Write(t.head[end:])
	if _, err := t.w.Write(b.Bytes()); err != nil {
		return 0, err
	}
	return len(p), nil
}

// draw paints dc white and puts the plot on its left and the legend to
// its right, top aligned with the data area.
func (f *figure) draw(dc draw.Canvas) {
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	legRect := f.legend.Rectangle(dc)
	legWidth := legRect.Max.X - legRect.Min.X
	plotArea := draw.Crop(dc, 0, -(legWidth + 2*vg.Points(legendGap)), 0, 0)
	f.plot.Draw(plotArea)
	data := f.plot.DataCanvas(plotArea)
	legArea := draw.Canvas{
		Canvas: dc.Canvas,
		Rectangle: vg.Rectangle{
			Min: vg.Point{X: plotArea.Max.X + vg.Points(legendGap), Y: data.Min.Y},
			Max: vg.Point{X: dc.Max.X, Y: data.Max.Y},
		},
	}
	f.legend.Draw(legArea)
}

package benchplot

import (
	"bytes"
	"encoding/xml"
	"errors"
	"image/png"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/homa-go/homa/internal/tools/workload"
)

// synthetic returns buckets for a protocol whose slowdown grows from
// small at short messages to large at long ones, built through the real
// pipeline: samples drawn from d, a baseline, and Summarize.
func synthetic(t *testing.T, d *workload.Dist, seed uint64, short, long float64) []workload.Bucket {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 1))
	unloaded := func(size int) time.Duration {
		return 15*time.Microsecond + time.Duration(size)*8*time.Nanosecond
	}
	var calib, loaded []workload.Sample
	for range 2000 {
		s := d.Sample(r)
		calib = append(calib, workload.Sample{Size: s, RTT: unloaded(s)})
	}
	for range 20000 {
		s := d.Sample(r)
		frac := math.Log(float64(s)) / math.Log(float64(d.Max()))
		slow := 1 + (short+(long-short)*frac)*r.ExpFloat64()
		loaded = append(loaded, workload.Sample{Size: s, RTT: time.Duration(float64(unloaded(s)) * slow)})
	}
	return workload.Summarize(loaded, workload.Bounds(d, 10), workload.NewBaseline(calib))
}

func testSeries(t *testing.T) []Series {
	d, err := workload.Named("w4")
	if err != nil {
		t.Fatal(err)
	}
	return seriesFor(t, d)
}

func seriesFor(t *testing.T, d *workload.Dist) []Series {
	return []Series{
		{"homa", synthetic(t, d, 1, 0.05, 0.8)},
		{"homa-udp", synthetic(t, d, 2, 0.1, 1.2)},
		{"tcp", synthetic(t, d, 3, 2, 0.6)},
		{"grpc", synthetic(t, d, 4, 4, 1)},
	}
}

// outDir is where the figures go: BENCHPLOT_DIR if set (to look at them),
// else a temporary directory.
func outDir(t *testing.T) string {
	if dir := os.Getenv("BENCHPLOT_DIR"); dir != "" {
		return dir
	}
	return t.TempDir()
}

func TestWriteSlowdownSVG(t *testing.T) {
	path := filepath.Join(outDir(t), "slowdown.svg")
	if err := WriteSlowdown(path, "W4, 50% load", testSeries(t)); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	texts, root := parseSVG(t, data)
	if root != "svg" {
		t.Errorf("root element %q, want svg", root)
	}
	all := strings.Join(texts, "\n")
	for _, want := range []string{"homa", "homa-udp", "tcp", "grpc", "p99", "W4, 50% load", "Slowdown", "1M", "1", "10"} {
		if !slices.Contains(texts, want) && !strings.Contains(all, want) {
			t.Errorf("figure has no text %q; texts: %q", want, texts)
		}
	}
	if !bytes.Contains(data, []byte("stroke-dasharray")) {
		t.Error("no dashed line in the figure")
	}
	if !bytes.Contains(data, []byte("<title>W4, 50% load</title>")) {
		t.Error("the SVG has no <title> naming the figure")
	}
}

// parseSVG checks that data is well-formed XML and returns its text nodes
// and the name of its root element.
func parseSVG(t *testing.T, data []byte) (texts []string, root string) {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(data))
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			if root == "" {
				root = tok.Name.Local
			}
		case xml.CharData:
			if s := strings.TrimSpace(string(tok)); s != "" {
				texts = append(texts, s)
			}
		}
	}
	return texts, root
}

func TestWriteSlowdownPNG(t *testing.T) {
	path := filepath.Join(outDir(t), "slowdown.png")
	if err := WriteSlowdown(path, "W4, 50% load", testSeries(t)); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("PNG does not decode: %v", err)
	}
	b := img.Bounds()
	if wantW := int(math.Round(float64(figWidth / vg.Inch * pngDPI))); b.Dx() != wantW || b.Dy() < 100 {
		t.Fatalf("PNG is %dx%d, want width %d", b.Dx(), b.Dy(), wantW)
	}
	// Something was drawn in each series' colour.
	for i := range 4 {
		want := palette[i]
		found := false
		for y := b.Min.Y; y < b.Max.Y && !found; y++ {
			for x := b.Min.X; x < b.Max.X && !found; x++ {
				found = img.At(x, y) == want || sameRGB(img.At(x, y), want)
			}
		}
		if !found {
			t.Errorf("no pixel in the colour of series %d", i)
		}
	}
}

// TestWriteSlowdownEveryWorkload draws a figure for each workload and a
// fixed size, whose buckets differ a lot (W1 has a heavy atom at 8 bytes,
// a fixed size has a single bucket).
func TestWriteSlowdownEveryWorkload(t *testing.T) {
	dir := outDir(t)
	dists := []*workload.Dist{workload.Fixed(1000)}
	for _, name := range workload.Names() {
		d, err := workload.Named(name)
		if err != nil {
			t.Fatal(err)
		}
		dists = append(dists, d)
	}
	for _, d := range dists {
		path := filepath.Join(dir, "slowdown-"+d.Name()+".png")
		if err := WriteSlowdown(path, d.Name(), seriesFor(t, d)[:2]); err != nil {
			t.Fatalf("%s: %v", d.Name(), err)
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		_, err = png.Decode(f)
		f.Close()
		if err != nil {
			t.Errorf("%s: PNG does not decode: %v", d.Name(), err)
		}
	}
}

func sameRGB(a, b interface{ RGBA() (r, g, b, a uint32) }) bool {
	r1, g1, b1, _ := a.RGBA()
	r2, g2, b2, _ := b.RGBA()
	return r1 == r2 && g1 == g2 && b1 == b2
}

func TestWriteSlowdownErrors(t *testing.T) {
	dir := t.TempDir()
	series := testSeries(t)
	if err := WriteSlowdown(filepath.Join(dir, "x.pdf"), "", series); !errors.Is(err, ErrFormat) {
		t.Errorf("pdf: %v, want ErrFormat", err)
	}
	noBase := []Series{{"homa", []workload.Bucket{{MaxSize: 100, Fraction: 1, Count: 5, P50: time.Millisecond}}}}
	path := filepath.Join(dir, "empty.svg")
	if err := WriteSlowdown(path, "", noBase); !errors.Is(err, ErrNoData) {
		t.Errorf("no slowdowns: %v, want ErrNoData", err)
	}
	if err := WriteSlowdown(path, "", nil); !errors.Is(err, ErrNoData) {
		t.Errorf("no series: %v, want ErrNoData", err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("a failed call left %s behind", path)
	}
	if err := WriteSlowdown(filepath.Join(dir, "missing", "x.svg"), "", series); err == nil {
		t.Error("writing into a missing directory succeeded")
	}
}

// TestSizeTicks checks the x axis ticks: one per bucket boundary at the
// cumulative fraction, labels only where they fit, the largest always.
func TestSizeTicks(t *testing.T) {
	series := []Series{
		{"a", []workload.Bucket{{MaxSize: 100, Fraction: 0.30}, {MaxSize: 150, Fraction: 0.32}, {MaxSize: 1000, Fraction: 0.6}, {MaxSize: 999_000, Fraction: 0.97}, {MaxSize: 1_000_000, Fraction: 1}}},
		{"b", []workload.Bucket{{MaxSize: 100, Fraction: 0.50}, {MaxSize: 1000, Fraction: 0.6}}},
	}
	xs := positions(series)
	if e := xs[100]; e.left != 0 || e.right != 0.4 {
		t.Errorf("bucket 100 at %+v, want [0, 0.4] (mean of the series)", e)
	}
	if e := xs[150]; e.left != 0.4 || e.right != 0.4 {
		t.Errorf("bucket 150 at %+v, want [0.4, 0.4] (never left of its neighbour)", e)
	}
	ticks := sizeTicks(xs)
	var got []string
	for _, tk := range ticks {
		got = append(got, tk.Label)
	}
	want := []string{"", "100", "", "1K", "", "1M"}
	if !slices.Equal(got, want) || len(ticks) != 6 || ticks[5].Value != 1 {
		t.Errorf("tick labels %q, want %q", got, want)
	}
}

func TestSizeLabel(t *testing.T) {
	cases := map[int]string{
		8: "8", 100: "100", 999: "999", 1000: "1K", 1430: "1.4K", 2860: "2.9K",
		9960: "10K", 10_000: "10K", 15_300: "15K", 100_000: "100K", 999_400: "999K",
		999_600: "1M", 1_000_000: "1M", 1_500_000: "1.5M", 29_400_000: "29M",
	}
	for n, want := range cases {
		if got := sizeLabel(n); got != want {
			t.Errorf("sizeLabel(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestLogTicks(t *testing.T) {
	var labels []string
	for _, tk := range logTicks(1, 60) {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	if want := []string{"1", "2", "5", "10", "20", "50"}; !slices.Equal(labels, want) {
		t.Errorf("labels %q, want %q", labels, want)
	}
	if got := logTicks(0.5, 3); got[0].Value != 0.5 || got[0].Label != "0.5" {
		t.Errorf("ticks below 1: %+v", got)
	}
	if logTicks(0, 10) != nil || logTicks(5, 1) != nil {
		t.Error("ticks for an invalid range")
	}
}

// TestCDFSteps: the curve climbs from 0 to 1 through the sorted RTTs,
// every one of the slowest kept, the rest thinned to a few hundred.
func TestCDFSteps(t *testing.T) {
	rtts := make([]time.Duration, 10000)
	for i := range rtts {
		rtts[i] = time.Duration(len(rtts)-i) * time.Microsecond // reversed
	}
	pts := cdfSteps(rtts)
	if pts[0] != (plotter.XY{X: 1, Y: 0}) || pts[len(pts)-1] != (plotter.XY{X: 10000, Y: 1}) {
		t.Errorf("from %v to %v, want (1, 0) to (10000, 1)", pts[0], pts[len(pts)-1])
	}
	for i := 1; i < len(pts); i++ {
		if pts[i].X <= pts[i-1].X || pts[i].Y <= pts[i-1].Y {
			t.Fatalf("point %d %v after %v: not rising", i, pts[i], pts[i-1])
		}
		if want := pts[i].X / 10000; math.Abs(pts[i].Y-want) > 1e-9 {
			t.Fatalf("point %v: fraction %v, want %v", pts[i], pts[i].Y, want)
		}
	}
	if n := len(pts); n < cdfPoints || n > cdfPoints+cdfTail+1 {
		t.Errorf("%d points, want about %d + %d", n, cdfPoints, cdfTail)
	}
	if got := cdfSteps([]time.Duration{3 * time.Microsecond}); len(got) != 2 || got[1] != (plotter.XY{X: 3, Y: 1}) {
		t.Errorf("one RTT: %v", got)
	}
	if got := cdfSteps(nil); got != nil {
		t.Errorf("no RTTs: %v", got)
	}
}

// TestWriteCDF writes both formats, and refuses a figure of nothing.
func TestWriteCDF(t *testing.T) {
	dir := t.TempDir()
	series := []CDF{
		{Name: "homa", RTTs: []time.Duration{10 * time.Microsecond, 12 * time.Microsecond, 30 * time.Microsecond}},
		{Name: "tcp", RTTs: []time.Duration{40 * time.Microsecond, 45 * time.Microsecond, 900 * time.Microsecond}},
	}
	for _, name := range []string{"cdf.svg", "cdf.png"} {
		path := filepath.Join(dir, name)
		if err := WriteCDF(path, "latency, 100-byte requests", series); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(path)
		if err != nil || len(data) < 1000 {
			t.Errorf("%s: %d bytes, %v", name, len(data), err)
		}
		if strings.HasSuffix(name, ".svg") && (!bytes.Contains(data, []byte("homa")) || !bytes.Contains(data, []byte("Round-trip time"))) {
			t.Errorf("%s lacks the legend or the axis label", name)
		}
	}
	if err := WriteCDF(filepath.Join(dir, "none.svg"), "x", []CDF{{Name: "homa"}}); !errors.Is(err, ErrNoRTTs) {
		t.Errorf("no RTTs: %v", err)
	}
	if err := WriteCDF(filepath.Join(dir, "x.pdf"), "x", series); !errors.Is(err, ErrFormat) {
		t.Errorf(".pdf: %v", err)
	}
}

// TestCheckPath: a writable new or existing file passes, untouched; a
// missing folder, an unwritable file and a wrong extension do not.
func TestCheckPath(t *testing.T) {
	dir := t.TempDir()
	if err := CheckPath(filepath.Join(dir, "new.svg")); err != nil {
		t.Errorf("new file: %v", err)
	}
	existing := filepath.Join(dir, "old.png")
	if err := os.WriteFile(existing, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := CheckPath(existing); err != nil {
		t.Errorf("existing file: %v", err)
	}
	if data, _ := os.ReadFile(existing); string(data) != "keep" {
		t.Errorf("CheckPath changed the file: %q", data)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("CheckPath left files: %v", entries)
	}
	if err := CheckPath(filepath.Join(dir, "no", "such", "dir.svg")); err == nil {
		t.Error("missing folder: no error")
	}
	if err := CheckPath(filepath.Join(dir, "x.pdf")); !errors.Is(err, ErrFormat) {
		t.Errorf(".pdf: %v", err)
	}
}

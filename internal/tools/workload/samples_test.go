package workload

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

func TestSamplesRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		in := rapid.SliceOf(rapid.Custom(func(t *rapid.T) Sample {
			return Sample{
				Size: rapid.IntRange(0, MaxMessage).Draw(t, "size"),
				RTT:  time.Duration(rapid.Int64Range(0, 1<<62).Draw(t, "rtt")),
			}
		})).Draw(t, "samples")
		var buf bytes.Buffer
		if err := WriteSamples(&buf, in); err != nil {
			t.Fatal(err)
		}
		out, err := ReadSamples(&buf)
		if err != nil {
			t.Fatal(err)
		}
		if len(out) != len(in) {
			t.Fatalf("read %d samples, wrote %d", len(out), len(in))
		}
		for i := range in {
			if in[i] != out[i] {
				t.Fatalf("sample %d: wrote %v, read %v", i, in[i], out[i])
			}
		}
	})
}

func TestWriteSamplesFormat(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteSamples(&buf, []Sample{{100, 12345 * time.Nanosecond}, {8, time.Millisecond}}); err != nil {
		t.Fatal(err)
	}
	if want := "size,rtt_ns\n100,12345\n8,1000000\n"; buf.String() != want {
		t.Errorf("WriteSamples wrote %q, want %q", buf.String(), want)
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestSamplesErrors(t *testing.T) {
	if err := WriteSamples(failWriter{}, []Sample{{1, 1}}); err == nil {
		t.Error("WriteSamples to a failing writer succeeded")
	}
	cases := []struct {
		in     string
		line   int
		header bool
	}{
		{"", 1, true},
		{"size,rtt\n1,2\n", 1, true},
		{"1,2\n", 1, true},
		{"size,rtt_ns\n1,2\nx,3\n", 3, false},
		{"size,rtt_ns\n1,-2\n", 2, false},
		{"size,rtt_ns\n-1,2\n", 2, false},
		{"size,rtt_ns\n1,2\n3\n", 3, false},
		{"size,rtt_ns\n1,99999999999999999999\n", 2, false},
	}
	for _, c := range cases {
		_, err := ReadSamples(strings.NewReader(c.in))
		var pe *ParseError
		if !errors.As(err, &pe) || pe.Line != c.line || errors.Is(err, ErrSamplesHeader) != c.header {
			t.Errorf("ReadSamples(%q) error = %v, want line %d (header error %v)", c.in, err, c.line, c.header)
		}
	}
	if s, err := ReadSamples(strings.NewReader("size,rtt_ns\n")); err != nil || len(s) != 0 {
		t.Errorf("header only: %v, %v", s, err)
	}
}

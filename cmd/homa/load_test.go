package main

import (
	"strings"
	"testing"
	"time"

	"github.com/homa-go/homa/bench"
)

func testLoad(size, count, warmup int, timeout time.Duration) loadFlags {
	return loadFlags{size: size, count: count, warmup: warmup, timeout: timeout}
}

func TestLoadFlagsCheck(t *testing.T) {
	l := testLoad(100, 5000, -1, time.Second)
	if err := l.check(); err != nil || l.warmup != 500 {
		t.Errorf("check: %v, warmup %d; want nil, 500", err, l.warmup)
	}
	big := testLoad(4_000_000, 1, 0, time.Second)
	big.maxSize = bench.MaxSize() // bench: erpc carries more than one Homa message
	if err := big.check(); err != nil {
		t.Errorf("check of a 4 MB bench size: %v", err)
	}
	big.size = bench.MaxSize() + 1
	if err := big.check(); err == nil {
		t.Errorf("check of %d bytes = nil, want an error", big.size)
	}
	for _, bad := range []loadFlags{
		testLoad(0, 1, 0, time.Second),
		testLoad(1_000_001, 1, 0, time.Second),
		testLoad(1, 0, 0, time.Second),
		testLoad(1, 1, 0, 0),
	} {
		if err := bad.check(); err == nil {
			t.Errorf("check(%+v) = nil, want an error", bad)
		}
	}
}

func TestWriteReport(t *testing.T) {
	s := bench.Summary{Count: 1000, Size: 100, Elapsed: 2 * time.Second,
		Min: time.Microsecond, Median: 500 * time.Microsecond, P99: 990 * time.Microsecond,
		P999: 999 * time.Microsecond, Max: 1000 * time.Microsecond}
	var b strings.Builder
	writeReport(&b, s)
	const report = "rtt µs: min 1.0  median 500.0  p99 990.0  p99.9 999.0  max 1000.0\n" +
		"throughput: 500 RPCs/s, 0.40 Mbit/s of payload each way\n"
	if b.String() != report {
		t.Errorf("report:\n%s\nwant:\n%s", b.String(), report)
	}
}

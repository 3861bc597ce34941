package workload

import (
	"math"
	"math/rand/v2"
	"time"
)

// RatePerSecond returns the RPC arrival rate that puts loadMbps megabits
// (10^6 bits) per second of request payload on the wire when request
// sizes follow d: loadMbps * 10^6 / 8 / d.Mean(). Headers are not
// counted. It is 0 when loadMbps is not positive.
func RatePerSecond(d *Dist, loadMbps float64) float64 {
	mean := d.Mean()
	if !(loadMbps > 0) || !(mean > 0) {
		return 0
	}
	return loadMbps * 1e6 / 8 / mean
}

// NextGap draws the time to the next arrival of a Poisson process with
// perSecond arrivals per second: an exponential gap with mean
// 1/perSecond seconds, using r (the package-wide generator when r is
// nil). A rate that is not positive means no arrivals: the gap is the
// longest Duration.
func NextGap(r *rand.Rand, perSecond float64) time.Duration {
	if !(perSecond > 0) {
		return time.Duration(math.MaxInt64)
	}
	var e float64
	if r != nil {
		e = r.ExpFloat64()
	} else {
		e = rand.ExpFloat64()
	}
	ns := e / perSecond * float64(time.Second)
	if ns >= math.MaxInt64 {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(ns)
}

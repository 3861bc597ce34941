package lab

import (
	"fmt"
	"strconv"
	"strings"
)

// Rate is a link rate in bits per second.
type Rate uint64

// rateUnits are the suffixes ParseRate accepts, longest first so that
// "gbit" is not read as "bit".
var rateUnits = []struct {
	suffix string
	mult   float64
}{
	{"tbit", 1e12}, {"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}, {"bit", 1},
}

// RateError is a rate ParseRate cannot read.
type RateError struct {
	Text   string
	Reason string
}

func (e *RateError) Error() string {
	return fmt.Sprintf("lab: rate %q: %s", e.Text, e.Reason)
}

// ParseRate reads a rate the way tc writes it: a number and one of the
// units bit, kbit, mbit, gbit, tbit (decimal multiples), such as "1gbit"
// or "2.5mbit". The unit is required: tc reads a bare number as bytes per
// second, which is too easy to get wrong.
func ParseRate(s string) (Rate, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	for _, u := range rateUnits {
		num, ok := strings.CutSuffix(t, u.suffix)
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(num, 64)
		if err != nil {
			return 0, &RateError{s, "not a number before " + u.suffix}
		}
		bits := v * u.mult
		if !(bits >= minRate && bits <= maxRate) { // also rejects NaN
			return 0, &RateError{s, fmt.Sprintf("out of range %v..%v", Rate(minRate), Rate(maxRate))}
		}
		return Rate(bits), nil
	}
	return 0, &RateError{s, "needs a unit: bit, kbit, mbit, gbit or tbit"}
}

// The rates a Lab accepts.
const (
	minRate = 100e3 // below this a single packet takes 0.1 s
	maxRate = 100e9
)

// Mbps is the rate in megabits per second.
func (r Rate) Mbps() float64 { return float64(r) / 1e6 }

// String writes the rate in the largest unit that keeps it whole where
// possible: "1gbit", "250mbit", "1500kbit".
func (r Rate) String() string {
	for _, u := range rateUnits {
		if m := uint64(u.mult); uint64(r) >= m && uint64(r)%m == 0 {
			return strconv.FormatUint(uint64(r)/m, 10) + u.suffix
		}
	}
	return strconv.FormatUint(uint64(r), 10) + "bit"
}

// Set implements flag.Value.
func (r *Rate) Set(s string) error {
	v, err := ParseRate(s)
	if err != nil {
		return err
	}
	*r = v
	return nil
}

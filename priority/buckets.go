package priority

import "math/bits"

// The Estimator counts bytes in a log-linear histogram of message lengths:
// lengths below 2*subBuckets each have a bucket of their own, and every
// octave [2^e, 2^(e+1)) above is split into subBuckets equal buckets, so a
// bucket is at most 1/subBuckets (1.6%) wider than its smallest length.
// Cutoffs are always bucket upper bounds, so a message's priority depends
// only on its bucket and the histogram predicts exactly how the bytes of
// the counted messages split between levels.
const (
	subBits    = 6
	subBuckets = 1 << subBits

	// numBuckets covers every length up to MaxMessage: the octaves
	// 2^subBits+1 .. 2^(maxBits-1), after 2*subBuckets exact buckets.
	maxBits    = 20 // bits.Len32(MaxMessage)
	numBuckets = (maxBits - subBits + 1) * subBuckets
)

// bucketOf returns the histogram bucket of a message length of at most
// MaxMessage.
func bucketOf(n uint32) int {
	if n < 2*subBuckets {
		return int(n)
	}
	e := bits.Len32(n) - 1 // n is in [2^e, 2^(e+1)), e > subBits
	shift := e - subBits
	return shift*subBuckets + int(n>>shift) // n>>shift is in [subBuckets, 2*subBuckets)
}

// bucketMax returns the largest length in bucket b.
func bucketMax(b int) uint32 {
	if b < 2*subBuckets {
		return uint32(b)
	}
	shift := b/subBuckets - 1
	top := uint32(b%subBuckets + subBuckets + 1)
	return top<<shift - 1
}

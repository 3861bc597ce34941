// Package workload describes message-size workloads and turns measured
// round trips into the slowdown statistics used to evaluate Homa.
//
// # Distributions
//
// A [Dist] is a discrete message-size distribution. [Named] returns one of
// the five workloads of the Homa papers' evaluations, W1 (Facebook
// memcached) to W5 (DCTCP web search), read from CSV files of
// "length_bytes,weight" lines embedded in the package. Weights are
// relative and are normalised by their sum. Lengths above [MaxMessage]
// (1,000,000 bytes, the largest Homa message) are truncated to it, and
// their weight moves to MaxMessage. Every method of a Dist, including
// [Dist.Mean], describes the truncated distribution: the sizes that
// [Dist.Sample] actually returns. For W1 nothing is truncated (mean about
// 189 B); for W5 the mean falls from about 2.56 MB before truncation to
// about 385 KB after it.
//
// # Slowdown
//
// The slowdown of one RPC is its round-trip time divided by the round-trip
// time of an RPC of the same size on an otherwise idle system (the
// unloaded RTT). A slowdown of 1 means the RPC suffered no queueing or
// contention at all; 10 means it took ten times as long as it would have
// alone. Slowdown, unlike raw RTT, can be compared across message sizes,
// so one figure shows how a transport treats short and long messages.
//
// The unloaded RTT comes from a [Baseline] built from calibration samples
// taken one RPC at a time. Sizes are grouped into bins spaced
// logarithmically ([BaselineBinsPerDecade] bins per factor of ten); each
// bin contributes one point: the median size and the median RTT of the
// samples in it. Between points the baseline is linear in log(size), so a
// size halfway (geometrically) between two points gets the RTT halfway
// between theirs. Below the smallest point it is flat, since the cost of a
// tiny message does not depend on its size. Above the largest point it
// grows linearly in size along the last segment's slope (never downward),
// because the unloaded RTT of a long message is dominated by its
// transmission time. When every bin's median rises with size the baseline
// is monotone.
//
// Over its own Baseline, a transport's slowdown says what load costs it;
// a transport that is faster unloaded reads a larger slowdown than a slower
// one at the same latency. [Fastest] takes the shortest unloaded RTT of
// several baselines at each size, one denominator for every transport, so
// that their slowdowns compare as their RTTs do.
//
// # Buckets
//
// [Summarize] groups RPCs by size into buckets whose upper bounds
// normally come from [Bounds]: the distribution's quantiles 1/n, 2/n, ...,
// 1, so that each bucket holds about the same share of messages. Heavy
// atoms collapse neighbouring quantiles into one bound (31% of W1's
// messages are 8 bytes), so there can be fewer than n buckets. For each
// bucket it reports the RTT percentiles and the slowdown percentiles of
// its RPCs, together with the cumulative fraction of all RPCs at or below
// its bound: plotted against that fraction, the x axis is linear in the
// number of messages, as in the Homa papers' figures.
//
// # Load
//
// [RatePerSecond] converts an offered load in Mbit/s of request payload
// into an RPC arrival rate, and [NextGap] draws exponential inter-arrival
// gaps for an open-loop Poisson generator.
//
// The package is pure: it starts no goroutines and reads no clock, and all
// randomness comes from the math/rand/v2 generator passed in, so a fixed
// seed gives a fixed sequence.
package workload

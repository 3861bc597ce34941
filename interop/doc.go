// Package interop checks that this Homa implementation speaks Homa the way
// the Linux Homa kernel module does. It holds tests only (see README.md):
//
//   - wire vectors written by hand from shared/spec/WIRE.md, checked in both
//     directions against homa/wire;
//   - every packet of the Linux captures in testdata/linux-captures
//     rebuilt from the text of its decoded log and compared with the
//     captured bytes;
//   - behaviour vectors: the captures' scenarios replayed against a
//     homa.Endpoint on the in-memory network, the test playing the raw
//     peer and checking that the endpoint answers as the module did;
//   - a live suite against a Linux Homa echo server named by
//     HOMA_INTEROP_PEER, also run against this implementation's own
//     server on loopback.
package interop

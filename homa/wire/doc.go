// Package wire encodes and decodes Homa packets: the bytes that follow the
// IP header of an IP protocol 146 datagram, laid out as the current Linux
// implementation sends them (shared/spec/WIRE.md is the authoritative table).
// All multi-byte fields are big-endian.
//
// Every packet starts with a 28-byte common header:
//
//	offset size field
//	     0    2 source port
//	     2    2 destination port
//	     4    4 sequence (DATA: offset of the send the packet was cut from)
//	     8    3 unused, zero
//	    11    1 type
//	    12    1 doff (TCP-style data offset, a TSO aid)
//	    13    1 flags
//	    14    2 window, zero
//	    16    2 checksum (not used by Homa)
//	    18    2 urgent
//	    20    8 sender id: the RPC id as the sender of the packet knows it
//
// and continues with a type-specific part (offsets from the start of the
// packet; the header lengths are the constants DataLen, GrantLen, ...):
//
//	DATA     28 message length, 32 incoming, 36 piggybacked ack (client id,
//	         server port), 46 cutoff version, 48 retransmit, 49 pad (3),
//	         52 offset, 56 payload
//	GRANT    28 offset, 32 priority                              (33 bytes)
//	RESEND   28 offset, 32 length, 36 priority                   (37 bytes)
//	CUTOFFS  28 eight cutoffs, 60 cutoff version                 (62 bytes)
//	ACK      28 num_acks, 30 five entries of {client id, server port}
//	         (always 80 bytes)
//	RPC_UNKNOWN, BUSY, NEED_ACK (and Linux's debugging FREEZE): the common
//	header only (28 bytes)
//
// Each packet type (Data, Grant, Resend, Cutoffs, Ack, Bare) has the same
// three methods: Append encodes the packet onto a byte slice, Len reports
// its encoded length and Parse decodes it, reporting the bytes consumed or
// an Error. Parse checks structure only (length and type), never panics and
// never allocates; semantic checks such as the message length limit belong
// to the caller. Fixed-size types accept trailing bytes (Ethernet padding)
// and consume only their header; a DATA packet's Payload aliases the parsed
// buffer. Packet is a union of all types for tools and tests.
//
// Doff, Flags and Urgent carry markers of Linux's TCP-hijacking support and
// are ignored by receivers. A zero value in a Common given to Append means
// "the Linux value": DoffData for DATA, DoffControl for the other types,
// FlagsLinux and UrgentLinux. Parse reports the bytes as found, so a parsed
// packet re-encodes to the bytes it came from, except for the unused and
// window bytes and DATA's pad, which Parse ignores and Append writes as zero.
package wire

package netio

import (
	"encoding/binary"
	"net/netip"
)

// ShardOf is the shard, 0..n-1, that owns the packets of peer in a group
// of n Conns sharing one port (OpenUDPGroup): the peer's IPv4 address
// (an IPv6 address folded to 32 bits by XOR of its four words) XOR its
// port, XOR its own top 16 bits, modulo n. The group's kernel program
// computes the same function from each packet's source address and Homa
// source port, so the engine knows which shard a peer's packets reach.
// Consecutive ports of one host go round the shards. n <= 1 gives 0.
func ShardOf(peer netip.AddrPort, n int) int {
	if n <= 1 {
		return 0
	}
	a := peer.Addr().Unmap()
	var x uint32
	if a.Is4() {
		b := a.As4()
		x = binary.BigEndian.Uint32(b[:])
	} else {
		b := a.As16()
		x = binary.BigEndian.Uint32(b[0:]) ^ binary.BigEndian.Uint32(b[4:]) ^
			binary.BigEndian.Uint32(b[8:]) ^ binary.BigEndian.Uint32(b[12:])
	}
	x ^= uint32(peer.Port())
	x ^= x >> 16
	return int(x % uint32(n))
}

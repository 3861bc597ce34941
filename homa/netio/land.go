package netio

// Landing reads (Packet.Land). Socket Conns have the kernel Scatter a
// datagram over Buf[:LandAt], Land and Buf[LandAt:] and then only count
// where its bytes went (split); the in-memory network copies it the same
// way (Scatter). gather undoes a landing, for a datagram that must be
// rearranged in Buf.

// lands reports whether a read into p lands the datagram: p has a Land
// and a Buf with room after the first LandAt bytes. A Buf of LandAt bytes
// or fewer can only hold datagrams that are not landed anyway.
func (p *Packet) lands() bool { return len(p.Land) > 0 && len(p.Buf) > LandAt }

// split sets N and Landed for a landing read that received h bytes:
// Buf[:LandAt] is filled first, then Land, then Buf[LandAt:].
func (p *Packet) split(h int) {
	if h <= LandAt {
		p.N, p.Landed = h, 0
		return
	}
	p.Landed = min(h-LandAt, len(p.Land))
	p.N = h - p.Landed
}

// Scatter copies datagram into p as a read does: landed when p lands,
// else whole into Buf. It returns false, leaving N and Landed alone, when
// the datagram does not fit.
func (p *Packet) Scatter(datagram []byte) bool {
	if !p.lands() || len(datagram) <= LandAt {
		if len(datagram) > len(p.Buf) {
			return false
		}
		p.N, p.Landed = copy(p.Buf, datagram), 0
		return true
	}
	landed := min(len(datagram)-LandAt, len(p.Land))
	rest := datagram[LandAt+landed:]
	if LandAt+len(rest) > len(p.Buf) {
		return false
	}
	copy(p.Buf, datagram[:LandAt])
	copy(p.Land, datagram[LandAt:LandAt+landed])
	copy(p.Buf[LandAt:], rest)
	p.N, p.Landed = LandAt+len(rest), landed
	return true
}

// gather moves the landed bytes back between Buf[:LandAt] and the rest,
// so that Buf[:N] holds the whole datagram and Landed is 0. It returns
// false, changing nothing, when the whole does not fit in Buf.
func (p *Packet) gather() bool {
	if p.Landed == 0 {
		return true
	}
	if p.N+p.Landed > len(p.Buf) {
		return false
	}
	copy(p.Buf[LandAt+p.Landed:], p.Buf[LandAt:p.N]) // overlapping: copy moves
	copy(p.Buf[LandAt:], p.Land[:p.Landed])
	p.N, p.Landed = p.N+p.Landed, 0
	return true
}

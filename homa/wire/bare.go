package wire

// Lengths of the packet types that carry the common header only.
const (
	RPCUnknownLen = CommonLen
	BusyLen       = CommonLen
	NeedAckLen    = CommonLen
)

// Bare is a packet that is only a common header: RPC_UNKNOWN, BUSY or
// NEED_ACK (and FREEZE, which Linux sends for debugging). Its type is
// Common.Type.
type Bare struct {
	Common
}

// Append appends the encoded packet, of type p.Type, to b. It panics if
// p.Type is not a header-only type.
func (p *Bare) Append(b []byte) []byte { return appendBare(b, &p.Common, p.Type) }

// Len returns CommonLen.
func (p *Bare) Len() int { return CommonLen }

// Parse decodes a header-only packet from b and returns CommonLen; trailing
// bytes are ignored. It fails with ErrWrongType for a packet of another
// type. On error p is unchanged.
func (p *Bare) Parse(b []byte) (int, error) { return parseBare(b, &p.Common) }

// appendBare appends c as a header-only packet of type t.
func appendBare(b []byte, c *Common, t Type) []byte {
	if !t.bare() {
		panic("wire: " + t.String() + " is not a header-only packet type")
	}
	b, h := extend(b, CommonLen)
	c.put(h, t)
	return b
}

// parseBare decodes a header-only packet into c.
func parseBare(b []byte, c *Common) (int, error) {
	t, err := PeekType(b)
	if err != nil {
		return 0, err
	}
	if !t.bare() {
		return 0, ErrWrongType
	}
	c.get(b)
	return CommonLen, nil
}

package wire

import "fmt"

// Type is the packet type, byte 11 of the common header.
type Type uint8

// Packet types.
const (
	TypeData       Type = 0x10
	TypeGrant      Type = 0x11
	TypeResend     Type = 0x12
	TypeRPCUnknown Type = 0x13
	TypeBusy       Type = 0x14
	TypeCutoffs    Type = 0x15
	// TypeFreeze is a Linux debugging packet (common header only). It
	// parses, but Homa endpoints ignore it.
	TypeFreeze  Type = 0x16
	TypeNeedAck Type = 0x17
	TypeAck     Type = 0x18
)

// String returns the name of t as the Linux tools print it ("DATA",
// "NEED_ACK", ...), or "UNKNOWN(0x42)" for a byte that is not a type. It
// does not allocate for known types.
func (t Type) String() string {
	switch t {
	case TypeData:
		return "DATA"
	case TypeGrant:
		return "GRANT"
	case TypeResend:
		return "RESEND"
	case TypeRPCUnknown:
		return "RPC_UNKNOWN"
	case TypeBusy:
		return "BUSY"
	case TypeCutoffs:
		return "CUTOFFS"
	case TypeFreeze:
		return "FREEZE"
	case TypeNeedAck:
		return "NEED_ACK"
	case TypeAck:
		return "ACK"
	}
	return fmt.Sprintf("UNKNOWN(0x%02x)", uint8(t))
}

// known reports whether t is one of the types above.
func (t Type) known() bool { return t >= TypeData && t <= TypeAck }

// bare reports whether packets of type t consist of the common header only.
func (t Type) bare() bool {
	switch t {
	case TypeRPCUnknown, TypeBusy, TypeNeedAck, TypeFreeze:
		return true
	}
	return false
}

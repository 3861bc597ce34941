package wire

// Error is the error type returned by the parsers. Its values are comparable
// constants, so errors.Is(err, ErrShort) works and returning one does not
// allocate.
type Error uint8

const (
	// ErrShort means the packet is shorter than the header of its type (or
	// than the common header).
	ErrShort Error = iota + 1
	// ErrUnknownType means the type byte names no Homa packet type.
	ErrUnknownType
	// ErrWrongType means a typed parser was given a packet of another type,
	// such as a GRANT handed to Data.Parse.
	ErrWrongType
)

// Error returns a short description of e.
func (e Error) Error() string {
	switch e {
	case ErrShort:
		return "wire: packet shorter than its header"
	case ErrUnknownType:
		return "wire: unknown packet type"
	case ErrWrongType:
		return "wire: packet type does not match the parser"
	}
	return "wire: unknown error"
}

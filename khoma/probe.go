package khoma

import (
	"errors"
	"fmt"
	"syscall"
	"unsafe"
)

// ErrUnknownUAPI means the loaded Homa module answers none of the
// supported generations' HOMAIOCINFO requests: its user API is older
// (before October 2025) or newer than this package knows, and the
// layouts of its arguments cannot be trusted.
var ErrUnknownUAPI = errors.New("khoma: the Homa module speaks an unsupported user API")

// detectUAPI finds the user API of the module behind k, a fresh socket:
// it issues each supported generation's HOMAIOCINFO, newest first, and
// returns the first the module accepts. A module rejects a request
// number it does not know with EINVAL (ENOTTY where the socket layer
// refuses it) before reading the argument, and no generation's
// HOMAIOCINFO number is another generation's ioctl, so a probe that
// fails has no effect. Any other failure is returned as it is: it is
// not evidence of a version.
func detectUAPI(k kernel, a cABI) (UAPI, error) {
	var refused []error
	for _, u := range uapis {
		_, err := readInfo(k, u, a, 0)
		if err == nil {
			return u, nil
		}
		if !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOTTY) {
			return 0, fmt.Errorf("khoma: HOMAIOCINFO %#x (%v): %w", u.HOMAIOCINFO(), u, err)
		}
		refused = append(refused, fmt.Errorf("HOMAIOCINFO %#x (%v): %w", u.HOMAIOCINFO(), u, err))
	}
	return 0, fmt.Errorf("%w: %w", ErrUnknownUAPI, errors.Join(refused...))
}

// setRcvbuf registers the receive buffer region of length bytes at
// address start (SO_HOMA_RCVBUF) in the layout of generation u. The
// module checks optlen against its own structure's size before it reads
// anything, so a layout mismatch fails with EINVAL.
func setRcvbuf(k kernel, u UAPI, a cABI, start, length uint64) error {
	b, err := u.marshalRcvbuf(a, start, length)
	if err != nil {
		return err
	}
	if e := k.setsockopt(SO_HOMA_RCVBUF, unsafe.Pointer(&b[0]), uintptr(len(b))); e != 0 {
		return moduleError("setsockopt SO_HOMA_RCVBUF", e, errorMessage(k, u))
	}
	return nil
}

// moduleError wraps errno from a system call with the module's own
// explanation of it, when there is one.
func moduleError(op string, errno syscall.Errno, msg string) error {
	if msg == "" {
		return fmt.Errorf("khoma: %s: %w", op, errno)
	}
	return fmt.Errorf("khoma: %s: %w (module: %s)", op, errno, msg)
}

package netns

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// HasCapability reports whether the process has the capability c (one
// of unix.CAP_*) in its effective set.
func HasCapability(c uint) (bool, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false, fmt.Errorf("reading the process's capabilities: %w", err)
	}
	return data[c/32].Effective&(1<<(c%32)) != 0, nil
}

// privileged reports, wrapping ErrUnavailable, which capabilities the
// process lacks to make and configure namespaces: CAP_SYS_ADMIN (ip
// netns add) and CAP_NET_ADMIN (links, addresses, qdiscs).
func privileged() error {
	var missing []string
	for _, c := range []struct {
		bit  uint
		name string
	}{{unix.CAP_SYS_ADMIN, "CAP_SYS_ADMIN"}, {unix.CAP_NET_ADMIN, "CAP_NET_ADMIN"}} {
		has, err := HasCapability(c.bit)
		if err != nil {
			return err
		}
		if !has {
			missing = append(missing, c.name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: network namespaces need root with %v, which this process lacks", ErrUnavailable, missing)
	}
	return nil
}

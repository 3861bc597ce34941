package netns

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// privileged reports, wrapping ErrUnavailable, which capabilities the
// process lacks to make and configure namespaces: CAP_SYS_ADMIN (ip
// netns add) and CAP_NET_ADMIN (links, addresses, qdiscs).
func privileged() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("reading the process's capabilities: %w", err)
	}
	var missing []string
	for _, c := range []struct {
		bit  uint
		name string
	}{{unix.CAP_SYS_ADMIN, "CAP_SYS_ADMIN"}, {unix.CAP_NET_ADMIN, "CAP_NET_ADMIN"}} {
		if data[c.bit/32].Effective&(1<<(c.bit%32)) == 0 {
			missing = append(missing, c.name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: network namespaces need root with %v, which this process lacks", ErrUnavailable, missing)
	}
	return nil
}

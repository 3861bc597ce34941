//go:build linux

package khoma

import (
	"context"
	"errors"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/homa-go/homa/contract"
)

// TestKernelNoListener runs against the kernel module: a request to a
// port where the module has no socket. The module answers the request's
// packets with ICMP port unreachable (on loopback not rate limited) and,
// receiving it, fails the RPC with ENOTCONN: the errno must survive, and
// the RPC's error must match contract.ErrNoListener, as the engine reports the
// same ICMP answer, and not ErrPeerTimeout (the module's own timeout is
// ETIMEDOUT). One packet and a message longer than the unscheduled bytes,
// over IPv4 and IPv6.
func TestKernelNoListener(t *testing.T) {
	for _, host := range []string{"127.0.0.1", "[::1]"} {
		t.Run(host, func(t *testing.T) {
			client := openKernel(t, host+":0", false)
			dst := netip.MustParseAddrPort(host + ":4199")
			for _, n := range []int{100, 200_000} {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				start := time.Now()
				err := call(ctx, client, dst, payload(uint64(n), n))
				cancel()
				t.Logf("%d bytes to %v: %v after %v", n, dst, err, time.Since(start).Round(time.Microsecond))
				if !errors.Is(err, syscall.ENOTCONN) {
					t.Errorf("%d bytes: err = %v, want the module's ENOTCONN", n, err)
				}
				if !errors.Is(err, contract.ErrNoListener) || errors.Is(err, contract.ErrPeerTimeout) {
					t.Errorf("%d bytes: err = %v, want contract.ErrNoListener (and not ErrPeerTimeout)", n, err)
				}
			}
		})
	}
}

//go:build !linux

package lab

import (
	"fmt"
	"syscall"

	"github.com/homa-go/homa/internal/tools/netns"
)

// platformOK reports why labs cannot run on this system.
func platformOK() error {
	return fmt.Errorf("lab: %w: network namespaces need Linux", netns.ErrUnavailable)
}

func sysProcAttr() *syscall.SysProcAttr { return nil }

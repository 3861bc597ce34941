//go:build !linux

package netns

import "fmt"

func privileged() error {
	return fmt.Errorf("%w: network namespaces need Linux", ErrUnavailable)
}

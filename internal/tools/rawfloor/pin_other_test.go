//go:build !linux

package rawfloor

import "testing"

// pinThread does nothing where the floor does not run.
func pinThread(*testing.T) (unpin func()) { return func() {} }

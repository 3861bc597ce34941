// Package homabin builds the homa command for programs that drive it as
// a separate process (scripts/perf, scripts/attack).
package homabin

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
)

// Package is the import path of the homa command.
const Package = "github.com/homa-go/homa/cmd/homa"

// Build compiles the homa command into a new temporary directory, with
// the go command's output going to stderr, and returns the binary's path
// and a function that removes the directory. It must run inside the
// module.
func Build(ctx context.Context, stderr io.Writer) (bin string, remove func(), err error) {
	dir, err := os.MkdirTemp("", "homa-bin-")
	if err != nil {
		return "", nil, err
	}
	remove = func() { os.RemoveAll(dir) }
	bin = filepath.Join(dir, "homa")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, Package)
	cmd.Stdout, cmd.Stderr = stderr, stderr
	if err := cmd.Run(); err != nil {
		remove()
		return "", nil, fmt.Errorf("go build %s (run inside the module): %w", Package, err)
	}
	return bin, remove, nil
}

//go:build !unix

package bench

import (
	"io"
	"os"
)

// ParentInput is a server child's standard input, for AnswerParent.
func ParentInput() io.Reader { return os.Stdin }

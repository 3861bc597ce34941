package khoma

import (
	"testing"

	"github.com/homa-go/homa/contract/contracttest"
)

// TestContract: the kernel backend, on the model of the module, returns
// the contract's errors as the engine does (homa.TestContract).
func TestContract(t *testing.T) {
	h := newFakeHost()
	contracttest.Errors(t, func(t *testing.T, port uint16) contracttest.Socket {
		s, _ := h.socket(port)
		return s
	})
}

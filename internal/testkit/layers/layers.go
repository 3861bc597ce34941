// Package layers states which way the module's imports may run, and its
// test checks every package against it (go list): the protocol and its
// policies are pure, the two backends are siblings that share only the
// contract, everything above the backends reaches them through sock,
// and nothing below sock imports what is built on it. docs/design.md
// draws the same layers.
package layers

// module is the module's path.
const module = "github.com/homa-go/homa"

// A rule constrains the imports of the packages it names (a name ending
// in "/..." covers the package and those under it). allowStd, when set,
// lists the only standard packages they may import; allowModule, when
// set, the only packages of the module; deny lists packages (of the
// module or not) they may not import.
type rule struct {
	why         string
	pkgs        []string
	allowStd    []string
	allowModule []string
	deny        []string
}

// pure are the standard packages pure code may use: no I/O, clocks
// (time gives it durations), goroutine machinery or locks. The core's
// holds count their references with sync/atomic, since the shell
// releases them from other goroutines.
var pure = []string{
	"encoding/binary", "errors", "fmt", "math", "math/bits", "net/netip",
	"slices", "sort", "strconv", "strings", "time", "container/heap",
}

// protocol are the pure packages: the wire format, the core, the
// policies it is made of, and the intrusive list it keeps its queues in.
var protocol = []string{"homa/wire", "homa/core", "grant", "pacer", "priority", "resend", "ack", "internal/ilist"}

// below are the packages under sock: the contract, the backends and
// what they are built of.
var below = append([]string{
	"contract/...", "homa/...", "khoma", "internal/transport/mailbox", "internal/transport/sockfilter",
}, protocol...)

var rules = []rule{
	{
		why:         "the protocol is pure: no I/O, clocks, goroutines or locks, and nothing of the shell",
		pkgs:        protocol,
		allowStd:    append([]string{"sync/atomic"}, pure...),
		allowModule: append([]string{"contract"}, protocol...),
	},
	{
		why:         "the contract is the bottom: what both backends speak, built on the wire format alone",
		pkgs:        []string{"contract"},
		allowStd:    append([]string{"net"}, pure...),
		allowModule: []string{"homa/wire", "grant", "pacer"},
	},
	{
		why:         "the mailbox is the backends' shared contract with Recv and depends on the contract only",
		pkgs:        []string{"internal/transport/mailbox"},
		allowModule: []string{"contract"},
	},
	{
		why:  "the engine and the kernel backend are siblings: neither imports the other",
		pkgs: []string{"homa/..."},
		deny: []string{"khoma"},
	},
	{
		why:  "the engine and the kernel backend are siblings: neither imports the other",
		pkgs: []string{"khoma"},
		deny: []string{"homa/..."},
	},
	{
		why:  "nothing below sock imports what is built on it",
		pkgs: below,
		deny: []string{"sock/...", "metrics", "cmd/...", "lab", "bench", "faultnet", "interop", "spec", "scripts/...", "dcsim", "internal/tools/...", "internal/capture/...", "internal/testkit/..."},
	},
	{
		why:         "the RPC layers use sock's public API only",
		pkgs:        []string{"sock/erpc", "sock/netrpc", "sock/homagrpc"},
		allowModule: []string{"sock", "internal/ilist"},
	},
	{
		why:  "metrics, bench and the command reach the transport through sock only",
		pkgs: []string{"metrics", "bench", "cmd/..."},
		deny: []string{"contract/...", "homa/...", "khoma", "internal/transport/mailbox"},
	},
}

package khoma

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"testing"
	"unsafe"
)

// fakeModule simulates the ioctl and setsockopt calls of one socket of
// the Homa module on a 64-bit system, with the request numbers and
// layouts written out from each generation's homa.h (not computed by the
// code under test). Like the module, it rejects a request number it does
// not know with EINVAL before it looks at the argument, checks optlen
// before it reads an option, and keeps the text of its last error.
type fakeModule struct {
	name      string
	info      uint32 // HOMAIOCINFO (0: none)
	abort     uint32 // HOMAIOCABORT
	msgSize   int    // HOMA_ERROR_MSG_SIZE
	rcvbufLen uintptr

	unknown syscall.Errno // answer to unknown requests (EINVAL)
	infoErr syscall.Errno // HOMAIOCINFO fails with this

	port     uint32
	avail    uint64
	rpcs     [][]byte // struct homa_rpc_info records
	errorMsg string

	calls   []uint32  // requests issued, in order
	region  [2]uint64 // SO_HOMA_RCVBUF start and length
	aborted []uint64
}

func module613() *fakeModule {
	return &fakeModule{name: "linux_6.13.9", info: 0xc0886801, abort: 0xc0206802, msgSize: 100, rcvbufLen: 16, unknown: syscall.EINVAL, port: 40000}
}

func module617() *fakeModule {
	return &fakeModule{name: "main", info: 0xc0886890, abort: 0xc0206891, msgSize: 104, rcvbufLen: 16, unknown: syscall.EINVAL, port: 40000}
}

// modulePre is the module before October 2025: no HOMAIOCINFO, and
// HOMAIOCABORT in the SIOCPROTOPRIVATE range.
func modulePre() *fakeModule {
	return &fakeModule{name: "2025-09", abort: 0xc02089e3, msgSize: 100, rcvbufLen: 16, unknown: syscall.EINVAL}
}

// ioctl writes the RPC records through the address in the argument, as
// the kernel does; that address is an integer to the checkptr
// instrumentation of the race detector.
//
//go:nocheckptr
func (m *fakeModule) ioctl(req uint32, arg unsafe.Pointer) syscall.Errno {
	m.calls = append(m.calls, req)
	ne := binary.NativeEndian
	switch {
	case req == m.info && m.info != 0:
		if m.infoErr != 0 {
			return m.infoErr
		}
		b := unsafe.Slice((*byte)(arg), 136)
		addr, room := ne.Uint64(b[0:]), ne.Uint64(b[8:])
		for i, r := range m.rpcs {
			if addr != 0 && room >= uint64(184*(i+1)) {
				dst := unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(nil), uintptr(addr)+uintptr(184*i))), 184)
				copy(dst, r)
			}
		}
		ne.PutUint64(b[16:], m.avail)
		ne.PutUint32(b[24:], m.port)
		ne.PutUint32(b[28:], uint32(len(m.rpcs)))
		msg := make([]byte, m.msgSize)
		copy(msg[:m.msgSize-1], m.errorMsg)
		copy(b[32:], msg)
		return 0
	case req == m.abort:
		m.aborted = append(m.aborted, ne.Uint64(unsafe.Slice((*byte)(arg), 32)))
		return 0
	}
	m.errorMsg = "ioctl opcode isn't supported by Homa"
	return m.unknown
}

func (m *fakeModule) setsockopt(name int, val unsafe.Pointer, n uintptr) syscall.Errno {
	switch name {
	case SO_HOMA_RCVBUF:
		if n != m.rcvbufLen {
			m.errorMsg = "invalid optlen argument: must be sizeof(struct homa_rcvbuf_args)"
			return syscall.EINVAL
		}
		b := unsafe.Slice((*byte)(val), n)
		m.region = [2]uint64{binary.NativeEndian.Uint64(b), binary.NativeEndian.Uint64(b[8:])}
		return 0
	case SO_HOMA_SERVER:
		if n != 4 {
			return syscall.EINVAL
		}
		return 0
	}
	m.errorMsg = "setsockopt option not supported by Homa"
	return syscall.ENOPROTOOPT
}

// skipUnlessGeneric64 skips tests whose fake module has the request
// numbers of 64-bit systems with the asm-generic ioctl encoding.
func skipUnlessGeneric64(t *testing.T) {
	t.Helper()
	skipIf32Bit(t)
	if iocSizeBits != 14 {
		t.Skip("the fake module has the asm-generic ioctl numbers")
	}
}

func TestDetect(t *testing.T) {
	skipUnlessGeneric64(t)
	for _, c := range []struct {
		m     *fakeModule
		want  UAPI
		calls []uint32 // the probes, in order
	}{
		{module617(), UAPI617, []uint32{0xc0886890}},
		{module613(), UAPI613, []uint32{0xc0886890, 0xc0886801}},
	} {
		t.Run(c.m.name, func(t *testing.T) {
			u, err := detectUAPI(c.m, abi64)
			if err != nil || u != c.want {
				t.Fatalf("detectUAPI = %v, %v; want %v", u, err, c.want)
			}
			if !slices.Equal(c.m.calls, c.calls) {
				t.Errorf("requests %#x, want %#x", c.m.calls, c.calls)
			}
			// The detected generation's layouts and numbers are the
			// module's: the region registers, an abort reaches it.
			if err := setRcvbuf(c.m, u, abi64, 0x7f0000000000, RegionBytes); err != nil {
				t.Fatal(err)
			}
			if c.m.region != [2]uint64{0x7f0000000000, RegionBytes} {
				t.Errorf("module registered region %#x", c.m.region)
			}
			a := AbortArgs{ID: 42}
			if e := c.m.ioctl(u.HOMAIOCABORT(), unsafe.Pointer(&a)); e != 0 || !slices.Equal(c.m.aborted, []uint64{42}) {
				t.Errorf("HOMAIOCABORT %#x: %v, module aborted %v", u.HOMAIOCABORT(), e, c.m.aborted)
			}
		})
	}
}

// TestDetectUnknown: a module that answers neither HOMAIOCINFO makes
// detection fail with ErrUnknownUAPI, after the two probes and nothing
// else; ENOTTY counts as a refusal like EINVAL.
func TestDetectUnknown(t *testing.T) {
	skipUnlessGeneric64(t)
	for _, unknown := range []syscall.Errno{syscall.EINVAL, syscall.ENOTTY} {
		m := modulePre()
		m.unknown = unknown
		u, err := detectUAPI(m, abi64)
		if !errors.Is(err, ErrUnknownUAPI) || !errors.Is(err, unknown) || u != 0 {
			t.Errorf("%v: detectUAPI = %v, %v; want ErrUnknownUAPI", unknown, u, err)
		}
		if !slices.Equal(m.calls, []uint32{0xc0886890, 0xc0886801}) {
			t.Errorf("%v: requests %#x", unknown, m.calls)
		}
		if len(m.aborted) != 0 {
			t.Errorf("a probe aborted RPCs %v", m.aborted)
		}
	}
}

// TestDetectFailure: a HOMAIOCINFO that the module knows but that fails
// is an error of its own, not a reason to try an older generation.
func TestDetectFailure(t *testing.T) {
	skipUnlessGeneric64(t)
	m := module617()
	m.infoErr = syscall.ESHUTDOWN
	u, err := detectUAPI(m, abi64)
	if !errors.Is(err, syscall.ESHUTDOWN) || errors.Is(err, ErrUnknownUAPI) || u != 0 {
		t.Errorf("detectUAPI = %v, %v; want ESHUTDOWN", u, err)
	}
	if len(m.calls) != 1 {
		t.Errorf("requests %#x after the failure, want one", m.calls)
	}
}

// TestRcvbufMismatch: a module whose homa_rcvbuf_args has another size
// rejects the option, and the error carries the module's explanation.
func TestRcvbufMismatch(t *testing.T) {
	skipUnlessGeneric64(t)
	m := module617()
	m.rcvbufLen = 12
	err := setRcvbuf(m, UAPI617, abi64, 0x7f0000000000, RegionBytes)
	if !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), "must be sizeof(struct homa_rcvbuf_args)") {
		t.Errorf("setRcvbuf = %v, want EINVAL with the module's message", err)
	}
	if m.region != [2]uint64{} {
		t.Errorf("module read the option: %#x", m.region)
	}
}

// TestReadInfo reads the module's state through each generation, with
// more RPCs than the first call has room for.
func TestReadInfo(t *testing.T) {
	skipUnlessGeneric64(t)
	for _, m := range []*fakeModule{module613(), module617()} {
		m.avail = 63 << 20
		m.errorMsg = "error while waiting for private RPC to complete"
		for i := range 40 {
			peer := netip.AddrPortFrom(netip.MustParseAddr(fmt.Sprintf("10.0.0.%d", i+1)), uint16(500+i))
			m.rpcs = append(m.rpcs, rpcInfoBytes(uint64(2*i+i%2), peer, uint64(i), [4]uint32{100, 100, 100, 0}, [5]uint32{0xffffffff}, 0))
		}
		u, err := detectUAPI(m, abi64)
		if err != nil {
			t.Fatal(err)
		}
		m.calls = nil
		in, err := readInfo(m, u, abi64, maxInfoRPCs)
		if err != nil {
			t.Fatal(err)
		}
		if in.UAPI != u || in.Port != 40000 || in.AvailBytes != 63<<20 || in.NumRPCs != 40 || !in.Complete() || in.ErrorMsg != m.errorMsg {
			t.Errorf("%s: info %+v", m.name, in)
		}
		for i, r := range in.RPCs {
			if r.ID != uint64(2*i+i%2) || r.Cookie != uint64(i) || r.Peer.Port() != uint16(500+i) {
				t.Errorf("%s: RPC %d decoded as %+v", m.name, i, r)
				break
			}
		}
		if len(m.calls) != 2 {
			t.Errorf("%s: %d HOMAIOCINFO calls for 40 RPCs, want 2", m.name, len(m.calls))
		}

		// A bound below the socket's RPCs: the first ones only.
		in, err = readInfo(m, u, abi64, 20)
		if err != nil || len(in.RPCs) != 20 || in.NumRPCs != 40 || in.Complete() {
			t.Errorf("%s: bounded to 20: %d of %d RPCs, %v", m.name, len(in.RPCs), in.NumRPCs, err)
		}
		// No room at all: the counts only.
		in, err = readInfo(m, u, abi64, 0)
		if err != nil || in.RPCs != nil || in.NumRPCs != 40 {
			t.Errorf("%s: no room: %d of %d RPCs, %v", m.name, len(in.RPCs), in.NumRPCs, err)
		}
		if msg := errorMessage(m, u); msg != m.errorMsg {
			t.Errorf("%s: errorMessage = %q", m.name, msg)
		}
	}
}

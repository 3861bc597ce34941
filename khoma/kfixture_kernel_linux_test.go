//go:build linux

package khoma

// The kernel-level part of the fixtures: the ioctls and socket options
// whose layouts differ between the user APIs (detectUAPI's probes,
// SO_HOMA_RCVBUF, HOMAIOCINFO with its RPC records and error text),
// recorded and replayed at the kernel interface.

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strconv"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// recKernel issues the calls of a kernel socket and records them.
type recKernel struct {
	k    kernel
	r    *recorder
	sock int
}

// ioctlArgSize is the argument size an ioctl number encodes.
func ioctlArgSize(req uint32) int { return int(req>>iocSizeShift) & (1<<iocSizeBits - 1) }

// infoUAPI is the generation whose HOMAIOCINFO req is, or 0.
func infoUAPI(req uint32) UAPI {
	for _, u := range uapis {
		if req == u.HOMAIOCINFO() {
			return u
		}
	}
	return 0
}

// infoRecords is where the records of a HOMAIOCINFO argument b of
// generation u go: the rpc_info address and length, and num_rpcs.
func infoRecords(u UAPI, b []byte) (addr uintptr, length, num int) {
	l := u.infoLayout(nativeABI)
	word := func(off int) uint64 {
		if l.wordSize == 4 {
			return uint64(binary.NativeEndian.Uint32(b[off:]))
		}
		return binary.NativeEndian.Uint64(b[off:])
	}
	return uintptr(word(l.rpcInfo)), int(word(l.rpcInfoLength)), int(binary.NativeEndian.Uint32(b[l.numRPCs:]))
}

// infoPointer is the rpc_info address in a HOMAIOCINFO argument of
// generation u (little-endian: a 32-bit pointer in a __u64 is its low
// half).
func infoPointer(u UAPI, b []byte) unsafe.Pointer {
	return *(*unsafe.Pointer)(unsafe.Pointer(&b[u.infoLayout(nativeABI).rpcInfo]))
}

func (k *recKernel) ioctl(req uint32, arg unsafe.Pointer) syscall.Errno {
	arg8 := unsafe.Slice((*byte)(arg), ioctlArgSize(req))
	in := hex.EncodeToString(arg8)
	e := k.k.ioctl(req, arg)
	var rpcs []byte
	if u := infoUAPI(req); u != 0 && e == 0 {
		addr, length, num := infoRecords(u, arg8)
		if n := min(length, num*SizeofRPCInfo); addr != 0 && n > 0 {
			rpcs = unsafe.Slice((*byte)(infoPointer(u, arg8)), n)
		}
	}
	k.r.add(fxEvent{kind: "ioctl", sock: k.sock, fields: map[string]string{
		"req": strconv.FormatUint(uint64(req), 16), "in": in, "out": hex.EncodeToString(arg8),
		"rpcs": hex.EncodeToString(rpcs), "err": strconv.Itoa(int(e))}})
	return e
}

func (k *recKernel) setsockopt(name int, val unsafe.Pointer, n uintptr) syscall.Errno {
	in := hex.EncodeToString(unsafe.Slice((*byte)(val), n))
	e := k.k.setsockopt(name, val, n)
	k.r.add(fxEvent{kind: "setsockopt", sock: k.sock, fields: map[string]string{
		"name": strconv.Itoa(name), "in": in, "err": strconv.Itoa(int(e))}})
	return e
}

// info issues HOMAIOCINFO through a recording kernel.
func (c *recConn) info(maxRPCs int) (Info, error) {
	var (
		in   Info
		ierr error
	)
	err := c.rc.Control(func(fd uintptr) {
		in, ierr = readInfo(&recKernel{k: fdKernel(fd), r: c.r, sock: c.sock}, c.api, nativeABI, maxRPCs)
	})
	if err != nil {
		return Info{}, c.closedError(err)
	}
	return in, ierr
}

// kernel opens a fresh kernel Homa socket, and a receive region for it,
// whose calls are recorded.
func (r *recorder) kernel(t fxT) (kernel, uint64, uint64) {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, IPPROTO_HOMA)
	if err != nil {
		t.Fatalf("socket: %v", err)
	}
	buf, err := unix.Mmap(-1, 0, RegionBytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		unix.Close(fd)
		t.Fatalf("mmap: %v", err)
	}
	r.t.Cleanup(func() {
		unix.Close(fd)
		unix.Munmap(buf)
	})
	sock := r.newSock()
	r.add(fxEvent{kind: "open", sock: sock, fields: map[string]string{"local": "raw", "server": "false", "port": "0", "uapi": "0"}})
	return &recKernel{k: fdKernel(fd), r: r, sock: sock}, uint64(uintptr(unsafe.Pointer(&buf[0]))), uint64(len(buf))
}

// replayKernel answers the calls of a kernel socket as recorded.
type replayKernel struct{ c *replayConn }

// maskAddrs replaces the addresses in an argument, which differ from
// run to run, by what matters of them: in homa_info whether rpc_info is
// set, in homa_rcvbuf_args start's offset in its page.
func maskAddrs(kind string, code uint64, b []byte) []byte {
	b = bytes.Clone(b)
	switch {
	case kind == "ioctl" && infoUAPI(uint32(code)) != 0:
		l := infoUAPI(uint32(code)).infoLayout(nativeABI)
		addr, _, _ := infoRecords(infoUAPI(uint32(code)), b)
		clear(b[l.rpcInfo : l.rpcInfo+l.wordSize])
		if addr != 0 {
			b[l.rpcInfo] = 1
		}
	case kind == "setsockopt" && code == SO_HOMA_RCVBUF && len(b) >= 8:
		start := binary.NativeEndian.Uint64(b)
		binary.NativeEndian.PutUint64(b, start&uint64(unix.Getpagesize()-1))
	}
	return b
}

func (k replayKernel) ioctl(req uint32, arg unsafe.Pointer) syscall.Errno {
	e, ok := k.c.next("ioctl")
	if !ok {
		return syscall.EIO
	}
	arg8 := unsafe.Slice((*byte)(arg), ioctlArgSize(req))
	code, _ := strconv.ParseUint(e.fields["req"], 16, 32)
	if uint64(req) != code || !bytes.Equal(maskAddrs("ioctl", code, arg8), maskAddrs("ioctl", code, e.hex("in"))) {
		k.c.t.Errorf("socket %d: ioctl(%#x, %x); recorded %s", k.c.num, req, arg8, e.line())
		return syscall.EIO
	}
	errno := syscall.Errno(e.int("err"))
	if errno != 0 {
		return errno
	}
	u := infoUAPI(req)
	if u == 0 {
		copy(arg8, e.hex("out"))
		return 0
	}
	// The kernel leaves rpc_info as it was and writes the records there.
	l := u.infoLayout(nativeABI)
	ptr := bytes.Clone(arg8[l.rpcInfo : l.rpcInfo+l.wordSize])
	addr, length, _ := infoRecords(u, arg8)
	if rpcs := e.hex("rpcs"); len(rpcs) > 0 {
		if len(rpcs) > length || addr == 0 {
			k.c.t.Errorf("socket %d: %d bytes of RPC records for room of %d", k.c.num, len(rpcs), length)
			return syscall.EFAULT
		}
		copy(unsafe.Slice((*byte)(infoPointer(u, arg8)), length), rpcs)
	}
	copy(arg8, e.hex("out"))
	copy(arg8[l.rpcInfo:], ptr)
	return 0
}

func (k replayKernel) setsockopt(name int, val unsafe.Pointer, n uintptr) syscall.Errno {
	e, ok := k.c.next("setsockopt")
	if !ok {
		return syscall.EIO
	}
	in := unsafe.Slice((*byte)(val), n)
	if strconv.Itoa(name) != e.fields["name"] || !bytes.Equal(maskAddrs("setsockopt", uint64(name), in), maskAddrs("setsockopt", uint64(name), e.hex("in"))) {
		k.c.t.Errorf("socket %d: setsockopt(%d, %x); recorded %s", k.c.num, name, in, e.line())
		return syscall.EIO
	}
	return syscall.Errno(e.int("err"))
}

func (c *replayConn) info(maxRPCs int) (Info, error) {
	return readInfo(replayKernel{c}, c.api, nativeABI, maxRPCs)
}

// kernel replays the next raw socket the scenario opened.
func (h *replayHost) kernel(t fxT) (kernel, uint64, uint64) {
	t.Helper()
	if len(h.opens) == 0 || h.opens[0].fields["local"] != "raw" {
		t.Fatalf("the scenario opens a raw socket where none was recorded")
	}
	e := h.opens[0]
	h.opens = h.opens[1:]
	// Any page-aligned address stands for the region: the module's
	// answers do not depend on where it is.
	return replayKernel{h.conn(e.sock)}, 1 << 40, RegionBytes
}

// fxSetup: how a fresh socket finds the module's API (the probes of
// detectUAPI), registers its receive region, and reads the module's
// error text after SO_HOMA_RCVBUF refusals (homa_info's error_msg, whose
// size differs between the APIs).
func fxSetup(t fxT, h fxHost, tr *transcript) {
	k, start, length := h.kernel(t)
	u, err := detectUAPI(k, nativeABI)
	tr.add("detect: %v err %s", u, errClass(err))
	if err != nil {
		t.Fatalf("detectUAPI: %v", err)
	}
	in, err := readInfo(k, u, nativeABI, 4)
	tr.add("info: %s err %s", infoText(in), errClass(err))
	tr.add("rcvbuf unaligned: err %s", errClass(setRcvbuf(k, u, nativeABI, start+8, length-HOMA_BPAGE_SIZE)))
	tr.add("rcvbuf one page: err %s", errClass(setRcvbuf(k, u, nativeABI, start, 4096)))
	tr.add("rcvbuf: err %s", errClass(setRcvbuf(k, u, nativeABI, start, length)))
	in, err = readInfo(k, u, nativeABI, 4)
	tr.add("info: %s err %s", infoText(in), errClass(err))
}

// infoText renders in for a transcript.
func infoText(in Info) string {
	return fmt.Sprintf("%+v", in)
}

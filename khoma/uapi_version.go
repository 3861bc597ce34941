package khoma

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"unsafe"
)

// UAPI is a generation of the Homa module's user API. The package doc
// lists what differs between them; Open detects which one the loaded
// module speaks.
type UAPI uint8

// The supported generations, oldest first.
const (
	// UAPI613 is the API of the module's linux_6.13.9 branch: ioctls
	// _IOWR('h', 1..3), size_t lengths, HOMA_ERROR_MSG_SIZE 100.
	UAPI613 UAPI = iota + 1
	// UAPI617 is the API of the module's main branch (Linux 6.17):
	// ioctls 'h' 0x90..0x92, __u64 lengths, HOMA_ERROR_MSG_SIZE 104.
	UAPI617
)

// uapis are the generations Open probes for, newest first.
var uapis = [...]UAPI{UAPI617, UAPI613}

func (u UAPI) String() string {
	switch u {
	case UAPI613:
		return "linux_6.13.9 uapi (ioctls 'h' 1-3)"
	case UAPI617:
		return "main uapi (ioctls 'h' 0x90-0x92)"
	}
	return fmt.Sprintf("UAPI(%d)", uint8(u))
}

// ioctlBase is the command number of HOMAIOCINFO; HOMAIOCABORT and
// HOMAIOCFREEZE follow it.
func (u UAPI) ioctlBase() byte {
	if u == UAPI617 {
		return 0x90
	}
	return 1
}

// newLengths reports whether the generation's lengths and the rpc_info
// address are __u64 rather than size_t and a pointer.
func (u UAPI) newLengths() bool { return u == UAPI617 }

// errorMsgSize is HOMA_ERROR_MSG_SIZE.
func (u UAPI) errorMsgSize() int {
	if u == UAPI617 {
		return 104
	}
	return 100
}

// HOMAIOCINFO is the request number of the ioctl that reports a socket's
// state (a struct homa_info) on this platform.
func (u UAPI) HOMAIOCINFO() uint32 {
	return iowr('h', u.ioctlBase(), u.infoLayout(nativeABI).size)
}

// HOMAIOCABORT is the request number of the ioctl that aborts client
// RPCs (an AbortArgs).
func (u UAPI) HOMAIOCABORT() uint32 { return iowr('h', u.ioctlBase()+1, SizeofAbortArgs) }

// HOMAIOCFREEZE is the request number of the ioctl that freezes the
// module's time trace (no argument). Socket does not use it.
func (u UAPI) HOMAIOCFREEZE() uint32 { return ionone('h', u.ioctlBase()+2) }

// SizeofRcvbufArgs is the size of struct homa_rcvbuf_args on this
// platform: the optlen SO_HOMA_RCVBUF insists on.
func (u UAPI) SizeofRcvbufArgs() int { return u.rcvbufLayout(nativeABI).size }

// SizeofInfo is the size of struct homa_info on this platform.
func (u UAPI) SizeofInfo() int { return u.infoLayout(nativeABI).size }

// cABI is what the layout of a uapi structure depends on: the size (and
// alignment) of pointers and size_t, and the alignment of __u64 (4 on
// i386, 8 elsewhere, including 32-bit ARM and MIPS, whose Go alignment
// of 4 differs from C's).
type cABI struct {
	ptr     int
	align64 int
}

// nativeABI is the C ABI of the platform the package runs on.
var nativeABI = abiOf(runtime.GOARCH, int(unsafe.Sizeof(uintptr(0))))

func abiOf(goarch string, ptr int) cABI {
	a := cABI{ptr: ptr, align64: 8}
	if goarch == "386" {
		a.align64 = 4
	}
	return a
}

// cField is one member of a C structure: its size and alignment.
type cField struct{ size, align int }

// cStruct lays fields out as a C compiler does: each at the next
// multiple of its alignment, the whole padded to the largest alignment.
func cStruct(fields ...cField) (offsets []int, size int) {
	maxAlign := 1
	for _, f := range fields {
		size = alignUp(size, f.align)
		offsets = append(offsets, size)
		size += f.size
		maxAlign = max(maxAlign, f.align)
	}
	return offsets, alignUp(size, maxAlign)
}

func alignUp(n, a int) int { return (n + a - 1) / a * a }

// word is a field of the generation's length type: __u64, or size_t (and
// a pointer, which has the same size in every Linux ABI).
func (u UAPI) word(a cABI) cField {
	if u.newLengths() {
		return cField{8, a.align64}
	}
	return cField{a.ptr, a.ptr}
}

// rcvbufLayout is struct homa_rcvbuf_args: __u64 start, then length.
type rcvbufLayout struct {
	length, lengthSize int // offset and size of length
	size               int
}

func (u UAPI) rcvbufLayout(a cABI) rcvbufLayout {
	w := u.word(a)
	off, size := cStruct(cField{8, a.align64}, w)
	return rcvbufLayout{length: off[1], lengthSize: w.size, size: size}
}

// marshalRcvbuf encodes the SO_HOMA_RCVBUF argument for a region of
// length bytes at address start.
func (u UAPI) marshalRcvbuf(a cABI, start, length uint64) ([]byte, error) {
	l := u.rcvbufLayout(a)
	if l.lengthSize == 4 && length > 1<<32-1 {
		return nil, fmt.Errorf("khoma: receive region of %d bytes does not fit a 32-bit size_t", length)
	}
	b := make([]byte, l.size)
	ne := binary.NativeEndian
	ne.PutUint64(b, start)
	putWord(b[l.length:], l.lengthSize, length)
	return b, nil
}

// infoLayout is struct homa_info: rpc_info (the address of an array of
// struct homa_rpc_info), rpc_info_length, __u64 bpool_avail_bytes,
// __u32 port, __u32 num_rpcs, char error_msg[HOMA_ERROR_MSG_SIZE].
type infoLayout struct {
	rpcInfo, rpcInfoLength, wordSize int
	availBytes, port, numRPCs        int
	errorMsg, errorMsgSize           int
	size                             int
}

func (u UAPI) infoLayout(a cABI) infoLayout {
	w := u.word(a)
	n := u.errorMsgSize()
	off, size := cStruct(w, w, cField{8, a.align64}, cField{4, 4}, cField{4, 4}, cField{n, 1})
	return infoLayout{
		rpcInfo: off[0], rpcInfoLength: off[1], wordSize: w.size,
		availBytes: off[2], port: off[3], numRPCs: off[4],
		errorMsg: off[5], errorMsgSize: n,
		size: size,
	}
}

// marshalInfo encodes a HOMAIOCINFO argument asking for at most
// rpcInfoLength bytes of struct homa_rpc_info at address rpcInfo.
func (u UAPI) marshalInfo(a cABI, rpcInfo, rpcInfoLength uint64) []byte {
	l := u.infoLayout(a)
	b := make([]byte, l.size)
	putWord(b[l.rpcInfo:], l.wordSize, rpcInfo)
	putWord(b[l.rpcInfoLength:], l.wordSize, rpcInfoLength)
	return b
}

// putWord stores v in the first n (4 or 8) bytes of b.
func putWord(b []byte, n int, v uint64) {
	if n == 4 {
		binary.NativeEndian.PutUint32(b, uint32(v))
		return
	}
	binary.NativeEndian.PutUint64(b, v)
}

// struct homa_rpc_info is the same in both generations and every ABI
// (every member sits at a multiple of its size; the peer union holds a
// struct sockaddr_storage of 128 bytes).
const (
	rpcInfoID           = 0
	rpcInfoPeer         = 8
	rpcInfoPeerSize     = 128
	rpcInfoCookie       = 136
	rpcInfoTxLength     = 144
	rpcInfoTxSent       = 148
	rpcInfoTxGranted    = 152
	rpcInfoTxPrio       = 156
	rpcInfoRxLength     = 160
	rpcInfoRxRemaining  = 164
	rpcInfoRxGaps       = 168
	rpcInfoRxGapBytes   = 172
	rpcInfoRxGranted    = 176
	rpcInfoFlags        = 180
	SizeofRPCInfo       = 184
	sockaddrFamilyINET  = 2  // AF_INET on Linux
	sockaddrFamilyINET6 = 10 // AF_INET6 on Linux
)

// Bits of RPCInfo.Flags.
const (
	// HOMA_RPC_BUF_STALL: the incoming message waits for receive buffer
	// space.
	HOMA_RPC_BUF_STALL = 1
	// HOMA_RPC_PRIVATE: the request was sent with HOMA_SENDMSG_PRIVATE.
	HOMA_RPC_PRIVATE = 2
	// HOMA_RPC_RX_READY: the incoming message is complete and waits for
	// recvmsg.
	HOMA_RPC_RX_READY = 4
	// HOMA_RPC_RX_COPY: received packets wait to be copied to the
	// receive buffer region.
	HOMA_RPC_RX_COPY = 8
)

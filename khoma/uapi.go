// Package khoma drives the Linux Homa kernel module (IPPROTO_HOMA) from Go:
// its user API as Go types, the receive-buffer (bpage) bookkeeping, and a
// Socket with the same Send / Recv / Reply / Abort semantics as the
// user-space engine in package homa.
//
// # Module versions
//
// The module's user API (its homa.h) has changed while the wire protocol
// has not. Two generations are supported, both with the same sendmsg,
// recvmsg and SO_HOMA_RCVBUF / SO_HOMA_SERVER interface:
//
//   - UAPI613, the module's linux_6.13.9 branch (and its net-next branch):
//     HOMAIOCINFO, HOMAIOCABORT and HOMAIOCFREEZE are _IOWR('h', 1..3);
//     homa_rcvbuf_args.length and homa_info.rpc_info_length are size_t and
//     homa_info.rpc_info a pointer; HOMA_ERROR_MSG_SIZE is 100.
//   - UAPI617, the module's main branch (Linux 6.17; also its rhel_9.5
//     branch): the ioctls moved to 'h' 0x90..0x92, and those three fields
//     are __u64; HOMA_ERROR_MSG_SIZE is 104.
//
// On 64-bit systems every structure has the same size and layout in both
// (homa_info's error_msg fills 100 or 104 bytes of the same 136), so only
// the ioctl numbers differ; the module's main branch between March and
// April 2026 (__u64 fields, old ioctl numbers) is UAPI613 there. On 32-bit
// systems homa_rcvbuf_args and homa_info differ too; their layouts follow
// the platform's C ABI.
//
// Open finds out which API the loaded module speaks before it uses the
// socket: it issues HOMAIOCINFO with UAPI617's request number, then with
// UAPI613's. A module answers only its own request number (an ioctl
// number encodes the argument's size, so a size mismatch is a different
// number) and rejects any other with EINVAL before it reads the
// argument; no generation's HOMAIOCINFO number is another's ioctl. The
// probe therefore cannot misfire: the first number the module accepts
// names its API, and a module that accepts neither (for example one from
// before October 2025, whose ioctls were in the SIOCPROTOPRIVATE range
// and had no HOMAIOCINFO) makes Open fail with ErrUnknownUAPI rather
// than guess.
//
// HOMAIOCINFO also feeds Stats (the socket's client and server RPCs as
// the kernel counts them, the incoming and outgoing bytes still to move)
// and Socket.Info (everything it reports, including the text of the
// module's last error on the socket).
//
// In both generations:
//
//   - sendmsg takes a struct homa_sendmsg_args whose address is in
//     msg_control, with msg_controllen 0 (the kernel must not copy it as
//     control messages);
//   - recvmsg takes a struct homa_recvmsg_args at msg_control, with
//     msg_controllen equal to its size; it has no flags field (non-blocking
//     is MSG_DONTWAIT or O_NONBLOCK);
//   - a packet for a port with no socket, and a request for a socket that
//     is not a server, are dropped and answered with ICMP (ICMPv6)
//     destination unreachable, port unreachable, subject to the kernel's
//     ICMP rate limit (net.ipv4.icmp_ratelimit).
//
// # Errors
//
// A client RPC that the module fails comes back from Recv as a Message
// whose Err is a *contract.OpError (Op "recv") wrapping the contract's
// error that the module's errno means, as the engine reports the same
// condition, with the errno kept in the chain (errors.Is and errors.As
// find both):
//
//   - ENOTCONN (ICMP port unreachable: no socket on the peer's port; the
//     module answers a packet to such a port so) and EPROTONOSUPPORT
//     (ICMP protocol unreachable: no Homa on the peer host) are
//     contract.ErrNoListener;
//   - EHOSTUNREACH (other ICMP destination unreachable reports) and
//     ENETUNREACH are contract.ErrHostUnreachable;
//   - ETIMEDOUT (the module's own timeout: the peer stayed silent through
//     its RESENDs) is contract.ErrPeerTimeout, and the OpError reports
//     Timeout;
//   - ECANCELED is contract.ErrAborted and ESHUTDOWN contract.ErrClosed;
//   - any other errno is wrapped as it is.
//
// Send and Reply map sendmsg's EHOSTUNREACH and ENETUNREACH (no route to
// the peer) to contract.ErrHostUnreachable, EAFNOSUPPORT to
// contract.ErrBadAddress, and ESHUTDOWN and EBADF to contract.ErrClosed, keeping
// the errno too. errors.go says which module condition gives which errno.
package khoma

import "unsafe"

// Protocol numbers and socket options.
const (
	// IPPROTO_HOMA is the IANA-assigned IP protocol number of Homa.
	IPPROTO_HOMA = 146
	// SOL_HOMA is the setsockopt level of Homa's options: the protocol
	// number, as for other transports.
	SOL_HOMA = IPPROTO_HOMA
	// SO_HOMA_RCVBUF registers the receive buffer region (a struct
	// homa_rcvbuf_args, whose layout depends on the UAPI).
	SO_HOMA_RCVBUF = 10
	// SO_HOMA_SERVER takes an int: nonzero lets the socket receive
	// requests. Binding a port also sets it.
	SO_HOMA_SERVER = 11
)

// Message and buffer limits.
const (
	// HOMA_MAX_MESSAGE_LENGTH is the largest request or response.
	HOMA_MAX_MESSAGE_LENGTH = 1000000
	// HOMA_BPAGE_SHIFT is log2 of HOMA_BPAGE_SIZE.
	HOMA_BPAGE_SHIFT = 16
	// HOMA_BPAGE_SIZE is the size of the pages the receive buffer region
	// is cut into.
	HOMA_BPAGE_SIZE = 1 << HOMA_BPAGE_SHIFT
	// HOMA_MAX_BPAGES is the most bpages one message occupies, and the
	// length of RecvmsgArgs.BpageOffsets.
	HOMA_MAX_BPAGES = (HOMA_MAX_MESSAGE_LENGTH + HOMA_BPAGE_SIZE - 1) >> HOMA_BPAGE_SHIFT
	// HOMA_MIN_DEFAULT_PORT is the first port the kernel assigns to an
	// unbound socket; 1..HOMA_MIN_DEFAULT_PORT-1 are server ports.
	HOMA_MIN_DEFAULT_PORT = 0x8000
)

// HOMA_SENDMSG_PRIVATE in SendmsgArgs.Flags makes a request's response
// retrievable only by a recvmsg naming its id. Socket does not use it:
// Recv(Any) must see every response, so responses are demultiplexed in
// user space instead.
const HOMA_SENDMSG_PRIVATE = 0x01

// SendmsgArgs is struct homa_sendmsg_args (24 bytes).
type SendmsgArgs struct {
	// ID is 0 to send a request (the kernel writes the new RPC's id
	// back), or the id of the request a response answers.
	ID uint64
	// CompletionCookie is returned by recvmsg with the response
	// (requests only; must be 0 for responses).
	CompletionCookie uint64
	// Flags are HOMA_SENDMSG_* bits.
	Flags uint32
	// Reserved must be 0.
	Reserved uint32
}

// RecvmsgArgs is struct homa_recvmsg_args (88 bytes).
type RecvmsgArgs struct {
	// ID is 0 to receive any message except private responses (the
	// kernel writes the received RPC's id back: odd for a request, even
	// for a response).
	ID uint64
	// CompletionCookie is set for responses (out).
	CompletionCookie uint64
	// NumBpages counts the valid BpageOffsets: on input, bpages given
	// back to the kernel; on output, those holding the new message.
	NumBpages uint32
	// Reserved must be 0.
	Reserved uint32
	// BpageOffsets are offsets into the receive buffer region. All but
	// the last of a message are whole, aligned bpages.
	BpageOffsets [HOMA_MAX_BPAGES]uint32
}

// AbortArgs is struct homa_abort_args, the HOMAIOCABORT argument
// (32 bytes).
type AbortArgs struct {
	// ID is the client RPC to abort, or 0 for all of the socket's.
	ID uint64
	// Error 0 destroys the RPC silently; an errno value completes it
	// with that error, which recvmsg then returns.
	Error uint32
	pad1  uint32
	pad2  [2]uint64
}

// Sizes of the structures, as the kernel checks them.
const (
	SizeofSendmsgArgs = int(unsafe.Sizeof(SendmsgArgs{}))
	SizeofRecvmsgArgs = int(unsafe.Sizeof(RecvmsgArgs{}))
	SizeofAbortArgs   = int(unsafe.Sizeof(AbortArgs{}))
)

// Field layout of an ioctl number (include/uapi/asm-generic/ioctl.h).
const (
	iocNrBits    = 8
	iocTypeBits  = 8
	iocTypeShift = iocNrBits
	iocSizeShift = iocTypeShift + iocTypeBits
	iocDirShift  = iocSizeShift + iocSizeBits
)

// ioc encodes an ioctl number (_IOC): the argument's direction and size,
// the driver's type byte and the command number.
func ioc(dir, typ, nr, size uint32) uint32 {
	return dir<<iocDirShift | size<<iocSizeShift | typ<<iocTypeShift | nr
}

// iowr is _IOWR: an ioctl whose argument of size bytes the kernel reads
// and writes.
func iowr(typ, nr byte, size int) uint32 {
	return ioc(iocRead|iocWrite, uint32(typ), uint32(nr), uint32(size))
}

// ionone is _IO: an ioctl without argument.
func ionone(typ, nr byte) uint32 { return ioc(iocNone, uint32(typ), uint32(nr), 0) }

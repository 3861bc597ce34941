// Package khoma drives the Linux Homa kernel module (IPPROTO_HOMA) from Go:
// its user API as Go types, the receive-buffer (bpage) bookkeeping, and a
// Socket with the same Send / Recv / Reply / Abort semantics as the
// user-space engine in package homa.
//
// The user API follows include/uapi/linux/homa.h of the Homa module as
// submitted to net-next (v12..v14, July-August 2025) and the module's
// GitHub homa.h of the same period. In that version:
//
//   - sendmsg takes a struct homa_sendmsg_args whose address is in
//     msg_control, with msg_controllen 0 (the kernel must not copy it as
//     control messages);
//   - recvmsg takes a struct homa_recvmsg_args at msg_control, with
//     msg_controllen equal to its size; it has no flags field any more
//     (the older HOMA_RECVMSG_REQUEST/RESPONSE/NONBLOCKING bits are gone:
//     non-blocking is MSG_DONTWAIT or O_NONBLOCK);
//   - HOMAIOCABORT is _IOWR('h', 2, struct homa_abort_args).
package khoma

import "unsafe"

// Protocol numbers and socket options.
const (
	// IPPROTO_HOMA is the IANA-assigned IP protocol number of Homa.
	IPPROTO_HOMA = 146
	// SOL_HOMA is the setsockopt level of Homa's options: the protocol
	// number, as for other transports.
	SOL_HOMA = IPPROTO_HOMA
	// SO_HOMA_RCVBUF registers the receive buffer region (a
	// RcvbufArgs).
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

// RcvbufArgs is struct homa_rcvbuf_args, the SO_HOMA_RCVBUF argument
// (16 bytes on 64-bit systems).
type RcvbufArgs struct {
	// Start is the address of the region (page aligned).
	Start uint64
	// Length is the region's size in bytes (a size_t).
	Length uintptr
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
	SizeofRcvbufArgs  = int(unsafe.Sizeof(RcvbufArgs{}))
	SizeofAbortArgs   = int(unsafe.Sizeof(AbortArgs{}))
)

// HOMAIOCABORT aborts a client RPC (ioctl with an *AbortArgs):
// _IOWR('h', 2, struct homa_abort_args).
const HOMAIOCABORT uint32 = (iocRead|iocWrite)<<iocDirShift | uint32(SizeofAbortArgs)<<iocSizeShift | 'h'<<iocTypeShift | 2

// Field layout of an ioctl number (include/uapi/asm-generic/ioctl.h).
const (
	iocNrBits    = 8
	iocTypeBits  = 8
	iocTypeShift = iocNrBits
	iocSizeShift = iocTypeShift + iocTypeBits
	iocDirShift  = iocSizeShift + iocSizeBits
)

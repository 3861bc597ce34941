package khoma

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"runtime"
	"syscall"
	"unsafe"

	"github.com/homa-go/homa/contract"
)

// maxInfoRPCs bounds the RPC records one Info holds (SizeofRPCInfo bytes
// each): the memory of a HOMAIOCINFO call does not grow with the number
// of RPCs a socket has.
const maxInfoRPCs = 4096

// Info is the state of a kernel Homa socket as HOMAIOCINFO reports it
// (struct homa_info).
type Info struct {
	// UAPI is the user API generation of the module.
	UAPI UAPI
	// Port is the socket's Homa port.
	Port uint16
	// AvailBytes is the free space in the receive buffer region
	// (bpool_avail_bytes).
	AvailBytes uint64
	// NumRPCs counts the socket's live RPCs, client and server.
	NumRPCs int
	// RPCs describes up to NumRPCs of them: all, unless the caller's
	// bound (at most maxInfoRPCs) was smaller.
	RPCs []RPCInfo
	// ErrorMsg is the module's explanation of the last error a Homa
	// system call on this socket returned (empty if none). Calls on the
	// socket from other goroutines may have replaced it.
	ErrorMsg string
}

// Complete reports whether RPCs holds every live RPC.
func (in *Info) Complete() bool { return len(in.RPCs) == in.NumRPCs }

// RPCInfo is one RPC of a socket (struct homa_rpc_info).
type RPCInfo struct {
	// ID is the RPC's id: even for a client RPC of this socket, odd for a
	// server RPC.
	ID uint64
	// Peer is the other end's address and port (zero if the kernel gave
	// an address family other than AF_INET and AF_INET6).
	Peer netip.AddrPort
	// Cookie is the completion cookie of a client RPC.
	Cookie uint64
	// TxLength is the length of the outgoing message, or -1 before it
	// is known (a server RPC not yet answered).
	TxLength int32
	// TxSent counts the outgoing bytes sent at least once, TxGranted
	// those the receiver allows (including unscheduled bytes), and
	// TxPriority is the priority the receiver asks for.
	TxSent, TxGranted, TxPriority uint32
	// RxLength is the length of the incoming message, or -1 while no
	// packet of it has arrived.
	RxLength int32
	// RxRemaining counts the incoming bytes not yet received; RxGaps and
	// RxGapBytes the holes before the highest byte received; RxGranted
	// the bytes the sender may send.
	RxRemaining, RxGaps, RxGapBytes, RxGranted uint32
	// Flags are HOMA_RPC_* bits.
	Flags uint16
}

// IsServer reports whether this end is the RPC's server.
func (r *RPCInfo) IsServer() bool { return r.ID&1 == 1 }

// decodeInfo decodes a struct homa_info the kernel filled in, and up to
// its num_rpcs records from rpcs. The kernel's numbers are checked
// before they are used: the port must be a 16-bit value and the error
// message is cut at its terminator or its field's end.
func decodeInfo(u UAPI, a cABI, b, rpcs []byte) (Info, error) {
	l := u.infoLayout(a)
	if len(b) < l.size {
		return Info{}, fmt.Errorf("khoma: homa_info of %d bytes, want %d", len(b), l.size)
	}
	ne := binary.NativeEndian
	in := Info{
		UAPI:       u,
		AvailBytes: ne.Uint64(b[l.availBytes:]),
		NumRPCs:    int(ne.Uint32(b[l.numRPCs:])),
	}
	port := ne.Uint32(b[l.port:])
	if port > 0xffff {
		return Info{}, fmt.Errorf("khoma: HOMAIOCINFO reports port %d", port)
	}
	in.Port = uint16(port)
	msg := b[l.errorMsg : l.errorMsg+l.errorMsgSize]
	if i := bytes.IndexByte(msg, 0); i >= 0 {
		msg = msg[:i]
	}
	in.ErrorMsg = string(msg)
	n := min(in.NumRPCs, len(rpcs)/SizeofRPCInfo)
	if n > 0 {
		in.RPCs = make([]RPCInfo, n)
		for i := range in.RPCs {
			in.RPCs[i] = decodeRPCInfo(rpcs[i*SizeofRPCInfo : (i+1)*SizeofRPCInfo])
		}
	}
	return in, nil
}

// decodeRPCInfo decodes one struct homa_rpc_info.
func decodeRPCInfo(b []byte) RPCInfo {
	ne := binary.NativeEndian
	return RPCInfo{
		ID:          ne.Uint64(b[rpcInfoID:]),
		Peer:        decodeSockaddr(b[rpcInfoPeer : rpcInfoPeer+rpcInfoPeerSize]),
		Cookie:      ne.Uint64(b[rpcInfoCookie:]),
		TxLength:    int32(ne.Uint32(b[rpcInfoTxLength:])),
		TxSent:      ne.Uint32(b[rpcInfoTxSent:]),
		TxGranted:   ne.Uint32(b[rpcInfoTxGranted:]),
		TxPriority:  ne.Uint32(b[rpcInfoTxPrio:]),
		RxLength:    int32(ne.Uint32(b[rpcInfoRxLength:])),
		RxRemaining: ne.Uint32(b[rpcInfoRxRemaining:]),
		RxGaps:      ne.Uint32(b[rpcInfoRxGaps:]),
		RxGapBytes:  ne.Uint32(b[rpcInfoRxGapBytes:]),
		RxGranted:   ne.Uint32(b[rpcInfoRxGranted:]),
		Flags:       ne.Uint16(b[rpcInfoFlags:]),
	}
}

// decodeSockaddr decodes a struct sockaddr_in or sockaddr_in6 (family in
// native order, port in network order).
func decodeSockaddr(b []byte) netip.AddrPort {
	port := binary.BigEndian.Uint16(b[2:])
	switch binary.NativeEndian.Uint16(b) {
	case sockaddrFamilyINET:
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), port)
	case sockaddrFamilyINET6:
		return netip.AddrPortFrom(netip.AddrFrom16([16]byte(b[8:24])), port)
	}
	return netip.AddrPort{}
}

// kernel is the system-call surface of one kernel Homa socket that the
// user API generations differ in. The Linux implementation issues the
// calls on a file descriptor; tests simulate a module.
type kernel interface {
	// ioctl issues request req with the argument at arg.
	ioctl(req uint32, arg unsafe.Pointer) syscall.Errno
	// setsockopt sets option name of level SOL_HOMA to the n bytes at
	// val.
	setsockopt(name int, val unsafe.Pointer, n uintptr) syscall.Errno
}

// readInfo issues HOMAIOCINFO of generation u, with room for up to
// maxRPCs RPC records (itself at most maxInfoRPCs). When the socket has
// more RPCs than the first call had room for, it asks once more with
// room for all of them, up to the bound.
func readInfo(k kernel, u UAPI, a cABI, maxRPCs int) (Info, error) {
	maxRPCs = min(max(maxRPCs, 0), maxInfoRPCs)
	room := min(maxRPCs, 16)
	in, err := infoCall(k, u, a, room)
	if err != nil || in.NumRPCs <= room || room == maxRPCs {
		return in, err
	}
	// A few more in case RPCs start meanwhile.
	return infoCall(k, u, a, min(in.NumRPCs+16, maxRPCs))
}

// infoCall is one HOMAIOCINFO call with room for n RPC records.
func infoCall(k kernel, u UAPI, a cABI, n int) (Info, error) {
	var (
		rpcs []byte
		addr uint64
		pin  runtime.Pinner
	)
	if n > 0 {
		rpcs = make([]byte, n*SizeofRPCInfo)
		// The kernel writes the records through the address stored
		// in the argument: the buffer must stay where it is.
		pin.Pin(&rpcs[0])
		defer pin.Unpin()
		addr = uint64(uintptr(unsafe.Pointer(&rpcs[0])))
	}
	b := u.marshalInfo(a, addr, uint64(len(rpcs)))
	if e := k.ioctl(u.HOMAIOCINFO(), unsafe.Pointer(&b[0])); e != 0 {
		return Info{}, e
	}
	return decodeInfo(u, a, b, rpcs)
}

// errorMessage is the module's text for the last error on the socket,
// or "" when it cannot be had.
func errorMessage(k kernel, u UAPI) string {
	in, err := readInfo(k, u, nativeABI, 0)
	if err != nil {
		return ""
	}
	return in.ErrorMsg
}

// fillStats sets the fields of st that HOMAIOCINFO describes: the
// socket's client and server RPCs as the kernel counts them (a server
// RPC lives until the client acknowledges its response, as in the
// engine), and, over the RPCs reported, the incoming messages still
// arriving (Grants: Active, Grantable, Incoming) and the outgoing
// messages with bytes still to send (Pacer: Queued, QueuedBytes). The
// RPC counts are left alone when Info does not hold every RPC.
func (in *Info) fillStats(st *contract.Stats) {
	var clients, servers int
	for i := range in.RPCs {
		r := &in.RPCs[i]
		if r.IsServer() {
			servers++
		} else {
			clients++
		}
		if r.RxLength >= 0 && r.RxRemaining > 0 {
			length := uint32(r.RxLength)
			received := length - min(r.RxRemaining, length)
			st.Grants.Active++
			if r.RxGranted < length {
				st.Grants.Grantable++
			}
			if r.RxGranted > received {
				st.Grants.Incoming += int(min(r.RxGranted, length) - received)
			}
		}
		if r.TxLength >= 0 && r.TxSent < uint32(r.TxLength) {
			st.Pacer.Queued++
			st.Pacer.QueuedBytes += uint64(uint32(r.TxLength) - r.TxSent)
		}
	}
	if in.Complete() {
		st.ClientRPCs, st.ServerRPCs = clients, servers
	}
}

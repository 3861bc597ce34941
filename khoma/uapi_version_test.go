package khoma

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
)

// The C ABIs the layouts are checked for: every 64-bit Linux, i386 (__u64
// aligned to 4) and 32-bit ARM (__u64 aligned to 8).
var (
	abi64  = cABI{ptr: 8, align64: 8}
	abi386 = cABI{ptr: 4, align64: 4}
	abiARM = cABI{ptr: 4, align64: 8}
)

func TestNativeABI(t *testing.T) {
	for _, c := range []struct {
		goarch string
		ptr    int
		want   cABI
	}{{"amd64", 8, abi64}, {"arm64", 8, abi64}, {"386", 4, abi386}, {"arm", 4, abiARM}, {"mipsle", 4, abiARM}} {
		if got := abiOf(c.goarch, c.ptr); got != c.want {
			t.Errorf("abiOf(%s) = %+v, want %+v", c.goarch, got, c.want)
		}
	}
}

// TestIoctlNumbers checks both generations' request numbers against
// their headers: linux_6.13.9 has _IOWR('h', 1, struct homa_info),
// _IOWR('h', 2, struct homa_abort_args) and _IO('h', 3); main has the
// same at 0x90, 0x91 and 0x92. With the asm-generic encoding: direction
// 3 in bits 30-31, size in bits 16-29 (136 = 0x88, 32 = 0x20), type 'h'
// (0x68) in bits 8-15, number in bits 0-7.
func TestIoctlNumbers(t *testing.T) {
	skipIf32Bit(t)
	if iocSizeBits != 14 {
		t.Skip("the expected values are for the asm-generic ioctl encoding")
	}
	for _, c := range []struct {
		u                   UAPI
		info, abort, freeze uint32
	}{
		{UAPI613, 0xc0886801, 0xc0206802, 0x00006803},
		{UAPI617, 0xc0886890, 0xc0206891, 0x00006892},
	} {
		if got := c.u.HOMAIOCINFO(); got != c.info {
			t.Errorf("%v: HOMAIOCINFO = %#x, want %#x", c.u, got, c.info)
		}
		if got := c.u.HOMAIOCABORT(); got != c.abort {
			t.Errorf("%v: HOMAIOCABORT = %#x, want %#x", c.u, got, c.abort)
		}
		if got := c.u.HOMAIOCFREEZE(); got != c.freeze {
			t.Errorf("%v: HOMAIOCFREEZE = %#x, want %#x", c.u, got, c.freeze)
		}
	}
}

// TestIoctlNumbersDisjoint checks what makes the probe safe: no
// generation's HOMAIOCINFO is an ioctl of another generation, nor of the
// module before HOMAIOCINFO existed (HOMAIOCABORT _IOWR(0x89, 0xe3,
// struct homa_abort_args), HOMAIOCFREEZE _IO(0x89, 0xef)).
func TestIoctlNumbersDisjoint(t *testing.T) {
	owner := map[uint32]string{
		iowr(0x89, 0xe3, SizeofAbortArgs): "pre-2025-10 HOMAIOCABORT",
		ionone(0x89, 0xef):                "pre-2025-10 HOMAIOCFREEZE",
	}
	for _, u := range uapis {
		for _, req := range []uint32{u.HOMAIOCINFO(), u.HOMAIOCABORT(), u.HOMAIOCFREEZE()} {
			if o, ok := owner[req]; ok {
				t.Errorf("%v: request %#x is also %s", u, req, o)
			}
			owner[req] = u.String()
		}
	}
}

func TestRcvbufLayout(t *testing.T) {
	for _, c := range []struct {
		u    UAPI
		abi  cABI
		want rcvbufLayout
	}{
		// linux_6.13.9: { __u64 start; size_t length; }
		{UAPI613, abi64, rcvbufLayout{length: 8, lengthSize: 8, size: 16}},
		{UAPI613, abi386, rcvbufLayout{length: 8, lengthSize: 4, size: 12}},
		{UAPI613, abiARM, rcvbufLayout{length: 8, lengthSize: 4, size: 16}},
		// main: { __u64 start; __u64 length; }
		{UAPI617, abi64, rcvbufLayout{length: 8, lengthSize: 8, size: 16}},
		{UAPI617, abi386, rcvbufLayout{length: 8, lengthSize: 8, size: 16}},
		{UAPI617, abiARM, rcvbufLayout{length: 8, lengthSize: 8, size: 16}},
	} {
		if got := c.u.rcvbufLayout(c.abi); got != c.want {
			t.Errorf("%v %+v: homa_rcvbuf_args %+v, want %+v", c.u, c.abi, got, c.want)
		}
	}
}

func TestInfoLayout(t *testing.T) {
	// main: __u64 rpc_info, __u64 rpc_info_length, __u64
	// bpool_avail_bytes, __u32 port, __u32 num_rpcs, char error_msg[104]:
	// 136 bytes everywhere.
	main := infoLayout{rpcInfo: 0, rpcInfoLength: 8, wordSize: 8, availBytes: 16, port: 24, numRPCs: 28, errorMsg: 32, errorMsgSize: 104, size: 136}
	// linux_6.13.9: struct homa_rpc_info *rpc_info, size_t
	// rpc_info_length, then the same with error_msg[100].
	old64 := infoLayout{rpcInfo: 0, rpcInfoLength: 8, wordSize: 8, availBytes: 16, port: 24, numRPCs: 28, errorMsg: 32, errorMsgSize: 100, size: 136}
	old32 := infoLayout{rpcInfo: 0, rpcInfoLength: 4, wordSize: 4, availBytes: 8, port: 16, numRPCs: 20, errorMsg: 24, errorMsgSize: 100, size: 124}
	oldARM := old32
	oldARM.size = 128 // padded to the alignment of __u64
	for _, c := range []struct {
		u    UAPI
		abi  cABI
		want infoLayout
	}{
		{UAPI613, abi64, old64}, {UAPI613, abi386, old32}, {UAPI613, abiARM, oldARM},
		{UAPI617, abi64, main}, {UAPI617, abi386, main}, {UAPI617, abiARM, main},
	} {
		if got := c.u.infoLayout(c.abi); got != c.want {
			t.Errorf("%v %+v: homa_info\n got %+v\nwant %+v", c.u, c.abi, got, c.want)
		}
	}
	skipIf32Bit(t)
	for _, u := range uapis {
		if u.SizeofInfo() != 136 || u.SizeofRcvbufArgs() != 16 {
			t.Errorf("%v: sizeof homa_info %d, homa_rcvbuf_args %d; want 136 and 16", u, u.SizeofInfo(), u.SizeofRcvbufArgs())
		}
	}
}

// TestMarshal checks the bytes of both arguments, built field by field.
func TestMarshal(t *testing.T) {
	ne := binary.NativeEndian
	for _, c := range []struct {
		u    UAPI
		abi  cABI
		want []byte
	}{
		{UAPI613, abi64, ne.AppendUint64(ne.AppendUint64(nil, 0x7f0000001000), 64<<20)},
		{UAPI617, abi64, ne.AppendUint64(ne.AppendUint64(nil, 0x7f0000001000), 64<<20)},
		{UAPI613, abi386, ne.AppendUint32(ne.AppendUint64(nil, 0x7f0000001000), 64<<20)},
		{UAPI613, abiARM, append(ne.AppendUint32(ne.AppendUint64(nil, 0x7f0000001000), 64<<20), 0, 0, 0, 0)},
		{UAPI617, abi386, ne.AppendUint64(ne.AppendUint64(nil, 0x7f0000001000), 64<<20)},
	} {
		got, err := c.u.marshalRcvbuf(c.abi, 0x7f0000001000, 64<<20)
		if err != nil || !bytes.Equal(got, c.want) {
			t.Errorf("%v %+v: homa_rcvbuf_args bytes\n got %x, %v\nwant %x", c.u, c.abi, got, err, c.want)
		}
	}
	if _, err := UAPI613.marshalRcvbuf(abi386, 0x1000, 1<<32); err == nil {
		t.Error("a 4 GiB region fits a 32-bit size_t")
	}

	for _, c := range []struct {
		u    UAPI
		abi  cABI
		want []byte
	}{
		{UAPI617, abi64, append(ne.AppendUint64(ne.AppendUint64(nil, 0xabc000), 3*184), make([]byte, 136-16)...)},
		{UAPI613, abi64, append(ne.AppendUint64(ne.AppendUint64(nil, 0xabc000), 3*184), make([]byte, 136-16)...)},
		{UAPI613, abi386, append(ne.AppendUint32(ne.AppendUint32(nil, 0xabc000), 3*184), make([]byte, 124-8)...)},
		{UAPI617, abi386, append(ne.AppendUint64(ne.AppendUint64(nil, 0xabc000), 3*184), make([]byte, 136-16)...)},
	} {
		if got := c.u.marshalInfo(c.abi, 0xabc000, 3*184); !bytes.Equal(got, c.want) {
			t.Errorf("%v %+v: homa_info bytes\n got %x\nwant %x", c.u, c.abi, got, c.want)
		}
	}
}

// rpcInfoBytes builds a struct homa_rpc_info field by field.
func rpcInfoBytes(id uint64, peer netip.AddrPort, cookie uint64, tx [4]uint32, rx [5]uint32, flags uint16) []byte {
	ne := binary.NativeEndian
	b := ne.AppendUint64(nil, id)
	sa := make([]byte, 128)
	if peer.Addr().Is4() {
		ne.PutUint16(sa, 2)
		binary.BigEndian.PutUint16(sa[2:], peer.Port())
		a := peer.Addr().As4()
		copy(sa[4:], a[:])
	} else if peer.IsValid() {
		ne.PutUint16(sa, 10)
		binary.BigEndian.PutUint16(sa[2:], peer.Port())
		a := peer.Addr().As16()
		copy(sa[8:], a[:])
	}
	b = append(b, sa...)
	b = ne.AppendUint64(b, cookie)
	for _, v := range tx {
		b = ne.AppendUint32(b, v)
	}
	for _, v := range rx {
		b = ne.AppendUint32(b, v)
	}
	b = ne.AppendUint16(b, flags)
	return append(b, 0, 0) // padding to 184
}

func TestDecodeRPCInfo(t *testing.T) {
	v6 := netip.MustParseAddrPort("[fd00::1:2]:40001")
	b := rpcInfoBytes(0x1235, v6, 0, [4]uint32{0xffffffff, 0, 0, 0}, [5]uint32{300000, 100000, 2, 3000, 150000}, HOMA_RPC_RX_COPY)
	if len(b) != SizeofRPCInfo {
		t.Fatalf("built %d bytes, want %d", len(b), SizeofRPCInfo)
	}
	want := RPCInfo{ID: 0x1235, Peer: v6, TxLength: -1, RxLength: 300000, RxRemaining: 100000, RxGaps: 2, RxGapBytes: 3000, RxGranted: 150000, Flags: HOMA_RPC_RX_COPY}
	if got := decodeRPCInfo(b); got != want {
		t.Errorf("decoded\n got %+v\nwant %+v", got, want)
	}
	if !want.IsServer() {
		t.Error("odd id is not a server RPC")
	}

	v4 := netip.MustParseAddrPort("10.146.12.2:500")
	b = rpcInfoBytes(0x88, v4, 7, [4]uint32{5000, 2800, 5000, 3}, [5]uint32{0xffffffff, 0, 0, 0, 0}, HOMA_RPC_PRIVATE)
	want = RPCInfo{ID: 0x88, Peer: v4, Cookie: 7, TxLength: 5000, TxSent: 2800, TxGranted: 5000, TxPriority: 3, RxLength: -1, Flags: HOMA_RPC_PRIVATE}
	if got := decodeRPCInfo(b); got != want {
		t.Errorf("decoded\n got %+v\nwant %+v", got, want)
	}

	binary.NativeEndian.PutUint16(b[rpcInfoPeer:], 1) // AF_UNIX
	if got := decodeRPCInfo(b); got.Peer.IsValid() {
		t.Errorf("peer of family 1 decoded as %v", got.Peer)
	}
}

func TestDecodeInfo(t *testing.T) {
	for _, u := range uapis {
		l := u.infoLayout(abi64)
		ne := binary.NativeEndian
		b := make([]byte, l.size)
		ne.PutUint64(b[16:], 0x123456)
		ne.PutUint32(b[24:], 40000)
		ne.PutUint32(b[28:], 3)
		copy(b[32:], "receive buffer region is not writable\x00junk")
		rpcs := append(rpcInfoBytes(2, netip.MustParseAddrPort("1.2.3.4:5"), 9, [4]uint32{10, 10, 10, 0}, [5]uint32{20, 5, 0, 0, 20}, 0),
			rpcInfoBytes(5, netip.MustParseAddrPort("1.2.3.4:6"), 0, [4]uint32{0xffffffff}, [5]uint32{8, 0, 0, 0, 8}, HOMA_RPC_RX_READY)...)
		in, err := decodeInfo(u, abi64, b, rpcs)
		if err != nil {
			t.Fatal(err)
		}
		if in.UAPI != u || in.AvailBytes != 0x123456 || in.Port != 40000 || in.NumRPCs != 3 ||
			in.ErrorMsg != "receive buffer region is not writable" || len(in.RPCs) != 2 || in.Complete() {
			t.Errorf("%v: decoded %+v", u, in)
		}
		if in.RPCs[0].ID != 2 || in.RPCs[1].ID != 5 || in.RPCs[1].Flags != HOMA_RPC_RX_READY {
			t.Errorf("%v: RPCs %+v", u, in.RPCs)
		}

		// An error message that fills its field has no terminator.
		for i := range l.errorMsgSize {
			b[32+i] = 'x'
		}
		if in, _ := decodeInfo(u, abi64, b, nil); len(in.ErrorMsg) != l.errorMsgSize || in.RPCs != nil {
			t.Errorf("%v: unterminated message decoded as %d bytes, %d RPCs", u, len(in.ErrorMsg), len(in.RPCs))
		}
		ne.PutUint32(b[24:], 0x10000)
		if _, err := decodeInfo(u, abi64, b, nil); err == nil {
			t.Errorf("%v: port 65536 accepted", u)
		}
		if _, err := decodeInfo(u, abi64, b[:l.size-1], nil); err == nil {
			t.Errorf("%v: short homa_info accepted", u)
		}
	}
}

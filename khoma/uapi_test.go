package khoma

import (
	"bytes"
	"encoding/binary"
	"testing"
	"unsafe"
)

// The layouts below are those of include/uapi/linux/homa.h on a 64-bit
// system (size_t and pointers of 8 bytes).
func skipIf32Bit(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("the uapi layouts are checked on 64-bit systems")
	}
}

type field struct {
	name        string
	offset, got uintptr
}

func checkLayout(t *testing.T, name string, size, want uintptr, fields []field) {
	t.Helper()
	if size != want {
		t.Errorf("sizeof(struct %s) = %d, want %d", name, size, want)
	}
	for _, f := range fields {
		if f.got != f.offset {
			t.Errorf("offsetof(struct %s, %s) = %d, want %d", name, f.name, f.got, f.offset)
		}
	}
}

func TestLayouts(t *testing.T) {
	skipIf32Bit(t)
	var s SendmsgArgs
	checkLayout(t, "homa_sendmsg_args", unsafe.Sizeof(s), 24, []field{
		{"id", 0, unsafe.Offsetof(s.ID)},
		{"completion_cookie", 8, unsafe.Offsetof(s.CompletionCookie)},
		{"flags", 16, unsafe.Offsetof(s.Flags)},
		{"reserved", 20, unsafe.Offsetof(s.Reserved)},
	})
	var r RecvmsgArgs
	checkLayout(t, "homa_recvmsg_args", unsafe.Sizeof(r), 88, []field{
		{"id", 0, unsafe.Offsetof(r.ID)},
		{"completion_cookie", 8, unsafe.Offsetof(r.CompletionCookie)},
		{"num_bpages", 16, unsafe.Offsetof(r.NumBpages)},
		{"reserved", 20, unsafe.Offsetof(r.Reserved)},
		{"bpage_offsets", 24, unsafe.Offsetof(r.BpageOffsets)},
	})
	var a AbortArgs
	checkLayout(t, "homa_abort_args", unsafe.Sizeof(a), 32, []field{
		{"id", 0, unsafe.Offsetof(a.ID)},
		{"error", 8, unsafe.Offsetof(a.Error)},
		{"_pad1", 12, unsafe.Offsetof(a.pad1)},
		{"_pad2", 16, unsafe.Offsetof(a.pad2)},
	})
	if SizeofSendmsgArgs != 24 || SizeofRecvmsgArgs != 88 || SizeofAbortArgs != 32 {
		t.Errorf("Sizeof constants %d %d %d", SizeofSendmsgArgs, SizeofRecvmsgArgs, SizeofAbortArgs)
	}
}

func TestConstants(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want int
	}{
		{"IPPROTO_HOMA", IPPROTO_HOMA, 146},
		{"SOL_HOMA", SOL_HOMA, 146},
		{"SO_HOMA_RCVBUF", SO_HOMA_RCVBUF, 10},
		{"SO_HOMA_SERVER", SO_HOMA_SERVER, 11},
		{"HOMA_MAX_MESSAGE_LENGTH", HOMA_MAX_MESSAGE_LENGTH, 1000000},
		{"HOMA_BPAGE_SIZE", HOMA_BPAGE_SIZE, 65536},
		{"HOMA_MAX_BPAGES", HOMA_MAX_BPAGES, 16},
		{"HOMA_MIN_DEFAULT_PORT", HOMA_MIN_DEFAULT_PORT, 32768},
		{"HOMA_SENDMSG_PRIVATE", HOMA_SENDMSG_PRIVATE, 1},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
		}
	}
}

func raw[T any](v *T) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(v)), unsafe.Sizeof(*v))
}

// TestBytes checks the bytes the kernel reads for known values, built
// field by field in native byte order.
func TestBytes(t *testing.T) {
	skipIf32Bit(t)
	ne := binary.NativeEndian

	s := SendmsgArgs{ID: 0x0102030405060708, CompletionCookie: 0x1112131415161718, Flags: HOMA_SENDMSG_PRIVATE}
	want := ne.AppendUint64(nil, 0x0102030405060708)
	want = ne.AppendUint64(want, 0x1112131415161718)
	want = ne.AppendUint32(want, 1)
	want = ne.AppendUint32(want, 0)
	if got := raw(&s); !bytes.Equal(got, want) {
		t.Errorf("homa_sendmsg_args bytes\n got %x\nwant %x", got, want)
	}

	r := RecvmsgArgs{ID: 0x21, CompletionCookie: 0x22, NumBpages: 3}
	for i := range r.BpageOffsets {
		r.BpageOffsets[i] = uint32(i) << HOMA_BPAGE_SHIFT
	}
	r.BpageOffsets[2] += 0x123
	want = ne.AppendUint64(nil, 0x21)
	want = ne.AppendUint64(want, 0x22)
	want = ne.AppendUint32(want, 3)
	want = ne.AppendUint32(want, 0)
	for i := range HOMA_MAX_BPAGES {
		off := uint32(i) << HOMA_BPAGE_SHIFT
		if i == 2 {
			off += 0x123
		}
		want = ne.AppendUint32(want, off)
	}
	if got := raw(&r); !bytes.Equal(got, want) {
		t.Errorf("homa_recvmsg_args bytes\n got %x\nwant %x", got, want)
	}

	a := AbortArgs{ID: 0x31, Error: 125}
	want = ne.AppendUint64(nil, 0x31)
	want = ne.AppendUint32(want, 125)
	want = append(want, make([]byte, 20)...)
	if got := raw(&a); !bytes.Equal(got, want) {
		t.Errorf("homa_abort_args bytes\n got %x\nwant %x", got, want)
	}
}

//go:build linux

package khoma

import (
	"context"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The tests below run against the loaded Homa module (the QEMU rig runs
// them in its guest) and skip without one. HOMA_EXPECT_UAPI=613 or 617
// makes them check that detection found that generation.

// expectUAPI checks the detected generation against HOMA_EXPECT_UAPI.
func expectUAPI(t *testing.T, s *Socket) {
	t.Helper()
	t.Logf("module speaks the %v", s.UAPI())
	want := map[string]UAPI{"613": UAPI613, "617": UAPI617}[os.Getenv("HOMA_EXPECT_UAPI")]
	if want != 0 && s.UAPI() != want {
		t.Errorf("detected %v, HOMA_EXPECT_UAPI wants %v", s.UAPI(), want)
	}
}

// TestKernelInfo reads HOMAIOCINFO of a fresh socket, and of both ends of
// an RPC that the server has not answered.
func TestKernelInfo(t *testing.T) {
	server := openKernel(t, "127.0.0.1:4111", true)
	client := openKernel(t, "127.0.0.1:0", false)
	expectUAPI(t, client)
	in, err := client.Info(maxInfoRPCs)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("fresh socket: %+v", in)
	if in.UAPI != client.UAPI() || in.Port != client.LocalAddr().Port() || in.NumRPCs != 0 ||
		in.AvailBytes == 0 || in.AvailBytes > RegionBytes {
		t.Errorf("fresh client socket: %+v (port %d)", in, client.LocalAddr().Port())
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req := payload(1, 3000)
	id, err := client.Send(server.LocalAddr(), req, 77)
	if err != nil {
		t.Fatal(err)
	}
	m, err := server.Recv(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	cin, err := client.Info(maxInfoRPCs)
	if err != nil {
		t.Fatal(err)
	}
	sin, err := server.Info(maxInfoRPCs)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("client: %+v", cin)
	t.Logf("server: %+v", sin)
	if len(cin.RPCs) != 1 || cin.RPCs[0].ID != id || cin.RPCs[0].Cookie != 77 || cin.RPCs[0].Peer != server.LocalAddr() ||
		cin.RPCs[0].TxLength != int32(len(req)) || cin.RPCs[0].IsServer() {
		t.Errorf("client RPCs %+v, want id %d to %v", cin.RPCs, id, server.LocalAddr())
	}
	if len(sin.RPCs) != 1 || sin.RPCs[0].ID != m.ID || !sin.RPCs[0].IsServer() || sin.RPCs[0].Peer != client.LocalAddr() ||
		sin.RPCs[0].RxLength != int32(len(req)) || sin.RPCs[0].RxRemaining != 0 || sin.RPCs[0].TxLength != -1 {
		t.Errorf("server RPCs %+v, want id %d from %v", sin.RPCs, m.ID, client.LocalAddr())
	}
	if st := client.Stats(); st.ClientRPCs != 1 || st.ServerRPCs != 0 {
		t.Errorf("client stats: %d client, %d server RPCs", st.ClientRPCs, st.ServerRPCs)
	}
	if st := server.Stats(); st.ServerRPCs != 1 || st.ClientRPCs != 0 {
		t.Errorf("server stats: %d client, %d server RPCs", st.ClientRPCs, st.ServerRPCs)
	}
	if err := server.Reply(m.Peer, m.ID, m.Data); err != nil {
		t.Fatal(err)
	}
	if r, err := client.Recv(ctx, id); err != nil || r.Err != nil {
		t.Fatalf("response: %v %v", r, err)
	}
	if st := client.Stats(); st.ClientRPCs != 0 {
		t.Errorf("client stats after the response: %d client RPCs", st.ClientRPCs)
	}
}

// TestKernelAbortIoctl checks that HOMAIOCABORT of the detected
// generation reaches the module (Socket.Abort tolerates its failure, so
// TestKernelAbort alone would not notice a wrong number), and that the
// other generation's number is refused.
func TestKernelAbortIoctl(t *testing.T) {
	silent := openKernel(t, "127.0.0.1:4112", true)
	client := openKernel(t, "127.0.0.1:0", false)
	expectUAPI(t, client)
	c := client.c.(*sysConn)
	id, err := client.Send(silent.LocalAddr(), []byte("never answered"), 0)
	if err != nil {
		t.Fatal(err)
	}
	other := UAPI613
	if c.api == UAPI613 {
		other = UAPI617
	}
	a := AbortArgs{ID: id}
	var errno syscall.Errno
	if err := c.rc.Control(func(fd uintptr) {
		errno = fdKernel(fd).ioctl(other.HOMAIOCABORT(), unsafe.Pointer(&a))
	}); err != nil {
		t.Fatal(err)
	}
	if errno != unix.EINVAL {
		t.Errorf("HOMAIOCABORT of the %v = %v, want EINVAL", other, errno)
	}
	if in, err := client.Info(maxInfoRPCs); err != nil || in.NumRPCs != 1 || in.ErrorMsg == "" {
		t.Errorf("after the refused abort: %+v, %v", in, err)
	} else {
		t.Logf("the module's error message: %q", in.ErrorMsg)
	}
	if err := c.abort(&AbortArgs{ID: id}); err != nil {
		t.Fatalf("HOMAIOCABORT %#x: %v", c.api.HOMAIOCABORT(), err)
	}
	if in, err := client.Info(maxInfoRPCs); err != nil || in.NumRPCs != 0 {
		t.Errorf("after HOMAIOCABORT: %d RPCs, %v", in.NumRPCs, err)
	}
}

// TestKernelErrorMessage: a sendmsg the module refuses leaves its
// explanation for HOMAIOCINFO.
func TestKernelErrorMessage(t *testing.T) {
	client := openKernel(t, "127.0.0.1:0", false)
	c := client.c.(*sysConn)
	a := SendmsgArgs{Flags: 0x80} // not a HOMA_SENDMSG_* bit
	err := c.sendmsg(client.LocalAddr(), &a, []byte("x"))
	if !errors.Is(err, unix.EINVAL) {
		t.Fatalf("sendmsg with flags 0x80 = %v, want EINVAL", err)
	}
	in, err := client.Info(0)
	if err != nil || !strings.Contains(in.ErrorMsg, "homa_sendmsg_args") {
		t.Errorf("Info after the refused sendmsg: %+v, %v; want a message about homa_sendmsg_args", in, err)
	}
	t.Logf("the module's error message: %q", in.ErrorMsg)
}

//go:build linux

package netio

import "golang.org/x/sys/unix"

// cmsgModel is the model the fuzz targets hold parseGRO and
// parseRecvErr to: it walks ctl with x/sys's control message parser
// (unix.ParseOneSocketControlMessage), independent of cmsgHeader, and
// returns the data of the first message that match accepts. Like the
// code under test it stops, finding nothing, at the first malformed
// header.
func cmsgModel(ctl []byte, match func(level, typ int32) bool) ([]byte, bool) {
	for len(ctl) >= unix.SizeofCmsghdr {
		h, data, rest, err := unix.ParseOneSocketControlMessage(ctl)
		if err != nil {
			return nil, false
		}
		if match(h.Level, h.Type) {
			return data, true
		}
		ctl = rest
	}
	return nil, false
}

// fuzzPrefix is count%4 control messages of another kind (IP_TOS, with
// up to 64 bytes of data), for the fuzz targets to put in front of the
// one they encode.
func fuzzPrefix(count uint8, data []byte) []byte {
	var b []byte
	for range count % 4 {
		b = append(b, cmsg(unix.SOL_IP, unix.IP_TOS, data[:min(len(data), 64)])...)
	}
	return b
}

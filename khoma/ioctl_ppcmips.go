//go:build ppc64 || ppc64le || mips || mipsle || mips64 || mips64le

package khoma

// The PowerPC and MIPS ioctl encoding: 3 direction bits, 13 size bits.
const (
	iocNone     = 1
	iocSizeBits = 13
	iocWrite    = 4
	iocRead     = 2
)

//go:build !(ppc64 || ppc64le || mips || mipsle || mips64 || mips64le)

package khoma

// The asm-generic ioctl encoding (x86, arm, arm64, riscv, loong64, s390x):
// 2 direction bits, 14 size bits.
const (
	iocNone     = 0
	iocSizeBits = 14
	iocWrite    = 1
	iocRead     = 2
)

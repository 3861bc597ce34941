#!/bin/bash
# Build the Linux Homa module test rig (shared/rig) with the module's main
# branch instead of linux_6.13.9, so the kernel backend can be tested
# against main's user API (ioctls 'h' 0x90..0x92, __u64 lengths).
#
#   build-main.sh RIG_DIR HOMAMODULE_GIT_DIR
#
# RIG_DIR: where the rig goes (conventionally $TMPDIR/homavm612main). The
# rig is the shared one in every other respect (same guest kernel, netns
# homa612, addresses, run-vm.sh and guestcmd.py), so only one of the two
# rigs can run at a time.
#
# Env: SHARED_RIG (default: shared/rig beside the project checkout);
# HOMA_REF (default main); KVER (default 6.12.111+deb12).
#
# Main targets Linux 6.17, but builds unmodified against Debian's 6.12
# kernel headers (it keeps LINUX_VERSION_CODE branches for kernels before
# 6.15); Debian's mirrors carry 6.17 kernel images but no longer their
# headers or kbuild, so the guest kernel stays Debian bookworm's 6.12. No
# rig patch is applied: main already reports an unbound socket's default
# port in getsockname (the fix shared/rig/patches/0001 carries for
# linux_6.13.9).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
RIG=${1:?usage: build-main.sh RIG_DIR HOMAMODULE_GIT_DIR}
GIT=${2:?usage: build-main.sh RIG_DIR HOMAMODULE_GIT_DIR}
SHARED_RIG=${SHARED_RIG:-$ROOT/../shared/rig}
[ -x "$SHARED_RIG/build.sh" ] || { echo "no $SHARED_RIG/build.sh (set SHARED_RIG)" >&2; exit 1; }

HOMA_REF=${HOMA_REF:-main} HOMA_PATCHES=none KVER=${KVER:-6.12.111+deb12} \
	"$SHARED_RIG/build.sh" "$RIG" "$GIT"

# The point of this rig is main's user API: refuse a module that has the
# older ioctl numbers.
if ! grep -q "HOMAIOCINFO *_IOWR('h', 0x90" "$RIG/src/homa.h"; then
	echo "build-main.sh: $RIG/src/homa.h does not define HOMAIOCINFO as _IOWR('h', 0x90, ...):" >&2
	grep -n 'HOMAIOC' "$RIG/src/homa.h" >&2 || true
	exit 1
fi
echo "== main rig: HomaModule $(cat "$RIG/src/COMMIT"), uapi ioctls:"
grep -n "define HOMAIOC" "$RIG/src/homa.h"

#!/bin/bash
# Run the project's kernel-backend tests against the Homa module of a rig
# (one built by shared/rig/build.sh or scripts/rig/build-main.sh).
#
#   run-tests.sh RIG_DIR 613|617 [STEP...]
#
# 613 or 617 is the user API the module is expected to speak (linux_6.13.9
# or main); the khoma tests fail if detection finds another. Steps (all but
# idle by default, in this order):
#   unbound  a request from the netns to guest port 999 (no socket):
#            tcpdump on tap612 and the guest's ICMP counters show whether
#            the module answers (first, while the guest is quiet)
#   khoma    khoma's TestKernel* in the guest (guest loopback)
#   sock     sock's kernel-backend tests in the guest
#   kcli     sock.Kernel in the guest against `homa serve` in the netns,
#            and `homa ping` from the netns against sock.Kernel in the guest
#   live     interop's live tests from the netns against the guest:
#            TestLive (homa_tool's echo server on port 500),
#            TestLiveNoListener (port 999, where nothing listens) and
#            TestLiveSlowServer (slowecho on port 502, replies after 1 s);
#            LIVE_RUNS=N (default 1) runs them N times in one guest boot.
#            Each run is captured on tap612, with the guest's
#            /proc/net/homa_metrics before and after, kept in OUT_DIR
#            (the capture only of failed runs, unless KEEP_PCAPS=1)
#   idle     capture tap612 for 3 s without sending anything and count the
#            packets by type (what the module still sends after a step)
#   record   record khoma's kernel fixtures in the guest (HOMA_RECORD) and
#            write them into khoma/testdata/kernel/uapi613 or uapi617 of
#            this checkout (not a default step: it changes the checkout;
#            see khoma/testdata/kernel/README.md)
# Builds the test binaries into RIG_DIR/payload, (re)starts the guest,
# runs the steps, stops the guest and every process it started. Needs
# root (netns, raw sockets), tcpdump for `unbound`, `live` and `idle`.
# Prints one PASS/FAIL line per step and exits non-zero if any failed.
# Environment: LIVE_RUNS and KEEP_PCAPS (above); OUT_DIR, where the live
# runs' captures and logs go (default RIG_DIR/out; its live-* files are
# removed first);
# GUEST_GSO: "soft" (the default) sets the module's
# net.homa.gso_force_software in the guest, so that it segments its
# multi-packet sends itself; "hw" leaves the module's default. With "hw",
# linux_6.13.9 marks its multi-packet frames gso_type TCPV6 even over
# IPv4, and the host's tun driver rejects them: every original
# transmission of a multi-packet message from the guest is lost between
# the guest and tap612 and only retransmissions arrive (main marks them
# TCPV4, which passes). See README.md.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
RIG=$(cd "${1:?usage: run-tests.sh RIG_DIR 613|617 [STEP...]}" && pwd)
EXPECT=${2:?usage: run-tests.sh RIG_DIR 613|617 [STEP...]}
shift 2
STEPS=${*:-unbound khoma sock kcli live}
SHARED_RIG=${SHARED_RIG:-$ROOT/../shared/rig}
LIVE_RUNS=${LIVE_RUNS:-1}
OUT=${OUT_DIR:-$RIG/out}
NS=homa612
BIN=$(mktemp -d)
mkdir -p "$OUT" && rm -f "$OUT"/live-* || exit 1
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
	"$RIG/run-vm.sh" stop >/dev/null
	rm -rf "$BIN"
}
trap cleanup EXIT
guest() { python3 "$RIG/guestcmd.py" -t "$1" "$2"; }
declare -A RESULT

echo "== build (project $(git -C "$ROOT" rev-parse --short HEAD), module $(cat "$RIG/src/COMMIT" 2>/dev/null))"
[ -x "$SHARED_RIG/build-kcli.sh" ] || {
	echo "build failed: no $SHARED_RIG/build-kcli.sh (set SHARED_RIG to the shared rig directory)"
	exit 1
}
# Each command is checked on its own: set -e has no effect in a subshell
# whose status is tested, so a failed build would otherwise go unnoticed.
build() { (cd "$ROOT" && "$@") || { echo "build failed: $*" >&2; exit 1; }; }
mkdir -p "$RIG/payload" || exit 1
CGO_ENABLED=0 build go test -c -o "$RIG/payload/khoma.test" ./khoma
CGO_ENABLED=0 build go test -c -o "$RIG/payload/sock.test" ./sock
build "$SHARED_RIG/build-kcli.sh" "$ROOT" "$RIG/payload/kcli" >/dev/null
CGO_ENABLED=0 build go build -o "$RIG/payload/slowecho" ./scripts/rig/slowecho
build go test -c -o "$BIN/interop.test" ./interop
build go build -o "$BIN/homa" ./cmd/homa

echo "== guest"
"$RIG/run-vm.sh" stop >/dev/null
"$RIG/run-vm.sh" start || exit 1
guest 10 "uname -r; grep homa /proc/modules"
case ${GUEST_GSO:-soft} in
soft) guest 10 "echo 1 >/proc/sys/net/homa/gso_force_software" || exit 1 ;;
hw) ;;
*) echo "GUEST_GSO=$GUEST_GSO: want soft or hw"; exit 1 ;;
esac
echo "guest net.homa.gso_force_software = $(guest 10 "cat /proc/sys/net/homa/gso_force_software")"

step() { # name command...
	local name=$1
	shift
	echo "== $name: $*"
	if "$@"; then RESULT[$name]=PASS; else RESULT[$name]=FAIL; fi
}

run_khoma() {
	guest 900 "cd /tmp && HOMA_EXPECT_UAPI=$EXPECT /payload/khoma.test -test.v -test.count=1 -test.timeout=14m -test.run 'TestKernel|TestOpen'"
}

run_sock() {
	guest 900 "cd /tmp && /payload/sock.test -test.v -test.count=1 -test.timeout=14m -test.run 'Kernel'"
}

run_kcli() {
	ip netns exec "$NS" "$BIN/homa" serve --addr 10.146.12.1:600 >"$BIN/serve.log" 2>&1 &
	local serve=$!
	PIDS+=("$serve")
	sleep 1
	guest 300 "/payload/kcli client 10.146.12.1:600 200000 3" || return 1
	guest 10 "/payload/kcli server 0.0.0.0:501 >/tmp/k501.log 2>&1 &" || return 1
	sleep 2
	ip netns exec "$NS" "$BIN/homa" ping --addr 10.146.12.2:501 --size 5000 --count 5 --timeout 10s || return 1
	guest 5 "cat /tmp/k501.log"
	# Stop the netns server so that the steps after this one start
	# without a raw IP-146 socket in the netns.
	kill "$serve"
	wait "$serve" 2>/dev/null
	return 0
}

# metrics FILE: the guest's Homa counters into FILE.
metrics() {
	guest 10 "cat /proc/net/homa_metrics" >"$1" 2>&1
}

# metrics_diff BEFORE AFTER: the counters (summed over the guest's
# cores) that changed, with the change.
metrics_diff() {
	awk 'NF >= 2 && $2 ~ /^[0-9]+$/ && $1 !~ /^(core|time_cycles|cpu_khz)$|_cycles$/ {
			if (!($1 in seen)) { seen[$1] = 1; order[++n] = $1 }
			if (NR == FNR) a[$1] += $2; else b[$1] += $2
		}
		END { for (i = 1; i <= n; i++) { k = order[i]; if (b[k] != a[k]) printf "  %-28s %16.0f\n", k, b[k] - a[k] } }' "$1" "$2"
}

# tapdrops: packets from the netns to the guest that tap612 dropped
# because the guest did not take them in time.
tapdrops() {
	ip netns exec "$NS" cat /sys/class/net/tap612/statistics/tx_dropped
}

run_live() {
	guest 10 "/payload/slowecho -delay 1s 0.0.0.0:502 >/tmp/slow502.log 2>&1 &" || return 1
	sleep 2
	local i ok=0 verdict drops
	for i in $(seq 1 "$LIVE_RUNS"); do
		echo "-- live run $i of $LIVE_RUNS (captured in $OUT/live-$i.*), host load average $(cut -d' ' -f1-3 /proc/loadavg)"
		metrics "$OUT/live-$i.metrics-before"
		drops=$(tapdrops)
		ip netns exec "$NS" tcpdump -i tap612 -nn -U -w "$OUT/live-$i.pcap" 'icmp or ip proto 146' 2>/dev/null &
		local dump=$!
		PIDS+=("$dump")
		sleep 1
		if (cd "$ROOT/interop" && ip netns exec "$NS" env HOMA_INTEROP_PEER=10.146.12.2:500 \
			HOMA_INTEROP_UNBOUND_PORT=999 HOMA_INTEROP_SLOW_PEER=10.146.12.2:502 \
			"$BIN/interop.test" -test.run 'TestLive$|TestLiveNoListener|TestLiveSlowServer' \
			-test.v -test.count=1 -test.timeout=15m) >"$OUT/live-$i.log" 2>&1; then
			ok=$((ok + 1))
			verdict="run $i: PASS"
		else
			verdict="run $i: FAIL"
		fi
		echo "$verdict"
		sleep 1
		kill "$dump"
		wait "$dump" 2>/dev/null
		if [ "$verdict" = "run $i: PASS" ] && [ "${KEEP_PCAPS:-0}" != 1 ]; then
			rm -f "$OUT/live-$i.pcap"
		fi
		metrics "$OUT/live-$i.metrics-after"
		echo "tap612 dropped $(($(tapdrops) - drops)) packets to the guest (its queue was full)"
		grep -E '^(=== RUN|--- |    |PASS|FAIL|ok|panic)' "$OUT/live-$i.log" | grep -v '^=== RUN' | head -60
		echo "-- guest homa_metrics that changed during run $i:"
		metrics_diff "$OUT/live-$i.metrics-before" "$OUT/live-$i.metrics-after" | head -60
	done
	echo "-- slowecho in the guest (last lines):"
	guest 5 "tail -3 /tmp/slow502.log"
	echo "live: $ok of $LIVE_RUNS runs passed"
	[ "$ok" = "$LIVE_RUNS" ]
}

run_unbound() {
	local before after
	before=$(guest 5 "grep '^Icmp:' /proc/net/snmp | tail -1")
	ip netns exec "$NS" tcpdump -i tap612 -nn -U -w "$BIN/unbound.pcap" 'icmp or ip proto 146' 2>/dev/null &
	local dump=$!
	PIDS+=("$dump")
	sleep 1
	ip netns exec "$NS" "$BIN/homa" ping --addr 10.146.12.2:999 --count 1 --timeout 3s
	echo "(ping exit $?: an error is expected, nothing listens on port 999)"
	sleep 2
	kill "$dump"
	wait "$dump" 2>/dev/null
	after=$(guest 5 "grep '^Icmp:' /proc/net/snmp | tail -1")
	echo "-- ICMP on tap612 (host 10.146.12.1, guest 10.146.12.2):"
	tcpdump -r "$BIN/unbound.pcap" -nn -v icmp 2>/dev/null | head -40
	echo "-- Homa packets on tap612, by direction and type (homa capture):"
	"$BIN/homa" capture --file "$BIN/unbound.pcap" 2>&1 | awk '{print $2, $3, $4, $5}' | sort | uniq -c | sort -rn | head -20
	echo "-- the first Homa packets:"
	"$BIN/homa" capture --file "$BIN/unbound.pcap" 2>&1 | head -8
	echo "-- guest Icmp counters ($(guest 5 "grep '^Icmp:' /proc/net/snmp | head -1" | cut -c1-200))"
	echo "   before: $before"
	echo "   after:  $after"
	guest 5 "echo icmp_ratelimit \$(cat /proc/sys/net/ipv4/icmp_ratelimit) icmp_ratemask \$(cat /proc/sys/net/ipv4/icmp_ratemask)"
	# The step passes when the capture worked: what the module answered is
	# the finding, printed above.
	tcpdump -r "$BIN/unbound.pcap" -nn 2>/dev/null | grep -q 'proto 146\|ip-proto-146'
}

run_record() {
	local dir="$ROOT/khoma/testdata/kernel"
	guest 300 "rm -rf /tmp/rec && mkdir /tmp/rec && cd /tmp && HOMA_EXPECT_UAPI=$EXPECT HOMA_RECORD=/tmp/rec HOMA_MODULE_COMMIT=$(cat "$RIG/src/COMMIT" 2>/dev/null) /payload/khoma.test -test.v -test.count=1 -test.run 'TestKernelRecordFixtures'" | grep -E '^(---|PASS|FAIL|ok|panic)|--- (PASS|FAIL)' || return 1
	# The fixtures come back base64 over the agent's channel.
	guest 60 "cd /tmp/rec && tar cf - uapi$EXPECT | gzip | base64" >"$BIN/rec.b64" || return 1
	rm -rf "$dir/uapi$EXPECT" && mkdir -p "$dir" || return 1
	base64 -d "$BIN/rec.b64" | tar xzf - -C "$dir" || return 1
	echo "recorded into $dir/uapi$EXPECT:"
	ls -l "$dir/uapi$EXPECT"
}

run_idle() {
	ip netns exec "$NS" timeout 3 tcpdump -i tap612 -nn -U -w "$BIN/idle.pcap" 'icmp or ip proto 146' 2>/dev/null
	echo "-- ICMP packets: $(tcpdump -r "$BIN/idle.pcap" -nn icmp 2>/dev/null | wc -l)"
	tcpdump -r "$BIN/idle.pcap" -nn icmp 2>/dev/null | head -3
	echo "-- Homa packets by direction and type:"
	"$BIN/homa" capture --file "$BIN/idle.pcap" 2>&1 | awk '{print $2, $3, $4, $5}' | sort | uniq -c | sort -rn | head -10
	"$BIN/homa" capture --file "$BIN/idle.pcap" 2>&1 | head -3
	# The step passes when the capture worked: what the module sent is
	# the finding, printed above.
	[ -s "$BIN/idle.pcap" ]
}

for s in $STEPS; do
	case $s in
	khoma | sock | kcli | live | unbound | idle | record) step "$s" "run_$s" ;;
	*) echo "unknown step $s"; RESULT[$s]=FAIL ;;
	esac
done

echo "== summary (rig $RIG, expected uapi $EXPECT)"
rc=0
for s in $STEPS; do
	echo "${RESULT[$s]} $s"
	[ "${RESULT[$s]}" = PASS ] || rc=1
done
exit $rc

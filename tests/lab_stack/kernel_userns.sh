#!/bin/bash
# The kernel's own TCP/IP stack for an unprivileged user: two network namespaces inside a
# user namespace that user owns, joined by veth pairs whose far ends are bridged in user
# space by l2relay.py (AF_PACKET; no /dev/net/tun). One iperf3 stream, MTU 1420.
#   setpriv --reuid=nobody --regid=nogroup --clear-groups --bounding-set=-all \
#       unshare -Urn bash kernel_userns.sh SECONDS [ONE_WAY_DELAY_MS LOSS]
set -eu
SECS=${1:-8}
DELAY=${2:-0}
LOSS=${3:-0}
HERE=$(cd "$(dirname "$0")" && pwd)
hold() { unshare -n sleep 600 >/dev/null 2>&1 & echo $!; }   # a child netns kept alive by a sleeper
A=$(hold); B=$(hold)
trap 'kill $A $B 2>/dev/null' EXIT
sleep 0.2
ip link add a0 type veth peer name a1
ip link add b0 type veth peer name b1
ip link set a0 netns "$A"
ip link set b0 netns "$B"
for i in a1 b1; do ip link set $i mtu 1420 up; ethtool -K $i tso off gso off gro off tx off rx off >/dev/null 2>&1 || true; done
inns() { nsenter -n -t "$1" "${@:2}"; }
inns "$A" ip link set lo up; inns "$B" ip link set lo up
inns "$A" ip link set a0 mtu 1420 up; inns "$B" ip link set b0 mtu 1420 up
inns "$A" ethtool -K a0 tso off gso off gro off tx off rx off >/dev/null 2>&1 || true
inns "$B" ethtool -K b0 tso off gso off gro off tx off rx off >/dev/null 2>&1 || true
inns "$A" ip addr add 10.201.0.1/24 dev a0; inns "$A" ip -6 addr add fd00:201::1/64 dev a0 nodad
inns "$B" ip addr add 10.201.0.2/24 dev b0; inns "$B" ip -6 addr add fd00:201::2/64 dev b0 nodad
python3 "$HERE/l2relay.py" a1 b1 $((SECS + 8)) "$DELAY" "$LOSS" &
RELAY=$!
inns "$B" iperf3 -s -1 -B 10.201.0.2 >/dev/null &
sleep 0.5
inns "$A" ping -c 1 -W 2 10.201.0.2 | grep -E "bytes from|loss" || true
inns "$A" iperf3 -c 10.201.0.2 -t "$SECS" -f m | grep -E "sender|receiver"
wait $RELAY

# Waits on the operator's machine until a freshly installed node's Talos API
# answers. `pulumi up` runs it (a local command) after the node's install and
# optional reboot command; tests run it against loopback servers.
#
# Variables: NODE_NAME, NODE_IP, HINT (what has to happen now), TALOS_PORT
# (default 50000), WAIT_TIMEOUT (seconds, default 1800), POLL_INTERVAL (seconds,
# default 10), REPORT_INTERVAL (seconds between "still waiting" lines, default 60),
# WAIT_LABEL (the timeout as the stack spells it, e.g. 30m).
set -eu
: "${NODE_NAME:?}" "${NODE_IP:?}"
TALOS_PORT=${TALOS_PORT:-50000}
WAIT_TIMEOUT=${WAIT_TIMEOUT:-1800}
POLL_INTERVAL=${POLL_INTERVAL:-10}
REPORT_INTERVAL=${REPORT_INTERVAL:-60}
WAIT_LABEL=${WAIT_LABEL:-${WAIT_TIMEOUT}s}
command -v curl >/dev/null 2>&1 || { echo "talos-wait: curl is not installed on this machine; install it and run pulumi up again" >&2; exit 1; }

start=$(date +%s)
deadline=$((start + WAIT_TIMEOUT))
last_report=$start
echo "talos-wait: ${HINT:-}"
echo "talos-wait: waiting up to $WAIT_LABEL for the Talos API of $NODE_NAME at $NODE_IP:$TALOS_PORT"
while :; do
	# Any TLS/HTTP answer on the port means Talos runs (maintenance mode
	# answers without a client certificate, a configured node asks for one).
	# Refused, unreachable or silent means: not yet.
	rc=0
	curl -sk --connect-timeout 5 --max-time 10 -o /dev/null "https://$NODE_IP:$TALOS_PORT/" || rc=$?
	case $rc in
	0 | 16 | 22 | 35 | 52 | 56 | 58 | 92)
		echo "talos-wait: $NODE_NAME answers on port $TALOS_PORT after $(($(date +%s) - start))s: Talos is up"
		exit 0
		;;
	esac
	now=$(date +%s)
	if [ "$now" -ge "$deadline" ]; then
		echo "talos-wait: timed out after $WAIT_LABEL: $NODE_NAME ($NODE_IP) does not answer on port $TALOS_PORT (curl exit code $rc)." >&2
		echo "talos-wait: check in the provider's console that it boots from its disk, not the rescue system, and that port $TALOS_PORT is reachable from here; then run 'pulumi up' again: it goes on waiting, the install is not repeated." >&2
		exit 1
	fi
	if [ $((now - last_report)) -ge "$REPORT_INTERVAL" ]; then
		echo "talos-wait: still waiting for $NODE_NAME ($((now - start))s of $WAIT_LABEL): ${HINT:-}"
		last_report=$now
	fi
	sleep "$POLL_INTERVAL"
done

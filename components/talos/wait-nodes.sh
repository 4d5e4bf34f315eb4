# Waits on the operator's machine until every node of the cluster is Ready
# in Kubernetes, so that `pulumi up` returns a cluster that works. `pulumi up`
# runs it (a local command) after the Helm releases; tests run it against a
# loopback API server. It asks the API server the kubeconfig names, with the
# kubeconfig's client certificate, through HTTPS_PROXY when one is set.
#
# Variables: KUBECONFIG_DATA (the kubeconfig), NODE_COUNT, WAIT_TIMEOUT
# (seconds, default 600), POLL_INTERVAL (seconds, default 5),
# REPORT_INTERVAL (seconds between progress lines, default 30).
set -eu
: "${KUBECONFIG_DATA:?}" "${NODE_COUNT:?}"
WAIT_TIMEOUT=${WAIT_TIMEOUT:-600}
POLL_INTERVAL=${POLL_INTERVAL:-5}
REPORT_INTERVAL=${REPORT_INTERVAL:-30}
for tool in curl base64; do
	command -v "$tool" >/dev/null 2>&1 || { echo "nodes-ready: $tool is not installed on this machine; install it and run pulumi up again" >&2; exit 1; }
done

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
chmod 700 "$dir"
# The first value of a key in the kubeconfig (Talos writes one cluster and
# one user, a key per line).
field() { printf '%s\n' "$KUBECONFIG_DATA" | sed -n "s/^[[:space:]]*$1:[[:space:]]*//p" | head -n 1 | tr -d "\"'"; }
server=$(field server)
umask 077
field certificate-authority-data | base64 -d >"$dir/ca" 2>/dev/null || true
field client-certificate-data | base64 -d >"$dir/crt" 2>/dev/null || true
field client-key-data | base64 -d >"$dir/key" 2>/dev/null || true
if [ -z "$server" ] || [ ! -s "$dir/ca" ] || [ ! -s "$dir/crt" ] || [ ! -s "$dir/key" ]; then
	echo "nodes-ready: the kubeconfig lacks a server, CA or client certificate; cannot ask the API server" >&2
	exit 1
fi

start=$(date +%s)
deadline=$((start + WAIT_TIMEOUT))
last_report=$start
echo "nodes-ready: waiting up to ${WAIT_TIMEOUT}s for $NODE_COUNT nodes to be Ready ($server)"
while :; do
	# A node's Ready condition serialises as "type":"Ready","status":"True"
	# (field order of NodeCondition); blanks are dropped for pretty output.
	ready=0
	if body=$(curl -sS --fail --connect-timeout 5 --max-time 15 --cacert "$dir/ca" --cert "$dir/crt" --key "$dir/key" \
		"$server/api/v1/nodes" 2>"$dir/err"); then
		ready=$(printf '%s' "$body" | tr -d ' \t\r\n' | grep -o '"type":"Ready","status":"True"' | wc -l | tr -d ' ')
		problem="$ready of $NODE_COUNT nodes Ready"
	else
		problem="the API server did not answer: $(tr '\n' ' ' <"$dir/err")"
	fi
	if [ "$ready" -ge "$NODE_COUNT" ]; then
		echo "nodes-ready: all $NODE_COUNT nodes are Ready after $(($(date +%s) - start))s"
		exit 0
	fi
	now=$(date +%s)
	if [ "$now" -ge "$deadline" ]; then
		echo "nodes-ready: timed out after ${WAIT_TIMEOUT}s: $problem." >&2
		echo "nodes-ready: look at 'kubectl get nodes' and 'kubectl -n kube-system get pods -l k8s-app=cilium' (make outputs writes the kubeconfig); then run 'pulumi up' again: it goes on waiting." >&2
		exit 1
	fi
	if [ $((now - last_report)) -ge "$REPORT_INTERVAL" ]; then
		echo "nodes-ready: still waiting ($((now - start))s): $problem"
		last_report=$now
	fi
	sleep "$POLL_INTERVAL"
done

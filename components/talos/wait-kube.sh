# Waits on the operator's machine until the cluster's Kubernetes API can be
# used, so that the next step does not start too early. `pulumi up` runs it as
# a local command twice:
#   WAIT_FOR=api    after the bootstrap, until the API server answers /readyz
#                   (the Kubernetes provider decides once, when it is
#                   configured, whether the cluster is reachable, so it must
#                   not be configured before this);
#   WAIT_FOR=nodes  after the Helm releases, until every node is Ready, so
#                   that `pulumi up` returns a cluster that works.
# Tests run it against a loopback API server. It asks the API server the
# kubeconfig names (the endpoint the provider uses), with the kubeconfig's
# client certificate, through HTTPS_PROXY when one is set.
#
# Variables: KUBECONFIG_DATA (the kubeconfig), WAIT_FOR (api or nodes),
# NODE_COUNT (nodes only), WAIT_TIMEOUT (seconds, default 600),
# POLL_INTERVAL (seconds, default 5), REPORT_INTERVAL (seconds between
# progress lines, default 30), API_STREAK (consecutive good /readyz answers
# needed, default 3: a VIP that just moved can answer once and then not).
set -eu
: "${KUBECONFIG_DATA:?}" "${WAIT_FOR:?}"
WAIT_TIMEOUT=${WAIT_TIMEOUT:-600}
POLL_INTERVAL=${POLL_INTERVAL:-5}
REPORT_INTERVAL=${REPORT_INTERVAL:-30}
API_STREAK=${API_STREAK:-3}
case "$WAIT_FOR" in
api) tag=api-ready ;;
nodes) tag=nodes-ready; : "${NODE_COUNT:?}" ;;
*) echo "wait-kube: WAIT_FOR must be api or nodes, not $WAIT_FOR" >&2; exit 2 ;;
esac
for tool in curl base64; do
	command -v "$tool" >/dev/null 2>&1 || { echo "$tag: $tool is not installed on this machine; install it and run pulumi up again" >&2; exit 1; }
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
	echo "$tag: the kubeconfig lacks a server, CA or client certificate; cannot ask the API server" >&2
	exit 1
fi

# ask PATH: GET the API server's PATH with the kubeconfig's credentials into
# $dir/body; the reason of a failure goes to $dir/err.
ask() {
	curl -sS --fail --connect-timeout 5 --max-time 15 --cacert "$dir/ca" --cert "$dir/crt" --key "$dir/key" \
		-o "$dir/body" "$server$1" 2>"$dir/err"
}

# check sets done=1 when what is waited for holds, and problem to what is
# missing otherwise.
streak=0
check() {
	done=0
	case "$WAIT_FOR" in
	api)
		if ask /readyz; then
			streak=$((streak + 1))
			problem="/readyz answered ok $streak of $API_STREAK times in a row"
			[ "$streak" -ge "$API_STREAK" ] && done=1
		else
			streak=0
			problem="/readyz did not answer ok: $(tr '\n' ' ' <"$dir/err")"
		fi
		;;
	nodes)
		# A node's Ready condition serialises as "type":"Ready","status":"True"
		# (field order of NodeCondition); blanks are dropped for pretty output.
		if ask /api/v1/nodes; then
			ready=$(tr -d ' \t\r\n' <"$dir/body" | grep -o '"type":"Ready","status":"True"' | wc -l | tr -d ' ')
			problem="$ready of $NODE_COUNT nodes Ready"
			[ "$ready" -ge "$NODE_COUNT" ] && done=1
		else
			problem="the API server did not answer: $(tr '\n' ' ' <"$dir/err")"
		fi
		;;
	esac
	return 0
}

start=$(date +%s)
deadline=$((start + WAIT_TIMEOUT))
last_report=$start
case "$WAIT_FOR" in
api) echo "$tag: waiting up to ${WAIT_TIMEOUT}s for the Kubernetes API at $server to answer /readyz" ;;
nodes) echo "$tag: waiting up to ${WAIT_TIMEOUT}s for $NODE_COUNT nodes to be Ready ($server)" ;;
esac
while :; do
	check
	if [ "$done" = 1 ]; then
		case "$WAIT_FOR" in
		api) echo "$tag: the Kubernetes API at $server is ready after $(($(date +%s) - start))s" ;;
		nodes) echo "$tag: all $NODE_COUNT nodes are Ready after $(($(date +%s) - start))s" ;;
		esac
		exit 0
	fi
	now=$(date +%s)
	if [ "$now" -ge "$deadline" ]; then
		echo "$tag: timed out after ${WAIT_TIMEOUT}s: $problem." >&2
		case "$WAIT_FOR" in
		api) echo "$tag: waited for the Kubernetes API at $server (the cluster endpoint: the VIP or cluster.endpoint) to answer /readyz with the kubeconfig's client certificate. Check that this machine reaches it (make doctor), that the VIP is up and etcd, kube-apiserver are running ('talosctl -n <first control plane IP> services' and 'talosctl -n <first control plane IP> dmesg'); then run 'pulumi up' again: it goes on waiting." >&2 ;;
		nodes) echo "$tag: look at 'kubectl get nodes' and 'kubectl -n kube-system get pods -l k8s-app=cilium' (make outputs writes the kubeconfig); then run 'pulumi up' again: it goes on waiting." >&2 ;;
		esac
		exit 1
	fi
	if [ $((now - last_report)) -ge "$REPORT_INTERVAL" ]; then
		echo "$tag: still waiting ($((now - start))s): $problem"
		last_report=$now
	fi
	sleep "$POLL_INTERVAL"
done

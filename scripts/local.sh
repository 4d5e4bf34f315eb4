#!/usr/bin/env bash
# `make local`: a Talos cluster in Docker on this machine, from a fresh clone. It checks what the
# run needs and names what is missing, writes Pulumi.local.yaml from its example when there is
# none, creates the stack (a passphrase of its own when none is set), runs `make doctor` and `up`,
# and writes the access files. MAKE is the make to call back (the Makefile passes it).
set -euo pipefail
cd "$(dirname "$0")/.."
make=${MAKE:-make}

missing=()
[ "$(uname -s)" = Linux ] || missing+=("Linux: this machine reaches the nodes through Docker's bridge, which Docker Desktop's VM does not route to")
command -v pulumi >/dev/null 2>&1 || missing+=("the Pulumi CLI 3.259 or newer: https://www.pulumi.com/docs/install/")
command -v go >/dev/null 2>&1 || missing+=("Go 1.26.6 or newer: https://go.dev/dl/ (make builds the program)")
if ! command -v docker >/dev/null 2>&1; then
  missing+=("Docker Engine: Debian/Ubuntu \`sudo apt-get install docker.io\`, then \`sudo systemctl start docker\`")
elif ! err=$(docker info 2>&1 >/dev/null); then
  case $err in
    *"permission denied"*) missing+=("the right to use Docker: \`sudo usermod -aG docker \$USER\`, then log in again") ;;
    *) missing+=("a running Docker daemon: \`sudo systemctl start docker\` ($(printf '%s' "$err" | tail -n1))") ;;
  esac
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "make local needs:" >&2
  printf '  - %s\n' "${missing[@]}" >&2
  exit 1
fi

if [ ! -f Pulumi.local.yaml ]; then
  cp Pulumi.local.yaml.example Pulumi.local.yaml
  echo "wrote Pulumi.local.yaml from Pulumi.local.yaml.example"
fi
# The state holds the cluster's machine secrets, encrypted with the passphrase: one of the local
# stack's own, in a file only this user reads, unless one is set. The Makefile finds the file
# again for every later target of the stack (STACK_PASSPHRASE_FILE).
if [ -z "${PULUMI_CONFIG_PASSPHRASE:-}" ] && [ -z "${PULUMI_CONFIG_PASSPHRASE_FILE:-}" ]; then
  dir=${XDG_CONFIG_HOME:-$HOME/.config}/talos-cluster
  export PULUMI_CONFIG_PASSPHRASE_FILE=$dir/local-passphrase
  if [ ! -f "$PULUMI_CONFIG_PASSPHRASE_FILE" ]; then
    (umask 077 && mkdir -p "$dir" && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$PULUMI_CONFIG_PASSPHRASE_FILE")
    echo "wrote a passphrase for the local stack to $PULUMI_CONFIG_PASSPHRASE_FILE (mode 0600)"
  fi
fi
started=$(date +%s)
"$make" --no-print-directory init STACK=local
# What `up` needs of this machine besides: the image (or its registry), the published ports.
"$make" --no-print-directory doctor STACK=local
"$make" --no-print-directory up STACK=local YES=1
"$make" --no-print-directory outputs STACK=local
took=$(($(date +%s) - started))
echo "the local cluster is up ($((took / 60))m$((took % 60))s)"
echo "reach it:  KUBECONFIG=$PWD/.access/local/kubeconfig kubectl get nodes"
echo "remove it: make destroy STACK=local"

#!/usr/bin/env bash
# The tools `make test` runs besides Go and make: Debian's dnsmasq (on the generated reservation
# files), curl (the VPS install script's download, the proxy tests), zstd, xz and gzip (the VPS install script
# against compressed images); and, installed but not required, Docker (docker.io).
#
#   test-deps.sh check     exit 0 when all are there; otherwise one line naming what is missing
#                          and how to get it, and exit 1
#   test-deps.sh install   install what is missing with apt-get (through sudo when not root);
#                          elsewhere, one line naming the packages, and exit 1
set -euo pipefail

# tool:debian-packages (joined by +)
tools=(dnsmasq:dnsmasq-base curl:curl+ca-certificates zstd:zstd xz:xz-utils gzip:gzip)
# Installed by `install` too where apt-get is, never required: the Docker daemon the tests of the
# local platform run against (they say they were skipped without one; .ci/run starts it).
# The daemon is what is looked for: a Docker CLI alone (a static docker binary) runs no container.
if [ "${1:-check}" = install ] && command -v apt-get >/dev/null 2>&1; then
  tools+=(dockerd:docker.io)
fi

have() {
  # /usr/sbin is not on a normal user's PATH on Debian, and dnsmasq lives there.
  command -v "$1" >/dev/null 2>&1 || [ -x "${SBIN:-/usr/sbin}/$1" ]
}

missing_tools=() missing_pkgs=()
for t in "${tools[@]}"; do
  if ! have "${t%%:*}"; then
    missing_tools+=("${t%%:*}")
    pkgs=${t#*:}
    read -r -a pkgs <<<"${pkgs//+/ }"
    missing_pkgs+=("${pkgs[@]}")
  fi
done
[ ${#missing_tools[@]} -eq 0 ] && exit 0

case "${1:-check}" in
  check)
    echo "make test needs ${missing_tools[*]}: run \`make deps\` (Debian/Ubuntu: apt-get install ${missing_pkgs[*]}), or install them yourself" >&2
    exit 1 ;;
  install)
    if ! command -v apt-get >/dev/null 2>&1; then
      echo "make deps: no apt-get here; install ${missing_tools[*]} yourself (Debian package names: ${missing_pkgs[*]})" >&2
      exit 1
    fi
    sudo=()
    if [ "$(id -u)" -ne 0 ]; then
      if ! command -v sudo >/dev/null 2>&1; then
        echo "make deps: not root and no sudo; as root: apt-get install ${missing_pkgs[*]}" >&2
        exit 1
      fi
      sudo=(sudo)
    fi
    echo "make deps: installing ${missing_pkgs[*]}" >&2
    "${sudo[@]}" apt-get update -qq
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing_pkgs[@]}" ;;
  *)
    echo "usage: $0 check|install" >&2
    exit 2 ;;
esac

#!/usr/bin/env bash
# Adds the Docker provider plugin (pulumi-resource-docker) to the harness of ../shared/harness, so
# that TestIntegrationContainersLiveTheirLifeInDocker (components/docker) runs the DockerCluster's
# containers with the real plugin. Offline: the Go module proxy and two mirrored repositories.
#
#   HARNESS_DIR=...   the harness (default ${TMPDIR:-/tmp}/harness); its bin/pulumi must exist
#   MIRROR_ROOT=...   bare git dirs as OWNER+NAME/repo (the search tool's `fetch`) of
#                     pulumi/pulumi-docker and kreuzwerker/terraform-provider-docker
#   VERSION=...       the plugin's version (default: components/docker's PluginVersion, 4.11.0,
#                     the newest whose pulumi-terraform-bridge the proxy serves)
#
# Why not `ONLY=docker build.sh`: pulumi-docker's provider builds against its Terraform upstream,
# a git submodule (upstream/) that its Makefile patches first (patches/*.patch; the first adds the
# `shim` package the provider imports). The harness unpacks the upstream unpatched, and Go then
# looks for the shim on the proxy. This does what the Makefile's `upstream` and `provider` do.
set -euo pipefail

HARNESS_DIR=${HARNESS_DIR:-${TMPDIR:-/tmp}/harness}
MIRROR_ROOT=${MIRROR_ROOT:-/work/.mirror}
here=$(cd "$(dirname "$0")/.." && pwd)
VERSION=${VERSION:-$(sed -n 's/^const PluginVersion = "\(.*\)"$/\1/p' "$here/components/docker/containers.go")}
work=$HARNESS_DIR/src/docker-plugin-build
docker_git=$MIRROR_ROOT/pulumi+pulumi-docker/repo
upstream_git=$MIRROR_ROOT/kreuzwerker+terraform-provider-docker/repo
out=$HARNESS_DIR/plugins/pulumi-resource-docker
export GOFLAGS="-mod=mod -buildvcs=false" GOTOOLCHAIN=${GOTOOLCHAIN:-local}
export PULUMI_HOME=$HARNESS_DIR/pulumi-home PULUMI_SKIP_UPDATE_CHECK=true

[ -x "$HARNESS_DIR/bin/pulumi" ] || { echo "harness-docker-plugin: no $HARNESS_DIR/bin/pulumi (run ../shared/harness/build.sh first)" >&2; exit 1; }
for g in "$docker_git" "$upstream_git"; do
  [ -d "$g" ] || { echo "harness-docker-plugin: no mirror $g (fetch github:pulumi/pulumi-docker and github:kreuzwerker/terraform-provider-docker)" >&2; exit 1; }
done

rm -rf "$work" && mkdir -p "$work/upstream"
git --git-dir="$docker_git" archive "v$VERSION" | tar -x -C "$work"
# The upstream at the commit the tag records for its submodule, patched.
commit=$(git --git-dir="$docker_git" ls-tree "v$VERSION" upstream | awk '{print $3}')
git --git-dir="$upstream_git" archive "$commit" | tar -x -C "$work/upstream"
(cd "$work/upstream" && for p in ../patches/*.patch; do git apply "$p"; done)
# The schema the plugin embeds, stamped with the version (the Makefile's go generate).
(cd "$work/provider/cmd/pulumi-resource-docker" && VERSION="$VERSION" go run ./generate.go)
module=$(awk '$1=="module"{print $2; exit}' "$work/provider/go.mod")
mkdir -p "$(dirname "$out")"
(cd "$work/provider" && CGO_ENABLED=0 go build -o "$out" \
  -ldflags "-s -w -X $module/pkg/version.Version=$VERSION" ./cmd/pulumi-resource-docker)
"$HARNESS_DIR/bin/pulumi" plugin install resource docker "$VERSION" --file "$out" --reinstall
echo "harness-docker-plugin: docker $VERSION installed in $PULUMI_HOME"

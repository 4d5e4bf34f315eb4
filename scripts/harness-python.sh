#!/usr/bin/env bash
# Adds Python to the harness of ../shared/harness (build.sh): the CLI's Python language host and a
# Python in which `import pulumi` and the generated SDK's other dependencies (semver, parver)
# work, without PyPI, so that TestIntegrationPythonSDK (provider/talosprovider) generates the
# Python SDK AND imports it.
#
#   HARNESS_DIR=...     the harness (default ${TMPDIR:-/tmp}/harness); its bin/pulumi must exist
#                       (and $HARNESS_DIR/src/pulumi, the CLI's tree that build.sh extracted)
#   MIRROR_ROOT=...     bare git dirs laid out as OWNER+NAME/repo (the search tool's `fetch`) of
#                       open-telemetry/opentelemetry-python, python/typing_extensions,
#                       python-semver/python-semver and RazerM/parver; a repository missing
#                       there is cloned from $GIT_BASE_URL (default https://github.com)
#   PULUMI_VERSION      default: the version of $HARNESS_DIR/bin/pulumi (the host must match the CLI)
#   OTEL_VERSION        opentelemetry-api/-sdk (default 1.40.0, as the SDK's uv.lock of 3.259)
#   TYPING_EXTENSIONS_VERSION   default 4.15.0 (Debian 12 has 4.4, OpenTelemetry needs >= 4.5)
#   SEMVER_VERSION      default 3.0.4 (Debian 12 has 2.10, without the semver.Version pulumi imports)
#   PARVER_VERSION      default 0.5 (not in Debian; the generated SDK's _utilities imports it)
#   FORCE=1             rebuild and reinstall what is there already
#
# What it does (each step skipped when done already):
#   1. apt-get installs Debian's python3-venv and the pulumi package's dependencies that Debian has:
#      python3-grpcio, -protobuf, -dill, -yaml, -debugpy, -packaging, python3-importlib-metadata
#      for OpenTelemetry, python3-arpeggio and -attr for parver, and python3-setuptools and
#      -wheel with which pip builds the generated SDK (most older than the pyproject.toml of the
#      SDK asks for: enough to import the SDK and generated packages).
#   2. builds $HARNESS_DIR/bin/pulumi-language-python from sdk/python/cmd/pulumi-language-python
#      of the CLI's tag (as build.sh builds the Go and Node.js hosts) and copies its
#      pulumi-language-python-exec beside it.
#   3. makes $HARNESS_DIR/python/venv, a venv of Debian's /usr/bin/python3 that sees the Debian
#      packages (--system-site-packages), and copies into it, with a dist-info each (name,
#      version, entry points; what pip would write), the pure-Python packages Debian lacks:
#      typing_extensions, semver 3, parver, opentelemetry-api, -semantic-conventions and -sdk
#      (their sources at their tags), and the pulumi package (sdk/python/lib/pulumi of the
#      CLI's tag).
#   4. checks `import pulumi, parver, semver` with $HARNESS_DIR/python/venv/bin/python and
#      prints the versions.
# TestIntegrationPythonSDK uses that Python when it exists (or PULUMI_PYTHON_CMD when set).
# Not installed (the SDK imports them only when tracing to an OTLP endpoint is asked for):
# opentelemetry-exporter-otlp-proto-grpc and opentelemetry-instrumentation-grpc.
set -euo pipefail

HARNESS_DIR="${HARNESS_DIR:-${TMPDIR:-/tmp}/harness}"
MIRROR_ROOT="${MIRROR_ROOT:-}"
GIT_BASE_URL="${GIT_BASE_URL:-https://github.com}"
OTEL_VERSION="${OTEL_VERSION:-1.40.0}"
TYPING_EXTENSIONS_VERSION="${TYPING_EXTENSIONS_VERSION:-4.15.0}"
SEMVER_VERSION="${SEMVER_VERSION:-3.0.4}"
PARVER_VERSION="${PARVER_VERSION:-0.5}"
FORCE="${FORCE:-0}"
BIN="$HARNESS_DIR/bin"
PY="$HARNESS_DIR/python"
LOGS="$HARNESS_DIR/logs"

log() { printf '[harness-python %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "$*"; exit 1; }

[ -x "$BIN/pulumi" ] || die "no $BIN/pulumi: build the harness first (../shared/harness/build.sh)"
if [ -z "${PULUMI_VERSION:-}" ]; then
  PULUMI_VERSION=$("$BIN/pulumi" version)
  PULUMI_VERSION=${PULUMI_VERSION#v}
fi
mkdir -p "$PY/src" "$LOGS"

# 1. Debian packages
debs=(python3-venv python3-pip python3-grpcio python3-protobuf python3-dill python3-yaml
      python3-debugpy python3-packaging python3-importlib-metadata python3-arpeggio python3-attr
      python3-setuptools python3-wheel)
missing=()
for d in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "$d" 2>/dev/null | grep -q 'install ok installed' || missing+=("$d")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "apt-get install ${missing[*]}"
  sudo=(); [ "$(id -u)" = 0 ] || sudo=(sudo)
  "${sudo[@]}" apt-get install -y -q "${missing[@]}" >&2 ||
    { "${sudo[@]}" apt-get update -q >&2 && "${sudo[@]}" apt-get install -y -q "${missing[@]}" >&2; }
fi

# git_dir OWNER/NAME TAG -> a git dir that has TAG (the mirror's, else a shallow clone)
git_dir() {
  local repo=$1 tag=$2 m
  if [ -n "$MIRROR_ROOT" ]; then
    m="$MIRROR_ROOT/${repo/\//+}/repo"
    if [ -d "$m" ] && git --git-dir="$m" rev-parse -q --verify "$tag^{commit}" >/dev/null; then
      echo "$m"; return
    fi
  fi
  m="$PY/src/.git/${repo/\//+}-$tag"
  if [ ! -d "$m" ]; then
    log "cloning $GIT_BASE_URL/$repo $tag"
    git clone -q --bare --depth 1 --branch "$tag" "$GIT_BASE_URL/$repo.git" "$m" >&2
  fi
  echo "$m"
}

# get_src OWNER/NAME TAG DEST [PATH...]: those paths of TAG (all when none) in DEST, once
get_src() {
  local repo=$1 tag=$2 dest=$3; shift 3
  [ -f "$dest/.harness-src" ] && [ "$(cat "$dest/.harness-src")" = "$repo@$tag" ] && return 0
  local gd; gd=$(git_dir "$repo" "$tag")
  log "extracting $repo@$tag${*:+ ($*)} into $dest"
  rm -rf "$dest"; mkdir -p "$dest"
  git --git-dir="$gd" archive "$tag" "$@" | tar -x -C "$dest"
  echo "$repo@$tag" > "$dest/.harness-src"
}

# The CLI's tree, as build.sh extracted it (the host's go.mod replaces the Go SDK and pkg with
# the tree's own).
PULUMI_SRC="$HARNESS_DIR/src/pulumi"
[ "$(cat "$PULUMI_SRC/.harness-src" 2>/dev/null)" = "pulumi/pulumi@v$PULUMI_VERSION" ] ||
  die "$PULUMI_SRC is not pulumi/pulumi@v$PULUMI_VERSION: run ../shared/harness/build.sh with ONLY=cli and PULUMI_VERSION=$PULUMI_VERSION first"
SDK_PY="$PULUMI_SRC/sdk/python"

# 2. the language host
if [ "$FORCE" = 1 ] || [ ! -x "$BIN/pulumi-language-python" ]; then
  log "pulumi-language-python v$PULUMI_VERSION (go build; log $LOGS/python.log)"
  if ! (cd "$SDK_PY/cmd/pulumi-language-python" &&
        GOFLAGS="-mod=mod -buildvcs=false" GOTOOLCHAIN="${GOTOOLCHAIN:-local}" \
        GONOSUMDB="${GONOSUMDB:-github.com/pulumi}" \
        go build -o "$BIN/pulumi-language-python" \
          -ldflags "-X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=v$PULUMI_VERSION" .) \
        > "$LOGS/python.log" 2>&1; then
    tail -30 "$LOGS/python.log" >&2
    die "building pulumi-language-python FAILED (log: $LOGS/python.log)"
  fi
fi
install -m 0755 "$SDK_PY/cmd/pulumi-language-python-exec" "$BIN/pulumi-language-python-exec"

# 3. the venv and the packages Debian lacks
stamp="pulumi $PULUMI_VERSION, opentelemetry $OTEL_VERSION, typing_extensions $TYPING_EXTENSIONS_VERSION, semver $SEMVER_VERSION, parver $PARVER_VERSION"
if [ "$FORCE" = 1 ] || [ ! -x "$PY/venv/bin/python" ] || [ "$(cat "$PY/venv/.harness-python" 2>/dev/null)" != "$stamp" ]; then
  get_src open-telemetry/opentelemetry-python "v$OTEL_VERSION" "$PY/src/opentelemetry-python" \
    opentelemetry-api opentelemetry-semantic-conventions opentelemetry-sdk
  get_src python/typing_extensions "$TYPING_EXTENSIONS_VERSION" "$PY/src/typing_extensions"
  get_src python-semver/python-semver "$SEMVER_VERSION" "$PY/src/semver" src/semver
  get_src RazerM/parver "$PARVER_VERSION" "$PY/src/parver" pyproject.toml src/parver
  log "venv $PY/venv (/usr/bin/python3 $(/usr/bin/python3 -c 'import platform; print(platform.python_version())'), --system-site-packages)"
  rm -rf "$PY/venv"
  /usr/bin/python3 -m venv --system-site-packages --without-pip "$PY/venv"
  # Copies a pure-Python distribution's packages and writes its dist-info, as pip would from its
  # wheel (the build backends they need, flit_core >= 3.11 and a hatchling that knows their
  # classifiers, are newer than Debian 12's; no pip, no build, nothing compiled).
  "$PY/venv/bin/python" - "$PY/src" "$SDK_PY" "$PULUMI_VERSION" <<'EOF'
import os, re, shutil, sys, sysconfig, tomllib

src, sdk_py, pulumi_version = sys.argv[1:]
site = sysconfig.get_paths()["purelib"]

def install(name, version, paths, requires=(), entry_points=None):
    for p in paths:
        dest = os.path.join(site, os.path.basename(p))
        if os.path.isdir(p):
            shutil.copytree(p, dest, dirs_exist_ok=True)  # namespace packages (opentelemetry) merge
        else:
            shutil.copy2(p, dest)
    info = os.path.join(site, f"{re.sub(r'[-_.]+', '_', name)}-{version}.dist-info")
    os.makedirs(info, exist_ok=True)
    with open(os.path.join(info, "METADATA"), "w") as f:
        f.write(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        f.writelines(f"Requires-Dist: {r}\n" for r in requires)
    with open(os.path.join(info, "INSTALLER"), "w") as f:
        f.write("harness-python.sh\n")
    if entry_points:
        with open(os.path.join(info, "entry_points.txt"), "w") as f:
            for group, eps in entry_points.items():
                f.write(f"[{group}]\n")
                f.writelines(f"{k} = {v}\n" for k, v in eps.items())
                f.write("\n")
    print(f"  {name} {version}", file=sys.stderr)

te = os.path.join(src, "typing_extensions")
with open(os.path.join(te, "pyproject.toml"), "rb") as f:
    te_project = tomllib.load(f)["project"]
install(te_project["name"], te_project["version"], [os.path.join(te, "src", "typing_extensions.py")])

semver = os.path.join(src, "semver", "src", "semver")
with open(os.path.join(semver, "__about__.py")) as f:
    install("semver", re.search(r'__version__\s*=\s*"([^"]+)"', f.read()).group(1), [semver])

with open(os.path.join(src, "parver", "pyproject.toml"), "rb") as f:
    parver = tomllib.load(f)["project"]
install(parver["name"], parver["version"], [os.path.join(src, "parver", "src", "parver")], parver["dependencies"])

for dist in ("opentelemetry-api", "opentelemetry-semantic-conventions", "opentelemetry-sdk"):
    d = os.path.join(src, "opentelemetry-python", dist)
    with open(os.path.join(d, "pyproject.toml"), "rb") as f:
        py = tomllib.load(f)
    project, hatch = py["project"], py["tool"]["hatch"]
    with open(os.path.join(d, hatch["version"]["path"])) as f:
        version = re.search(r'__version__\s*=\s*"([^"]+)"', f.read()).group(1)
    install(project["name"], version, [os.path.join(d, p) for p in hatch["build"]["targets"]["wheel"]["packages"]],
            project.get("dependencies", ()), project.get("entry-points"))

with open(os.path.join(sdk_py, "pyproject.toml"), "rb") as f:
    pulumi = tomllib.load(f)["project"]
assert pulumi["version"] == pulumi_version, (pulumi["version"], pulumi_version)
install("pulumi", pulumi_version, [os.path.join(sdk_py, "lib", "pulumi")], pulumi["dependencies"])
EOF
  echo "$stamp" > "$PY/venv/.harness-python"
fi

# 4. the check
"$PY/venv/bin/python" - <<'EOF' >&2
import importlib.metadata as md, platform
import parver, pulumi, semver
from pulumi._version import _VERSION
print(f"[harness-python] import pulumi works: Python {platform.python_version()}, pulumi {_VERSION} ({pulumi.__file__})")
for d in ("grpcio", "protobuf", "dill", "semver", "PyYAML", "debugpy", "packaging", "importlib_metadata", "typing_extensions",
          "parver", "Arpeggio", "attrs", "pip", "setuptools", "wheel",
          "opentelemetry-api", "opentelemetry-sdk"):
    try:
        print(f"  {d} {md.version(d)}")
    except md.PackageNotFoundError:
        print(f"  {d} (no metadata)")
EOF
log "done: TestIntegrationPythonSDK runs $PY/venv/bin/python (see docs/component-package.md)"

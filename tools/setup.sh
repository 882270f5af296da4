#!/usr/bin/env bash
# Installs every Debian package that building, running and testing eonce needs.
# Safe to run twice: it asks dpkg first and calls apt-get only for what is missing.
set -euo pipefail

PACKAGES=(
  bazel-bootstrap
  g++
  cmake
  curl
  pkg-config
  protobuf-compiler
  libprotobuf-dev
  protobuf-compiler-grpc
  libgrpc++-dev
  librocksdb-dev
  libabsl-dev
  libgtest-dev
  libgmock-dev
  libbenchmark-dev
  libjemalloc-dev
  prometheus-cpp-dev
  libssl-dev
  openssl
  python3
  python3-yaml
  python3-grpcio
  python3-protobuf
  gnuplot-nox
  graphviz
  prometheus
  iproute2
  procps
  etcd-server
  etcd-client
)

# `setup.sh --peers` adds the servers ./eonce bench --peers compares eonce with.
if [ "${1:-}" = "--peers" ]; then
  PACKAGES+=(postgresql postgresql-contrib redis-server redis-tools)
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# etcd-server's package starts a system etcd on 127.0.0.1:2379. eonce's tests start their
# own members on free ports (tests/util/etcd_cluster.h) and a deployment runs its own
# cluster; a stray one only holds the port and a data dir, so it is stopped and kept from
# starting at boot. Machines without systemd (containers) use the init script, if any.
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
  if systemctl is-enabled --quiet etcd.service 2>/dev/null ||
     systemctl is-active --quiet etcd.service 2>/dev/null; then
    echo "setup: stopping and disabling the system etcd service"
    $SUDO systemctl disable --now etcd.service
  fi
elif [ -x /etc/init.d/etcd ]; then
  # `status` exits 0 only while it runs; stopping one that is stopped is harmless anyway.
  if $SUDO /etc/init.d/etcd status >/dev/null 2>&1; then
    echo "setup: stopping the system etcd (init script)"
    $SUDO /etc/init.d/etcd stop || true
  fi
  if command -v update-rc.d >/dev/null 2>&1; then $SUDO update-rc.d etcd disable >/dev/null 2>&1 || true; fi
fi

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# RocksDB built for release from Debian's source; on any failure the build links Debian's
# librocksdb.a instead (tools/rocksdb.sh says why it is built).
bash "$root/tools/rocksdb.sh"

# The offline Kubernetes schema validator for deploy/ comes from the npm registry, pinned
# by tools/k8s-validate/package-lock.json.
if [ ! -d "$root/tools/k8s-validate/node_modules/kubernetes-models" ]; then
  if command -v npm >/dev/null 2>&1; then
    echo "setup: installing the Kubernetes schema validator (npm)"
    npm ci --prefix "$root/tools/k8s-validate" --no-audit --no-fund --loglevel=error
  else
    echo "setup: note: npm not found; deploy/ schema validation will report a skip" >&2
  fi
fi

# kubectl ships on the machine image rather than as a Debian package; the deploy
# tests need it and skip with a message when it is absent.
if ! command -v kubectl >/dev/null 2>&1; then
  echo "setup: note: kubectl not found; the deploy/ rendering tests will report a skip" >&2
fi

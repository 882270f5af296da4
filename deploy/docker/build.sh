#!/usr/bin/env bash
# Builds one image per binary from deploy/docker/Dockerfile.
set -euo pipefail
cd "$(dirname "$0")/../.."
tag="${1:-dev}"
for target in //outbox_agent:outbox_agent //dedupe_sidecar:dedupe_sidecar \
              //services/ledger:ledger_service //services/case:case_service \
              //outbox_agent/example:example_producer //tools/reshard:reshard; do
  name="${target##*:}"
  docker build -f deploy/docker/Dockerfile --build-arg TARGET="$target" -t "eonce/${name}:${tag}" .
done

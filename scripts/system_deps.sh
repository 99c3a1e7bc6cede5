#!/usr/bin/env bash
# System packages the full test suite uses: Debian's Chromium (browser tests) and PostgreSQL (store
# tests against a real server). Installed only when missing; needs root (CI runs as root).
set -euo pipefail
need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium chromium-driver)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}"
  else
    echo "warning: missing ${need[*]}; run as root: apt-get install ${need[*]} (those tests will skip)"
  fi
fi

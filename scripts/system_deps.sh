#!/usr/bin/env bash
# System packages the full test suite uses: Debian's Chromium (browser tests) and PostgreSQL (store
# tests against a real server). Installed only when missing; installing needs root (CI runs as root).
# Under CI=true a package that is missing afterwards fails the run; elsewhere it is a warning and those tests
# skip, saying why.
set -euo pipefail
need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium chromium-driver)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}"
  elif [ "${CI:-}" = true ]; then
    echo "error: missing ${need[*]} and not root; CI needs them: run as root, or apt-get install ${need[*]}" >&2
    exit 1
  else
    echo "warning: missing ${need[*]}; run as root: apt-get install ${need[*]} (those tests will skip)"
  fi
fi
if [ "${CI:-}" = true ]; then
  command -v chromium >/dev/null 2>&1 || { echo "error: chromium is still missing" >&2; exit 1; }
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { echo "error: PostgreSQL is still missing" >&2; exit 1; }
fi

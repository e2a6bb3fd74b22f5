#!/usr/bin/env bash
# Debian packages the build and tests need.
# needed by: make demo, make test
set -euo pipefail
need=()
command -v cmake >/dev/null || need+=(cmake)
command -v g++ >/dev/null || need+=(g++)
command -v make >/dev/null || need+=(make)
command -v pkg-config >/dev/null || need+=(pkg-config)
if [ ${#need[@]} -gt 0 ]; then
  echo "  installing Debian packages: ${need[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  # dpkg's own progress lines say nothing useful; keep them in a log.
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/tmp/benchgen-apt.log 2>&1 \
    || { tail -20 /tmp/benchgen-apt.log; exit 1; }
else
  echo "  Debian packages: present"
fi

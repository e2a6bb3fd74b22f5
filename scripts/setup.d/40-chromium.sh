#!/usr/bin/env bash
# Debian's chromium and chromedriver, for the review web app's browser test
# (tests/it/review_browser.rs drives /usr/bin/chromedriver over WebDriver). Idempotent:
# nothing happens when /usr/bin/chromium is already there.
set -euo pipefail
if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
  echo "  chromium + chromedriver: present"
  exit 0
fi
echo "  installing Debian packages: chromium chromium-driver"
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium chromium-driver

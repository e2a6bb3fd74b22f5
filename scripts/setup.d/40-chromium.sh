#!/usr/bin/env bash
# Debian's chromium and chromedriver, for the review web app's browser test
# (tests/it/review_browser.rs drives /usr/bin/chromedriver over WebDriver). Idempotent:
# nothing happens when /usr/bin/chromium is already there.
# needed by: make test
# (the tests only: `scripts/setup.sh demo` skips it)
set -euo pipefail
# Run both once: a headless page render and the driver's version, not just the files.
prove() {
  local dom
  dom=$(timeout 60 /usr/bin/chromium --headless --no-sandbox --disable-gpu --dump-dom \
    'data:text/html,<p id=x>benchgen-setup</p>' 2>/dev/null || true)
  if [[ "$dom" != *benchgen-setup* ]]; then
    echo "  error: /usr/bin/chromium is installed but does not render a page headless" >&2
    return 1
  fi
  /usr/bin/chromedriver --version >/dev/null 2>&1 || { echo "  error: /usr/bin/chromedriver does not run" >&2; return 1; }
  echo "  chromium + chromedriver: present and run ($(/usr/bin/chromedriver --version | cut -d' ' -f1-2))"
}
if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ] && prove; then
  exit 0
fi
echo "  installing Debian packages: chromium chromium-driver"
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
$SUDO apt-get update -qq
# dpkg's own progress lines say nothing useful; keep them in a log.
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium chromium-driver >/tmp/benchgen-apt.log 2>&1 \
  || { tail -20 /tmp/benchgen-apt.log; exit 1; }
prove

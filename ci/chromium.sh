#!/usr/bin/env bash
# Install Debian's chromium for the browser tests (tests/views), idempotent: nothing to do
# when /usr/bin/chromium is there. Playwright drives it (`playwright install` is not used:
# it downloads browsers of its own). Run as root.
set -euo pipefail
if [[ -x /usr/bin/chromium ]]; then
    echo "chromium already installed: $(/usr/bin/chromium --version 2>/dev/null | head -1)"
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >/dev/null
apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core >/dev/null
/usr/bin/chromium --version

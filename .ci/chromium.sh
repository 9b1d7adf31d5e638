#!/usr/bin/env bash
# Headless Chromium and its WebDriver for the inbox browser test
# (agentflow/tests/cli/inbox_browser.rs), installed from Debian's packages when
# chromedriver is missing. Needs root (CI runs as root). Run by .ci/run.
set -euo pipefail

if [ -x /usr/bin/chromedriver ] && [ -x /usr/bin/chromium ]; then
    echo "chromium and chromedriver: present"
else
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y chromium chromium-driver; then
        apt-get update
        apt-get install -y chromium chromium-driver
    fi
fi
/usr/bin/chromedriver --version

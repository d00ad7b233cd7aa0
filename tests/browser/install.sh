#!/usr/bin/env bash
# Debian's Chromium and ChromeDriver for the HTML report's browser test
# (tests/cli/test_cli_report.py). Installed as root with apt-get, like Java for DynamoDB
# Local; elsewhere the test says what to install and is skipped.
set -euo pipefail
if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "==> installing Debian's chromium and chromium-driver (the report's browser test)"
  apt-get install -y -qq chromium chromium-driver >/dev/null 2>&1 \
    || { apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null; }
else
  echo "note: chromium and chromedriver are not installed: the HTML report's browser test" \
    "will be skipped (apt-get install chromium chromium-driver)" >&2
fi

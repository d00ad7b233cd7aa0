#!/bin/sh
# Rebuild an agent transcript (or any log's current records) from its stored objects with
# nothing but the zstd and jq command-line tools: no stashpoint, no Python.
#
#   sh docs/transcript-from-objects.sh ROOT NAMESPACE LOG_ID
#
# ROOT is a local store's folder, or a copy of an S3 prefix:
#   aws s3 cp --recursive s3://BUCKET/PREFIX ./copy && sh docs/transcript-from-objects.sh ./copy agents ID
# NAMESPACE is `agents` for agent checkpoints, `logs` for `stash.logs`.
#
# Every object is a zstd frame of JSON: an entry is one version, a sealed segment holds 64
# versions in `.entries`, a vacated marker stands where clean-up replaced an entry (its
# version is in a segment, or below the log's current life). Versions may sit in both an
# entry and a segment, so they are made unique. The newest entry's `base` is where the
# current life starts (a log deleted and created again). An entry stores its whole state
# or a patch of the one before; the folded state says where the current transcript starts
# among the records.
set -eu
root=$1
namespace=$2
log_id=$3
cat "$root/sealed/$namespace/$log_id/"* "$root/$namespace/$log_id/"* 2>/dev/null \
  | zstd -dcq \
  | jq -s '[.[] | select(.type != "vacated") | (.entries // [.])[]] | unique_by(.version)
           | (.[-1].base // 0) as $base | map(select(.version >= $base)) as $versions
           | (reduce $versions[] as $e ({};
                if ($e | has("state")) then $e.state else . + $e.patch end)) as $state
           | [$versions[].records[]] | .[($state.transcript_start // 0):]'

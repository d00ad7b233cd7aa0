#!/usr/bin/env bash
# Print the folder the tests keep their data in (TMPDIR for `make test`): a tmpfs where the
# machine has a writable one with room to spare, else the usual temporary folder.
#
# Why: the local-folder tests create, fsync and delete tens of thousands of small files, and
# SeaweedFS keeps its volumes there; on a disk mounted with `discard` each unlink cost
# ~0.15 ms (tests/contract/test_log_contract.py + tests/maintenance/test_purge_lives.py:
# 122 s on disk, 90 s on tmpfs). What the tests check does not depend on it: a process
# killed with SIGKILL loses no page cache, and losing power is not what they test.
set -euo pipefail
need_kb=$((3 * 1024 * 1024))  # a whole run keeps ~0.5 GB; pytest keeps one run's folder
if [ -d /dev/shm ] && [ -w /dev/shm ]; then
    free_kb=$(df -Pk /dev/shm | awk 'NR == 2 {print $4}')
    if [ "${free_kb:-0}" -ge "$need_kb" ]; then
        folder="/dev/shm/stashpoint-tests-$(id -u)"
        mkdir -p "$folder"
        echo "$folder"
        exit 0
    fi
fi
echo "${TMPDIR:-/tmp}"

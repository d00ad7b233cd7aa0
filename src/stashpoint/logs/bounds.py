"""How much a log's steps read, keep and send at once: every bound in one place."""

from __future__ import annotations

import logging
from typing import TypeVar

T = TypeVar("T")
"""A step's result type."""

logger = logging.getLogger("stashpoint")

READ_WINDOW = 16
"""Objects fetched at once when reading a log backwards or in order."""
SEAL_LEVEL = 9
"""zstd level of sealed segments: 7% smaller than level 3 on transcripts at ~3 ms a seal."""
PACK_LEVEL = 19
"""zstd level of packs: written once for years by gc, never on a save's path."""
FETCH_BATCH = 256
"""Objects requested in one `Parallel` (the driver keeps 16 in flight); bounds memory."""
TAIL_GUESS = 256
"""Most versions a tail read fetches in its first round, before it knows record counts."""
RELISTS = 3
"""Fresh listings tried when listed objects change under a reader (a seal vacated them)."""
KNOWN_TOPS = 4096
"""Logs whose latest version a `LogSteps` remembers as a listing hint (bounded memory)."""
COLD_LISTING_PAGE = 512
"""Entry keys in the first listing page of a log with no hint of its top (S3's default is
1,000). Keys are never freed, so a long log's first page names sealed versions only, and
the listing resumes after the last sealed segment (listed in the same round) anyway; on
S3 each listed key costs ~40 µs of CPU to parse. A LangGraph chat thread of up to ~100
turns (5 versions a turn) still lists in one page."""
MARKER_MARGIN = 24
"""Bytes a marker may take beyond the widest one measured (zstd varies on random ids);
the smallest entry of any log id is about 55 bytes larger than its widest marker."""
DUE_SEALS_PER_LOG = 16
"""Completed ranges of one log kept due when appends do not seal (`seal_on_append` off);
older ones are found by the next seal or `gc`."""
SEALS_PER_APPEND = 2
"""Unsealed ranges one append seals at most (the newest); `gc` seals every one."""
PURGE_ATTEMPTS = 32
"""Tombstones a purge tries to append before it gives up on writers that keep racing it."""

WRITTEN_ENTRIES = 4096
"""Entries this process wrote that a `LogSteps` keeps for the seal of their range."""

WRITTEN_BODY = 16 * 1024
"""Largest entry (its JSON, decoded) kept for a seal (a bigger one is read back then)."""

SEALED_BYTES = 16 * 1024 * 1024
"""Stored bytes of the segments this process sealed that a `LogSteps` keeps for its reads."""

READ_ENTRIES = 4096
"""Entries this process read that a `LogSteps` keeps, to skip their GETs while the listing
names the same object (its ETag)."""

READ_CACHE_BYTES = 16 * 1024 * 1024
"""Stored bytes of those entries kept by default (`Options.log_read_cache_bytes`)."""

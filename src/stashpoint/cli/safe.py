r"""What reaches a terminal: stored text shown as text, never as terminal commands.

Ids, node names, errors and thread ids come from storage, and anyone with write access to
the bucket chooses them. Printed raw, an escape sequence sets the window title, opens a
hyperlink, clears the screen or rewrites what an operator reads; a bidirectional override
reorders it; rich markup (`[link=...]`) restyles it. `safe` shows every such character as
its escape (`\x1b`, `\u202e`) and escapes rich markup, so a table says what is stored.
"""

from __future__ import annotations

import re

from rich.markup import escape

_UNSAFE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff]"
)
"""C0 and C1 controls (tab and newline aside), DEL, zero-width and bidirectional marks."""


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def safe(text: object) -> str:
    """Return `text` fit for a terminal: controls shown escaped, rich markup escaped."""
    return escape(_UNSAFE.sub(_escaped, str(text)).replace("\t", "\\t").replace("\n", "\\n"))

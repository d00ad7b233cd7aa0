r"""What reaches a terminal: stored text shown as text, never as terminal commands.

Ids, node names, errors and thread ids come from storage, and anyone with write access to
the bucket chooses them. Printed raw, an escape sequence sets the window title, opens a
hyperlink, clears the screen or rewrites what an operator reads; a bidirectional override
reorders it; rich markup (`[link=...]`) restyles it. `printable` shows every such character
as its escape (`\x1b`, `\u202e`); `safe` also escapes rich markup, so a table says what is
stored.
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


def printable(text: object) -> str:
    """Return `text` with every control, tab and newline shown as its escape (one line)."""
    return _UNSAFE.sub(_escaped, str(text)).replace("\t", "\\t").replace("\n", "\\n")


def safe(text: object) -> str:
    """Return `text` fit for rich markup: controls shown escaped, rich markup escaped."""
    return escape(printable(text))

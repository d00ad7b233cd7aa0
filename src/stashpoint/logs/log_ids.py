"""Which logs a namespace holds: its log ids, a page at a time, with their tops.

A log's entries are named `<ids prefix><log id>/<version>`, so one listing of the
namespace names every log. On storage that lists in order and from a key (`seeks`), each
page starts after the last log it named (`start_after` past the rest of that log's
entries): a log costs one LIST at most however long it is. Elsewhere every key is
listed, and the ids are sorted here.

Free of I/O, like every step.
"""

from __future__ import annotations

from stashpoint.errors import InvalidArgument, StashpointError
from stashpoint.ids import validate_prefix
from stashpoint.logs.format import LogKeys, parse_entry_name
from stashpoint.logs.listing import cursor_id
from stashpoint.steps import Steps, ask
from stashpoint.stores.objects import KeyPage, ListKeys

__all__ = ["list_ids", "list_page", "list_tops"]


def list_page(
    keys: LogKeys, seeks: bool, prefix: str, limit: int, cursor: str | None
) -> Steps[tuple[list[str], str | None]]:
    """Return up to `limit` log ids after `cursor` starting with `prefix`; and a cursor.

    The cursor names the next page (None at the end). Skips past each log's entries
    with `start_after`, so a page costs about one LIST however long the logs are.
    """
    validate_prefix(prefix)
    if type(limit) is not int or limit < 1:
        what = f"{type(limit).__name__} {limit!r}"
        raise InvalidArgument(f"limit must be an int >= 1, not {what}"[:120])
    start = None if cursor is None else cursor_id(cursor)
    if not seeks:
        # No StartAfter, no order: every id under the prefix, paged here.
        every = yield from list_ids(keys, seeks, prefix)
        return _paged([i for i in every if start is None or i > start], limit, ended=True)
    after = None if start is None else f"{keys.ids_prefix()}{start}/~"
    ids, ended = yield from _ids_after(keys, prefix, after, limit)
    return _paged(ids, limit, ended=ended)


def _paged(ids: list[str], limit: int, *, ended: bool) -> tuple[list[str], str | None]:
    """Return the first `limit` ids and the cursor after them (None: no more)."""
    more = len(ids) > limit or not ended
    return ids[:limit], (ids[limit - 1] if more else None)


def list_tops(keys: LogKeys, seeks: bool, prefix: str = "") -> Steps[dict[str, int | None]]:
    """Return the ids `list_ids` returns, each with its newest version when known.

    From the same listing: a log whose keys one page holds whole has its top there
    (keys are never freed: the newest key is the newest version ever written); a long
    log (its keys cut by a page) and storage that cannot list in order give None.
    """
    validate_prefix(prefix)
    if not seeks:
        return dict.fromkeys((yield from list_ids(keys, seeks, prefix)))
    tops: dict[str, int | None] = {}
    ids, _ = yield from _ids_after(keys, prefix, None, None, tops)
    return {log_id: tops.get(log_id) for log_id in ids}


def list_ids(keys: LogKeys, seeks: bool, prefix: str = "") -> Steps[list[str]]:
    """Return the ids of logs with entries in the namespace that start with `prefix`."""
    validate_prefix(prefix)
    if seeks:
        return (yield from _ids_after(keys, prefix, None, None))[0]
    base = keys.ids_prefix()
    ids: list[str] = []
    token: str | None = None
    while True:
        page = yield from ask(ListKeys(base + prefix, token))
        _add_ids(ids, page, base)
        token = page.next_token
        if token is None:
            # Unordered, an id's keys may not be listed together.
            return sorted(set(ids))


def _ids_after(
    keys: LogKeys,
    prefix: str,
    after: str | None,
    limit: int | None,
    tops: dict[str, int | None] | None = None,
) -> Steps[tuple[list[str], bool]]:
    """Return the log ids after the key `after`, and whether the listing ended.

    At least `limit` ids unless it ended. Storage that lists in order only: each page
    starts after the last log it named (`start_after` past the rest of that log's
    entries), so a log costs one LIST at most however long it is. A page whose last
    key names no log (an object planted without a `/`) is passed by that key, so such
    objects never bring a page back. `tops`, when given, is filled with each id's
    newest listed version: None for a log whose keys a page cut (a long one, passed
    by `start_after`) or that holds a key that names no version.
    """
    base = keys.ids_prefix()
    ids: list[str] = []
    cut: set[str] = set()
    while limit is None or len(ids) < limit:
        page = yield from ask(ListKeys(base + prefix, start_after=after))
        _add_ids(ids, page, base)
        if tops is not None:
            _add_tops(tops, cut, page, base)
        if not page.keys or page.next_token is None:
            break
        if ids:
            cut.add(ids[-1])  # its keys may go on past the page
        skip = f"{base}{ids[-1]}/~" if ids else page.keys[-1]
        after = max(skip, page.keys[-1])  # the rest of the last log's entries: skipped
    else:
        return ids, False
    if tops is not None:
        tops.update(dict.fromkeys(cut & tops.keys()))
    return ids, True


def _add_ids(ids: list[str], page: KeyPage, base: str) -> None:
    """Add the ids a page of entry keys names to `ids` (a key without a `/` names none)."""
    for key in page.keys:
        log_id, slash, _ = key[len(base) :].partition("/")
        if slash and (not ids or ids[-1] != log_id):
            ids.append(log_id)


def _add_tops(tops: dict[str, int | None], cut: set[str], page: KeyPage, base: str) -> None:
    """Raise each listed log's top to the newest version the page names.

    A log with a key that names no version goes into `cut`: its top is not known.
    """
    for key in page.keys:
        log_id, slash, name = key[len(base) :].partition("/")
        if not slash:
            continue
        try:
            version = parse_entry_name(name, key)
        except StashpointError:
            cut.add(log_id)
            continue
        tops[log_id] = max(tops.get(log_id) or 0, version)

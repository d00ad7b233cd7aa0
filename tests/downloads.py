"""One lock for the test dependencies downloaded into `.cache/` at test time.

Test workers (pytest-xdist) collect and run at once: two of them downloading and unpacking
the same package into the same folder collide (a `FileExistsError` half-way through an
unpack, or a wheel read while the other still writes it). The first takes the lock and
fetches; the others wait on it, then find the package there.
"""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def fetching(folder: Path) -> Iterator[None]:
    """Hold `folder`'s lock (a file beside what is fetched) while the body fetches."""
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / ".fetching.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)

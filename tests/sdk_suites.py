"""A framework's own test suite, fetched from its published sdist and run on our backends.

The frameworks' sdists hold their test suites. `sdk_root` downloads the installed version's
sdist into `.cache/` at test time (nothing of it is kept in this repository) and unpacks it
whole or not at all; `outcomes` runs some of its test files in a pytest of their own, with
a plugin of ours (`-p NAME`, from `plugin_dir`) that puts our backend in the place of the
framework's; `compare` and `all_pass` judge the outcomes against a run without the plugin.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from tests.downloads import fetching

ROOT = Path(__file__).resolve().parents[1]


def sdk_root(distribution: str, marker: str) -> Path:
    """Download and unpack the installed `distribution`'s sdist once; return its folder.

    `marker`: a folder inside the sdist that says it is unpacked (its tests' folder).
    """
    version = metadata.version(distribution)
    cache = ROOT / ".cache" / distribution
    stem = f"{distribution.replace('-', '_')}-{version}"
    root = cache / stem
    if (root / marker).is_dir():
        return root
    with fetching(cache):
        if not (root / marker).is_dir():  # another worker fetched it meanwhile
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                 "--no-binary", ":all:", "--dest", str(cache), f"{distribution}=={version}"],
                check=True,
            )  # fmt: skip
            partial = cache / "partial"
            shutil.rmtree(partial, ignore_errors=True)
            with tarfile.open(cache / f"{stem}.tar.gz") as archive:
                archive.extractall(partial, filter="data")
            # Whole or absent: a worker that looks without the lock sees it so.
            (partial / stem).rename(root)
    return root


def outcomes(
    root: Path,
    files: list[str],
    *,
    plugin: tuple[Path, str] | None,
    env: Mapping[str, str] | None = None,
    timeout: float = 900,
    counts: Callable[[str], bool] = lambda test: True,
) -> dict[str, str]:
    """Run the SDK's test files; return each test's outcome (PASSED, FAILED, SKIPPED...).

    `plugin`: (its folder, its module name) loaded with `-p`; None runs the suite as shipped.
    A test that fails or errors, and whose outcome `counts` for the judgement, is run once
    more in a pytest of its own and judged by that run: some SDK tests wait on threads or
    the event loop with short timeouts that a busy machine misses, as shipped and on ours
    alike. A real failure fails both times. A failure that does not count (a test not
    applicable, or one that failed as shipped) is not run again: its outcome decides nothing.

    The first run prints no tracebacks: pytest parses every source file a traceback passes
    through to show it, about 0.7 s a failure here, which made the expected failures (the
    tests not applicable to ours) most of a run's time. The run again prints them, for the
    log of a failing test.
    """
    found = _run(root, files, plugin=plugin, env=env, timeout=timeout, tracebacks=False)
    failed = [t for t, outcome in found.items() if outcome in ("FAILED", "ERROR") and counts(t)]
    if failed:
        again = _run(root, failed, plugin=plugin, env=env, timeout=timeout, tracebacks=True)
        found.update(again)
    return found


def passed(found: Mapping[str, str]) -> frozenset[str]:
    """The tests of a run that passed."""
    return frozenset(t for t, outcome in found.items() if outcome == "PASSED")


def _run(
    root: Path,
    targets: list[str],
    *,
    plugin: tuple[Path, str] | None,
    env: Mapping[str, str] | None,
    timeout: float,
    tracebacks: bool,
) -> dict[str, str]:
    run_env = {**os.environ, "PYTHONPATH": str(plugin[0]) if plugin else "", **(env or {})}
    loaded = ["-p", plugin[1]] if plugin else []
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider",
         "-p", "no:randomly", "--tb=short" if tracebacks else "--tb=no", *loaded,
         *targets],
        cwd=root, env=run_env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    found: dict[str, str] = {}
    for line in done.stdout.splitlines():
        match = re.match(r"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (tests/\S+)", line)
        if match:
            found[match.group(2)] = match.group(1)
    assert found, done.stdout[-3000:] + done.stderr[-3000:]
    if tracebacks and any(outcome in ("FAILED", "ERROR") for outcome in found.values()):
        print(done.stdout[-20_000:])  # shown with the failing test that judges these
    return found


def compare(
    shipped: dict[str, str], ours: dict[str, str], not_applicable: Mapping[str, str]
) -> int:
    """Every test that passes as shipped passes on ours, bar `not_applicable`; return how many."""
    passed_there = {t for t, o in shipped.items() if o == "PASSED"}
    passed_here = {t for t, o in ours.items() if o == "PASSED"}
    # In the log of a failing run: what did not pass on either side (then judged below).
    print("not passing as shipped:", {t: o for t, o in shipped.items() if o != "PASSED"})
    print("not passing on ours:", {t: o for t, o in ours.items() if o != "PASSED"})
    missing = sorted(passed_there - passed_here - set(not_applicable))
    assert not missing, missing
    unexpected = sorted(t for t in not_applicable if t in passed_here)
    assert not unexpected, f"listed as not applicable but passing: {unexpected}"
    return len(passed_here)


def all_pass(ours: dict[str, str], not_applicable: Mapping[str, str]) -> int:
    """Every test ran passes on ours (or is skipped as the SDK skips it), bar the list."""
    failed = sorted(
        t for t, o in ours.items() if o in ("FAILED", "ERROR") and t not in not_applicable
    )
    assert not failed, failed
    return sum(o == "PASSED" for o in ours.values())


@dataclass(frozen=True)
class Suite:
    """A framework's own test suite, run as shipped or with our plugin (`sdk_plugin`)."""

    distribution: str
    """The installed distribution whose sdist holds the tests."""
    marker: str
    """A folder inside the sdist that says it is unpacked (`sdk_root`)."""
    plugin_dir: Path
    """The folder of our `sdk_plugin` module for it."""

    def run(
        self,
        files: list[str],
        *,
        ours: bool,
        url: str | None = None,
        counts: Callable[[str], bool] = lambda test: False,
    ) -> dict[str, str]:
        """Run test files, as shipped or on the stash (`url`: one shared stash for them all).

        `counts`: the tests whose failures are run again (a failure as shipped is not: the
        comparison judges only what passed as shipped).
        """
        root = sdk_root(self.distribution, self.marker)
        env = {"STASHPOINT_SDK_URL": url} if url is not None else {}
        plugin = (self.plugin_dir, "sdk_plugin") if ours else None
        return outcomes(root, files, plugin=plugin, env=env, counts=counts)

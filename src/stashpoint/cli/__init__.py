"""The `stashpoint` command (needs the `cli` extra: typer and rich)."""

from __future__ import annotations

import sys


def main() -> None:
    """Run the command line; explain how to install it when typer or rich is missing."""
    if sys.argv[1:] == ["--version"]:  # before typer loads: the quickest answer
        from importlib.metadata import version

        print(f"stashpoint {version('stashpoint')}")
        return
    try:
        from stashpoint.cli.app import main as run
    except ImportError as exc:  # pragma: no cover - depends on the installation
        print(f"stashpoint's command needs its extra: pip install 'stashpoint[cli]' ({exc})",
              file=sys.stderr)  # fmt: skip
        sys.exit(1)
    run()

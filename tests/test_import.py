"""What `import stashpoint` loads: the core stays light for Lambda cold starts."""

from __future__ import annotations

import subprocess
import sys
import textwrap

HEAVY = ("asyncio", "boto3", "botocore", "aiobotocore", "typer", "rich", "sqlite3")

SYNC_LOCAL_USE = textwrap.dedent(
    """
    import sys, tempfile, stashpoint
    with tempfile.TemporaryDirectory() as folder:
        with stashpoint.open(f"local://{folder}") as stash:
            env = stashpoint.Envelope.initial("a", None, "k", 1, {"n": 1})
            stash.checkpoints.compare_and_swap(env, None)
            assert stash.checkpoints.load("a").payload == {"n": 1}
    print(" ".join(sorted(m for m in sys.argv[1:] if m in sys.modules)))
    """
)


def _loaded(script: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", script, *HEAVY], capture_output=True, text=True, check=True
    )
    return set(out.stdout.split())


def test_import_loads_no_heavy_or_optional_module() -> None:
    script = "import sys, stashpoint\nprint(' '.join(m for m in sys.argv[1:] if m in sys.modules))"
    assert _loaded(script) == set()


def test_sync_checkpoints_on_the_local_default_load_no_async_or_aws_module() -> None:
    # The local default's index is SQLite; everything else stays unloaded.
    assert _loaded(SYNC_LOCAL_USE) <= {"sqlite3"}

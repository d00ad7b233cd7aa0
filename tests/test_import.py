"""What `import stashpoint` loads: the core stays light for Lambda cold starts."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

HEAVY = ("asyncio", "boto3", "botocore", "aiobotocore", "typer", "rich", "sqlite3")
COLD_PATH_DEFERRED = (
    "pydantic",
    "pydantic_core",
    "opentelemetry",
    "opentelemetry.trace",
    "uuid",
    "stashpoint.index.requests",
    "stashpoint._backends.sqlite",
)
"""Not loaded by saving and loading a small checkpoint (they cost a Lambda cold start
more than the save itself); all but asyncio are installed in the test environment."""

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


def _loaded(script: str, names: tuple[str, ...] = HEAVY) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", script, *names], capture_output=True, text=True, check=True
    )
    return set(out.stdout.split())


def test_import_loads_no_heavy_or_optional_module() -> None:
    script = "import sys, stashpoint\nprint(' '.join(m for m in sys.argv[1:] if m in sys.modules))"
    assert _loaded(script) == set()


DEFERRED = ("pydantic", "zstandard", "stashpoint.envelope", "stashpoint.codec", "stashpoint.stash")


def test_import_defers_even_the_codec_and_models_until_first_use() -> None:
    # `import stashpoint` loads the error types only; every other name loads when touched.
    script = (
        "import sys, stashpoint\n"
        "before = [m for m in sys.argv[1:] if m in sys.modules]\n"
        "stashpoint.Envelope\n"
        "after = [m for m in sys.argv[1:] if m in sys.modules]\n"
        "print(len(before), ' '.join(after))"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, *DEFERRED], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out[0] == "0"
    assert set(out[1:]) == {"stashpoint.envelope"}  # a plain dataclass: no pydantic


def test_every_public_name_resolves() -> None:
    import stashpoint

    for name in stashpoint.__all__:
        assert getattr(stashpoint, name) is not None, name
    assert set(dir(stashpoint)) >= set(stashpoint.__all__)


def test_sync_checkpoints_on_the_local_default_load_no_async_aws_or_index_module() -> None:
    # The SQLite index opens on the first run operation, not for checkpoints.
    assert _loaded(SYNC_LOCAL_USE) == set()


def test_small_checkpoints_load_neither_pydantic_nor_opentelemetry_nor_the_index() -> None:
    # OpenTelemetry is installed here: spans start once the application imports it.
    assert _loaded(SYNC_LOCAL_USE, COLD_PATH_DEFERRED) == set()


def test_a_large_document_and_the_first_run_operation_load_what_they_need(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import sys, stashpoint
        with stashpoint.open("local://{tmp_path}") as stash:
            big = [{{"turn": i, "text": "x"}} for i in range(5000)]
            stash.checkpoints.compare_and_swap(
                stashpoint.Envelope.initial("big", None, "k", 1, big), None
            )
            assert stash.checkpoints.load("big").payload == big
            engine = "pydantic_core" in sys.modules
            stash.runs.create_run("r1")
            print(engine, "stashpoint._backends.sqlite" in sys.modules)
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True"]
    assert (tmp_path / "index.sqlite3").exists()


def test_the_langgraph_saver_imports_no_graph_runtime() -> None:
    script = (
        "import sys, stashpoint.langgraph, stashpoint.spot\n"
        "print(' '.join(m for m in ('langgraph.graph', 'langgraph.pregel') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.split() == []

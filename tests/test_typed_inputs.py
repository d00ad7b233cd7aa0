"""Bad input to the newer public calls is a typed error (issue 47, item 10), never a plain
`TypeError`, `AttributeError`, `UnicodeEncodeError` or `PermissionError`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import stashpoint
from stashpoint.agent import AgentCheckpoint, AgentRunner, Message, ModelRef, TurnResult

MODEL = ModelRef(provider="fake", name="m")


def test_decrypt_with_a_key_that_is_not_a_str_is_invalid_argument(
    local_encrypted_url: tuple[str, dict[str, Any]],
) -> None:
    url, options = local_encrypted_url
    with stashpoint.open(url, **options) as stash:
        for key in (0, b"k", ["k"]):
            with pytest.raises(stashpoint.InvalidArgument):
                stash.admin.decrypt(b"\x28\xb5\x2f\xfd", key=key)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "call",
    [
        lambda store: store.put(("a\ud800",), "k", {"v": 1}),
        lambda store: store.get(("a\ud800",), "k"),
        lambda store: store.search(("a\ud800",)),
        lambda store: store.put(("a",), "k\ud800", {"v": 1}),
        lambda store: store.list_namespaces(prefix=("a\ud800",)),
        lambda store: store.delete(("a\ud800",), "k"),
    ],
)
def test_a_store_label_or_key_with_a_lone_surrogate_is_invalid_argument(
    tmp_path: Path, call: Any
) -> None:
    pytest.importorskip("langgraph.store.base")
    from stashpoint.langgraph import StashpointStore

    with stashpoint.open(f"local://{tmp_path / 's'}") as stash:
        store = StashpointStore(stash)
        store.put(("a",), "kept", {"v": 1})
        with pytest.raises(stashpoint.InvalidArgument):
            call(store)
        item = store.get(("a",), "kept")
        assert item is not None and item.value == {"v": 1}


def test_an_agent_given_a_model_that_is_no_model_ref_is_invalid_argument(tmp_path: Path) -> None:
    with stashpoint.open(f"local://{tmp_path / 's'}") as stash:
        runner = AgentRunner(AgentCheckpoint.existing("agent-1", stash.checkpoints))
        with pytest.raises(stashpoint.InvalidArgument):
            runner.run(lambda state, number: TurnResult(messages=[]), agent="a", model="m")  # type: ignore[arg-type]


def test_a_step_given_something_not_callable_is_invalid_argument(tmp_path: Path) -> None:
    with stashpoint.open(f"local://{tmp_path / 's'}") as stash:
        run = stash.runs.durable("r1")
        with pytest.raises(stashpoint.InvalidArgument):
            run.step("a", 42)  # type: ignore[call-overload]
        assert run.step("a", lambda: 7) == 7


@pytest.mark.parametrize(
    "returned",
    [None, "done", TurnResult(messages=["hi"]), TurnResult(messages="hi")],  # type: ignore[list-item, arg-type]
)
def test_a_turn_returning_the_wrong_thing_is_invalid_argument(
    tmp_path: Path, returned: Any
) -> None:
    with stashpoint.open(f"local://{tmp_path / 's'}") as stash:
        runner = AgentRunner(AgentCheckpoint.existing("agent-1", stash.checkpoints))
        with pytest.raises(stashpoint.InvalidArgument) as refused:
            runner.run(lambda state, number: returned, agent="a", model=MODEL)
        assert "TurnResult" in str(refused.value)


def test_a_turn_returning_messages_still_works(tmp_path: Path) -> None:
    from stashpoint.agent import ModelResponse

    with stashpoint.open(f"local://{tmp_path / 's'}") as stash:
        runner = AgentRunner(AgentCheckpoint.existing("agent-1", stash.checkpoints))
        outcome = runner.run(
            lambda state, number: TurnResult(
                messages=[Message(role="assistant", content="hello")],
                response=ModelResponse(message=Message(role="assistant", content="hello")),
            ),
            agent="a",
            model=MODEL,
        )
        assert outcome is not None


def test_export_into_a_folder_that_cannot_be_written_names_the_file_asked_for(
    tmp_path: Path,
) -> None:
    from tests.cli.test_cli import cli

    url = f"local://{tmp_path / 's'}"
    with stashpoint.open(url) as stash:
        stash.logs.append("t1", [{"text": "x"}], after=None)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    out = blocker / "export.jsonl"
    result = cli("export", "--prefix", "t", "--out", str(out), url=url, check=False)
    said = result.stdout + result.stderr
    assert result.returncode == 6, said
    assert "export.jsonl" in said and ".partial" not in said
    assert "Traceback" not in said

"""`LogSteps(seal_on_append=False)`: the append that completes a range returns after its own
request and notes the range; `seal_due` seals it later, as the append would have."""

from __future__ import annotations

from typing import Any

import stashpoint
from stashpoint.steps import run_sync
from stashpoint.stores.objects import ListKeys


def _segments(stash: Any) -> list[str]:
    return stash.driver(ListKeys(stash.layout.namespace_prefix("sealed"))).keys  # type: ignore[no-any-return]


def test_appends_note_the_ranges_and_seal_due_seals_each(memory_url: tuple[str, Any]) -> None:
    with stashpoint.open(memory_url[0]) as stash:
        logs = stash.log_steps("logs")
        logs.seal_on_append = False
        sent: list[str] = []
        stash.intercept(
            lambda request, proceed: (sent.append(type(request).__name__), proceed())[1]
        )
        head = None
        for version in range(200):  # three ranges completed
            sent.clear()
            head = run_sync(logs.append("job", [version], after=head), stash.driver)
            assert sent == ["PutObject"], (version, sent)
        assert _segments(stash) == []
        assert len(logs.due_seals) == 1  # one log, its three ranges
        assert run_sync(logs.seal_due(), stash.driver) == 1
        assert len(_segments(stash)) == 3
        assert len(logs.due_seals) == 0
        assert run_sync(logs.seal_due(), stash.driver) == 0  # nothing left due
        records = stash.logs.records("job")
        assert records == list(range(200))


def test_a_new_life_replaces_the_ranges_due_of_the_old(memory_url: tuple[str, Any]) -> None:
    with stashpoint.open(memory_url[0]) as stash:
        logs = stash.log_steps("logs")
        logs.seal_on_append = False
        head = None
        for version in range(65):
            head = run_sync(logs.append("job", [version], after=head), stash.driver)
        assert logs.due_seals.get("job") == ((64,), 0)
        run_sync(logs.delete("job"), stash.driver)  # ends the life at version 65
        head = None
        for version in range(130):  # the new life completes ranges of its own
            head = run_sync(logs.append("job", [version], after=head), stash.driver)
        versions, base = logs.due_seals.get("job") or ((), -1)
        assert base == 66 and all(v > 66 for v in versions)

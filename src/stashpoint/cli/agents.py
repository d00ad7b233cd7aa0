"""Agent commands (`stashpoint agent ...`): settle a turn a dead process left in flight."""

from __future__ import annotations

from typing import Annotated

import typer

from stashpoint.cli.options import AsJson, Url, open_stash

app = typer.Typer(help="Agent checkpoints: settle interrupted turns.", no_args_is_help=True)
"""The `agent` command group."""


@app.command("resolve")
def agent_resolve(
    checkpoint_id: Annotated[str, typer.Argument(metavar="ID", help="Agent checkpoint id.")],
    retry_turn: Annotated[
        bool, typer.Option("--retry-turn", help="Run the interrupted turn again.")
    ] = False,
    abandon_turn: Annotated[
        bool, typer.Option("--abandon-turn", help="Count it as done, add nothing, go on.")
    ] = False,
    url: Url = None,
    as_json: AsJson = False,
) -> None:
    """Settle a turn a dead process left in flight (resume refuses it as ambiguous).

    \b
    --retry-turn    its model calls and tools run again (they may repeat effects)
    --abandon-turn  it is counted and listed in `abandoned_turns`; nothing is added
    """
    from stashpoint.agent import AgentCheckpoint, AgentRunner, TurnInFlight
    from stashpoint.cli.output import Output
    from stashpoint.cli.safe import safe

    output = Output(as_json=as_json)
    if retry_turn == abandon_turn:
        raise typer.BadParameter("pass exactly one of --retry-turn and --abandon-turn")
    with open_stash(url) as stash:
        handle = AgentCheckpoint.existing(checkpoint_id, stash.checkpoints)
        _, before = handle.load()
        resolved, _ = AgentRunner(handle).resolve(retry=retry_turn)
    turn = before.phase.turn if isinstance(before.phase, TurnInFlight) else None
    how = "retried" if retry_turn else "abandoned"
    if as_json:
        output.emit({"checkpoint_id": checkpoint_id, "resolved": resolved, "turn": turn,
                     "how": how if resolved else None})  # fmt: skip
    elif resolved:
        output.say(f"{safe(checkpoint_id)}: turn {turn} {how}; resume it to go on")
    else:
        output.say(f"{safe(checkpoint_id)}: no turn in flight, nothing to resolve")

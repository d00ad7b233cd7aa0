"""MkDocs hook: write every command's `--help` where a page says `<!-- cli-reference -->`."""

from __future__ import annotations

from typing import Any

MARKER = "<!-- cli-reference -->"


def _sections(command: Any, path: list[str], context: Any) -> list[str]:
    name = " ".join(path)
    # The command's own context class (typer's vendored click), as `--help` makes it.
    with command.context_class(
        command, info_name=path[-1], parent=context, terminal_width=88
    ) as ctx:
        text = command.get_help(ctx)
        sections = [f"## `{name}`\n\n```text\n{text}\n```\n"]
        for sub in sorted(getattr(command, "commands", {})):
            sections += _sections(command.commands[sub], [*path, sub], ctx)
    return sections


def on_page_markdown(markdown: str, **_: Any) -> str:
    """Replace the marker with the reference (pages without it are left as they are)."""
    if MARKER not in markdown:
        return markdown
    import typer.main

    from stashpoint.cli.app import app

    root = typer.main.get_command(app)
    return markdown.replace(MARKER, "\n".join(_sections(root, ["stashpoint"], None)))

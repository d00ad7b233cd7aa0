"""The source's structure, checked from its syntax (issue 24: public, typed composition).

No module reads another object's `_private` attribute: a part of a stash that other code
needs is a public, documented accessor (`Stash.driver`, `Stash.log_steps`, `Store.steps`,
`AgentCheckpoint.storage`), so the layers meet only where they say they do.
"""

from __future__ import annotations

import ast
from pathlib import Path

SOURCE = Path(__file__).resolve().parent.parent / "src" / "stashpoint"


def _private_reads(tree: ast.AST) -> list[tuple[int, str]]:
    """Return `(line, expression)` of every `x._name` whose `x` is not `self`, `cls` or
    `super()` (dunders are Python's, not private)."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        name = node.attr
        if not name.startswith("_") or (name.startswith("__") and name.endswith("__")):
            continue
        base = node.value
        if isinstance(base, ast.Name) and base.id in ("self", "cls"):
            continue
        if isinstance(base, ast.Call) and getattr(base.func, "id", None) == "super":
            continue
        found.append((node.lineno, ast.unparse(node)))
    return found


def test_no_module_reads_another_object_s_private_attribute() -> None:
    reads = [
        f"{path.relative_to(SOURCE)}:{line}: {expression}"
        for path in sorted(SOURCE.rglob("*.py"))
        for line, expression in _private_reads(ast.parse(path.read_text(), str(path)))
    ]
    assert reads == [], "\n".join(reads)


def test_the_scan_sees_a_private_read() -> None:
    """The scan itself: it must find what it looks for, and only that."""
    tree = ast.parse(
        "self._a\ncls._b\nsuper()._c\nx.__class__\nstash._parts\nf()._execute\nobj.public"
    )
    assert [expression for _, expression in _private_reads(tree)] == [
        "stash._parts",
        "f()._execute",
    ]


def test_the_benches_use_the_public_api_of_the_library() -> None:
    """Benches are what users would write: only botocore's own internals may be patched
    there (to count what goes on the wire), never the library's."""
    bench = SOURCE.parents[1] / "bench"
    reads = [
        f"{path.name}:{line}: {expression}"
        for path in sorted(bench.glob("*.py"))
        for line, expression in _private_reads(ast.parse(path.read_text(), str(path)))
        if not expression.startswith(("botocore.", "aiobotocore."))
    ]
    assert reads == [], "\n".join(reads)

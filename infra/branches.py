"""Render the template once per side of its conditions, for scanners that skip `Fn::If`.

checkov (and others) do not evaluate `Fn::If`, so a policy inside one goes unchecked. This
writes `stashpoint.{all-true,all-false}.json`: every condition taken one way, `Fn::If`
replaced by the branch it selects, `AWS::NoValue` removed.

    python infra/branches.py OUT_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from generate import template

NO_VALUE = {"Ref": "AWS::NoValue"}


def resolve(value: Any, take: bool) -> Any:
    """Return `value` with every `Fn::If` replaced by its `take` branch."""
    if isinstance(value, dict):
        if set(value) == {"Fn::If"}:
            _, then, otherwise = value["Fn::If"]
            return resolve(then if take else otherwise, take)
        resolved = {k: resolve(v, take) for k, v in value.items()}
        return {k: v for k, v in resolved.items() if v != NO_VALUE}
    if isinstance(value, list):
        return [resolve(v, take) for v in value if v != NO_VALUE]
    return value


def main(out_dir: str) -> None:
    """Write both renderings into `out_dir`."""
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    for take, name in ((True, "all-true"), (False, "all-false")):
        rendered = resolve(template(), take)
        rendered.pop("Conditions", None)
        (folder / f"stashpoint.{name}.json").write_text(json.dumps(rendered, indent=2))


if __name__ == "__main__":
    main(sys.argv[1])

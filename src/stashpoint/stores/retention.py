"""Retention rules: which writes ask S3 Object Lock to keep them, per namespace.

`retention="sealed:GOVERNANCE:400,blobs:COMPLIANCE:2555"` (a URL or `open` option of an
S3 stash) makes every object written under those namespaces carry an Object Lock
retention: its mode and a retain-until date that many days after the write. Archival
namespaces are the usual choice (sealed segments, blobs, envelope revisions in
`checkpoints`, receipts in `purges`): a transcript's sealed history becomes unalterable
for the period, while its hot entries stay free to be vacated. The bucket must have been
created with Object Lock (the template's `ObjectLockMode` parameter).
"""

from __future__ import annotations

from dataclasses import dataclass

from stashpoint.errors import ConfigurationError, described
from stashpoint.stores.layout import NAMESPACES, Layout

MODES = ("GOVERNANCE", "COMPLIANCE")
"""S3 Object Lock's retention modes."""


@dataclass(frozen=True, slots=True)
class RetentionRule:
    """Objects under `key_prefix` are written with a retention of `days` in `mode`."""

    namespace: str
    """The namespace the rule names."""
    key_prefix: str
    """Its key prefix in this stash (`{prefix}/{namespace}/`)."""
    mode: str
    """`GOVERNANCE` (users with a bypass permission may shorten it) or `COMPLIANCE`."""
    days: int
    """How long after each write the object is kept."""

    def __str__(self) -> str:
        return f"{self.namespace} {self.mode} {self.days} days"


def parse_rules(text: str | None, layout: Layout) -> tuple[RetentionRule, ...]:
    """Parse `namespace:MODE:days,...`; `ConfigurationError` for anything else."""
    if not text:
        return ()
    if not isinstance(text, str):
        raise ConfigurationError(f"retention must be a str, not {described(text)}")
    rules: list[RetentionRule] = []
    for part in text.split(","):
        fields = part.strip().split(":")
        if len(fields) != 3:
            raise ConfigurationError(
                f"retention rule {part!r} is not NAMESPACE:MODE:DAYS (sealed:GOVERNANCE:400)"
            )
        namespace, mode, days = fields[0], fields[1].upper(), fields[2]
        if namespace not in NAMESPACES:
            raise ConfigurationError(
                f"retention names {namespace!r}, not a namespace ({', '.join(NAMESPACES)})"
            )
        if mode not in MODES:
            raise ConfigurationError(f"retention mode must be GOVERNANCE or COMPLIANCE: {part!r}")
        if not days.isdigit() or not 1 <= int(days) <= 36500:
            raise ConfigurationError(f"retention days must be 1 to 36500: {part!r}")
        rules.append(RetentionRule(namespace, layout.namespace_prefix(namespace), mode, int(days)))
    return tuple(rules)


def rule_for(rules: tuple[RetentionRule, ...], key: str) -> RetentionRule | None:
    """Return the rule an object key falls under, None if none does."""
    return next((rule for rule in rules if key.startswith(rule.key_prefix)), None)

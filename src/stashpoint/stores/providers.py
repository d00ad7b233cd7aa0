"""What an object store can do, declared: the capabilities the logic chooses strategies by.

Every S3 that honours conditional writes can hold a stash, but they differ in exactly what
stashpoint relies on (`docs/providers.md` has the matrix, with dates and sources):

- **conditional writes**: `If-None-Match: *` (create-only) and `If-Match` (compare-and-swap)
  on PUT. Without both, or with an `If-Match` that succeeds on a missing key (it would let
  a stale writer re-create a deleted head), compare-and-swap cannot be kept: such a
  provider is refused when a stash is opened on it, never used.
- **ordered listing**: keys come back in ascending order (S3 general purpose), or in no
  particular order (S3 Express One Zone directory buckets). Without order, a log's top is
  found from every key of its listing, never from the last key of a page.
- **StartAfter**: a listing may start after a key. Without it, listings start at the
  prefix and page with continuation tokens only.
- **any delimiter**: a listing rolls keys up by a delimiter of more than one character
  (`..`, what separates a LangGraph store item's namespace from its key), so the store's
  `list_namespaces` lists a key per namespace. Without it (only `/`, or not known), it
  lists every item's key.
- **versioning**: older versions of an object can be listed and read (`history`, `diff`,
  old revisions, the last resort of an unclear write's judgement, the purge of every
  version). Without it, a purge lists and deletes current objects, and what needs older
  versions says so with a typed error.
- **conditional delete**: `DELETE` with `If-Match` (clean-ups that must not remove an
  object rewritten meanwhile). Without it, those clean-ups leave such objects alone.

`provider=NAME` in a stash's URL (or `open(..., provider=...)`) names the profile; without
it, a bucket named like a directory bucket (`...--x-s3`) is `s3express`, anything else
`aws`. `stashpoint doctor --conformance` probes an endpoint and prints the capabilities it
found beside the profile in use.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from stashpoint.errors import ConfigurationError


@dataclass(frozen=True)
class Provider:
    """One object store's capabilities, as stashpoint relies on them."""

    name: str
    """The profile's name (`aws`, `s3express`, `r2`, ...)."""
    conditional_create: bool = True
    """`If-None-Match: *` on PUT refuses to overwrite (412)."""
    conditional_update: bool = True
    """`If-Match: ETag` on PUT refuses a stale ETag (412)."""
    refuses_missing_match: bool = True
    """`If-Match` on a key that does not exist is refused (it does not create)."""
    ordered_listing: bool = True
    """Listings return keys in ascending order."""
    start_after: bool = True
    """Listings honour `StartAfter`."""
    any_delimiter: bool = False
    """Listings roll keys up by any delimiter string, not only `/` (`..`: verified where
    True; MinIO repeats its continuation token with one, directory buckets refuse it)."""
    versioning: bool = True
    """Older versions of objects can be listed and read (the bucket may still have
    versioning off: `stashpoint doctor` says)."""
    conditional_delete: bool = True
    """`DELETE` honours `If-Match`."""
    etag_is_md5: bool = True
    """An object's ETag is the MD5 of its body (single-part uploads); stashpoint never
    relies on it, the conformance kit reports it."""
    object_lock: bool = True
    """S3 Object Lock: a retention and a legal hold per object version (`retention=`,
    `stashpoint hold`)."""
    description: str = ""
    """Where the facts come from, and anything else a user should know."""
    beyond_purge: str = ""
    """Copies of a stash's objects this store can keep where a purge cannot reach them
    (snapshots, replicas): every receipt of a purge here says so, and so does `doctor`."""

    @property
    def safe(self) -> bool:
        """Whether compare-and-swap holds here (conditional writes, both kinds, refused)."""
        return self.conditional_create and self.conditional_update and self.refuses_missing_match

    @property
    def seeks(self) -> bool:
        """Whether a listing may start mid-way and trust its order (`StartAfter` hints)."""
        return self.ordered_listing and self.start_after

    def capabilities(self) -> dict[str, bool]:
        """Return the capabilities by name (what the conformance kit compares)."""
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if f.name not in ("name", "description", "beyond_purge")
        }


PROVIDERS: dict[str, Provider] = {
    p.name: p
    for p in (
        Provider(
            "aws",
            any_delimiter=True,
            description="AWS S3 general purpose buckets (conditional PUTs "
            "2024-08 and 2024-11, conditional DELETE 2025-09)",
            beyond_purge="copies in replication destinations (S3 Replication) and in S3 "
            "Files or other mounts of the bucket are not seen by a purge: purge them there",
        ),
        Provider(
            "s3express",
            ordered_listing=False,
            start_after=False,
            versioning=False,
            etag_is_md5=False,
            description="S3 Express One Zone directory buckets: single-digit-millisecond "
            "latency in one zone; listings unordered, no StartAfter, no versioning, only '/' "
            "as a delimiter",
        ),
        Provider(
            "r2",
            versioning=False,
            conditional_delete=False,
            object_lock=False,
            description="Cloudflare R2: no egress fees; no versioning, no conditional DELETE; "
            "bucket locks (retention rules by prefix, set on the bucket), not S3 Object Lock",
        ),
        Provider(
            "minio",
            description="MinIO (If-Match on a missing key was fixed in 2024: use a release "
            "after RELEASE.2024-05; its open-source repository is archived, maintenance "
            "only since 2025-12)",
        ),
        Provider("ceph", description="Ceph RGW (conditional DELETE by If-Match)"),
        Provider(
            "tigris",
            description="Tigris (global buckets are eventually consistent "
            "unless a request asks otherwise)",
            beyond_purge="Tigris bucket snapshots and forks keep the objects a purge "
            "deletes: delete the snapshots that hold them",
        ),
        Provider("seaweedfs", any_delimiter=True, description="SeaweedFS (the tests' server)"),
        Provider(
            "garage",
            conditional_create=False,
            conditional_update=False,
            description="Garage: no conditional writes, so no compare-and-swap",
        ),
        Provider("local", any_delimiter=True, etag_is_md5=False, description="a local folder"),
        Provider(
            "memory", any_delimiter=True, etag_is_md5=False, description="memory (one process)"
        ),
    )
}
"""Every known profile, by name."""

DIRECTORY_BUCKET_SUFFIX = "--x-s3"
"""How S3 Express One Zone directory bucket names end (`name--azid--x-s3`)."""


def provider_named(name: object, bucket: str = "") -> Provider:
    """Return the profile a URL names (None: inferred from the bucket's name).

    An unknown name, or a provider that cannot keep compare-and-swap, is
    `ConfigurationError`, before anything is sent.
    """
    if name in (None, ""):
        name = "s3express" if bucket.endswith(DIRECTORY_BUCKET_SUFFIX) else "aws"
    profile = PROVIDERS.get(str(name))
    if profile is None or profile.name in ("local", "memory"):
        known = ", ".join(n for n in PROVIDERS if n not in ("local", "memory"))
        raise ConfigurationError(f"unknown provider {name!r}: use one of {known}")
    if not profile.safe:
        raise ConfigurationError(
            f"{profile.name} cannot hold a stash: {profile.description}. stashpoint needs "
            "If-None-Match and If-Match on PUT, refused when they do not hold"
        )
    return profile

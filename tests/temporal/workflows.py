"""A workflow and an activity that move large values (what external storage is for)."""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity, workflow


@activity.defn
async def summarize(document: str) -> str:
    """Return a large value made from a large argument (both beyond the threshold)."""
    return document.upper() + "|" + str(len(document))


@workflow.defn
class Digest:
    """Pass its large input to an activity and return the activity's large result."""

    @workflow.run
    async def run(self, document: str) -> str:
        """Run the activity once."""
        return await workflow.execute_activity(
            summarize, document, start_to_close_timeout=timedelta(seconds=30)
        )

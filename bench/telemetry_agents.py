"""The simulated node agents of bench/telemetry.py (and bench/cluster_capacity.py): each
one a real WebSocket on `/ws/agent/` with its node credential, numbered heartbeats timed
to their ack, and (for senders) columnar metric batches, two in flight at most."""

from __future__ import annotations

import asyncio
import json
import random
import ssl
import time
from dataclasses import dataclass, field
from typing import Any

HEARTBEAT_S = 5.0
BATCH_POINTS = 1000


@dataclass
class Stats:
    rtts: list[float] = field(default_factory=list)
    quiet_rtts: list[float] = field(default_factory=list)  # agents that send no metrics
    points_acked: int = 0
    refused: int = 0
    errors: list[str] = field(default_factory=list)
    lost_max: int = 0
    beating: set[str] = field(default_factory=set)  # agents with a heartbeat acknowledged


def _batch(step0: int, seq: int, task: dict[str, int]) -> str:
    """A metrics message of `BATCH_POINTS` steps of `loss`, columnar (docs/protocol.md):
    no times, so the server stamps them with the time it received them."""
    steps = ",".join(str(s) for s in range(step0, step0 + BATCH_POINTS))
    values = ",".join(f"{1.0 / (s + 1):.6f}" for s in range(step0, step0 + BATCH_POINTS))
    return (
        f'{{"type":"metrics","id":{task["id"]},"attempt":{task["attempt"]},'
        f'"seq":{seq},"series":{{"loss":{{"steps":[{steps}],"values":[{values}]}}}}}}'
    )


async def _agent(
    url: str,
    credential: str,
    task: dict[str, int] | None,
    stop: asyncio.Event,
    stats: Stats,
    tls: ssl.SSLContext | None = None,
) -> None:
    from websockets.asyncio.client import connect

    headers = {"Authorization": f"Node {credential}"}
    options: dict[str, Any] = {"ssl": tls} if tls is not None else {}
    async with connect(
        url, additional_headers=headers, open_timeout=60, max_size=None, **options
    ) as ws:
        seq = 0
        sent_at: dict[int, float] = {}  # heartbeat seq -> time sent
        batches: dict[int, None] = {}  # metric batch seqs in flight
        window = asyncio.Semaphore(2)

        async def receive() -> None:
            async for raw in ws:
                frame = json.loads(raw)
                if frame["type"] == "ack":
                    now = time.perf_counter()
                    also = set(frame.get("also", ()))
                    for s in [s for s in sent_at if s <= frame["seq"] or s in also]:
                        rtt = (now - sent_at.pop(s)) * 1000
                        stats.beating.add(credential)
                        stats.rtts.append(rtt)
                        if task is None:
                            stats.quiet_rtts.append(rtt)
                    for s in [s for s in batches if s <= frame["seq"]]:
                        del batches[s]
                        stats.points_acked += BATCH_POINTS
                        window.release()
                elif frame["type"] == "error":
                    stats.refused += 1

        async def heartbeats() -> None:
            nonlocal seq
            await asyncio.sleep(random.uniform(0, HEARTBEAT_S))
            while not stop.is_set():
                seq += 1
                sent_at[seq] = time.perf_counter()
                beat = {"type": "heartbeat", "usage": {"cpu_percent": 3.0}, "tasks": [], "seq": seq}
                await ws.send(json.dumps(beat))
                await asyncio.sleep(HEARTBEAT_S)

        async def metrics() -> None:
            nonlocal seq
            assert task is not None
            step = 0
            while not stop.is_set():
                await window.acquire()
                seq += 1
                batches[seq] = None
                await ws.send(_batch(step, seq, task))
                step += BATCH_POINTS

        jobs = [asyncio.create_task(receive()), asyncio.create_task(heartbeats())]
        if task is not None:
            jobs.append(asyncio.create_task(metrics()))
        await stop.wait()
        for job in jobs:
            job.cancel()
        await asyncio.gather(*jobs, return_exceptions=True)

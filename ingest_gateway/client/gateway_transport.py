"""The consumer through a gateway: group membership over HTTP, and ``POST /fetch`` long-polls.

Both talk to the gateway through one :class:`~ingest_gateway.client.session.Session`
(the consumer builds one and hands it to both). Error answers come back as the
typed errors the coordinator raised (``unknown_member_id`` -> UnknownMemberId,
...). The routes are ``ingest_gateway.http.group_routes`` and ``.fetch_routes``;
``POST /fetch`` answers an Arrow stream whose batches carry ``topic``,
``partition`` and ``next_offset`` metadata (an empty batch with ``error``
reports an offset out of range).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from conf.topic import validate_topic_name
from ingest_gateway.client.group_protocol import MemberState, validate_group_id
from ingest_gateway.client.session import Session
from ingest_gateway.errors import (GatewayError, IllegalGeneration, InconsistentGroupProtocol,
                                   RebalanceInProgress, UnknownMemberId)
from log_layout.errors import OffsetOutOfRange, UnknownPartition, UnknownTopic


class HttpMembership:
    """Group membership and commits through a gateway's group protocol routes."""

    #: a coordinator decides membership: subscribe() may join through it
    coordinated = True

    def __init__(self, gateway: "Session | str", group: str):
        self.http = gateway if isinstance(gateway, Session) else Session(gateway)
        self.group = validate_group_id(group)

    def _errors(self, member_id: Any = None, generation: int = -1) -> dict[str, Any]:
        g = self.group
        return {
            "unknown_member_id": lambda d: UnknownMemberId(g, member_id),
            "illegal_generation": lambda d: IllegalGeneration(g, member_id, generation, -1),
            "rebalance_in_progress": lambda d: RebalanceInProgress(g, generation),
            "partition_not_assigned": lambda d: GatewayError(409, "partition_not_assigned",
                                                             d.get("message", "")),
            "inconsistent_group_protocol": lambda d: InconsistentGroupProtocol(g, (), ()),
        }

    def join(self, topics: Sequence[str], member_id: str | None, *, client_id: str = "",
             strategies: Sequence[str] = ("range",), session_timeout_ms: int | None = None,
             rebalance_timeout_ms: int = 60_000) -> MemberState:
        doc = self.http.call("POST", f"/groups/{self.group}/members",
                             {"topics": list(topics), "member_id": member_id,
                              "client_id": client_id, "strategies": list(strategies),
                              "session_timeout_ms": session_timeout_ms,
                              "rebalance_timeout_ms": rebalance_timeout_ms},
                             errors=self._errors(member_id))
        return MemberState.from_json(doc)

    def heartbeat(self, member_id: str, generation: int) -> MemberState:
        doc = self.http.call("POST", f"/groups/{self.group}/members/{member_id}/heartbeat",
                             {"generation": generation}, timeout=10,
                             errors=self._errors(member_id, generation))
        return MemberState.from_json(doc)

    def leave(self, member_id: str) -> None:
        self.http.call("DELETE", f"/groups/{self.group}/members/{member_id}",
                       errors=self._errors(member_id))

    def commit(self, offsets: Mapping[tuple[str, int], int], member_id: str | None,
               generation: int) -> None:
        self.http.call("POST", f"/groups/{self.group}/offsets",
                       {"member_id": member_id, "generation": generation,
                        "offsets": [{"topic": t, "partition": p, "offset": o}
                                    for (t, p), o in offsets.items()]},
                       errors=self._errors(member_id, generation))

    def committed(self, tps: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
        tps = list(tps)
        if not tps:
            return {}
        q = ",".join(f"{t}:{p}" for t, p in tps)
        doc = self.http.call("GET", f"/groups/{self.group}/offsets?partitions={q}")
        return {(o["topic"], o["partition"]): o["offset"] for o in doc["offsets"]}

    def close(self) -> None:
        self.http.close()


class GatewaySource:
    """The Consumer's record source through a gateway: ``POST /fetch`` long-polls."""

    def __init__(self, gateway: "Session | str", *, fetch_format: str = "arrow",
                 min_bytes: int = 1, max_bytes: int = 52_428_800):
        if fetch_format != "arrow":
            raise ValueError("the Consumer fetches Arrow from the gateway (fetch_format='arrow')")
        self.http = gateway if isinstance(gateway, Session) else Session(gateway)
        self.min_bytes, self.max_bytes = min_bytes, max_bytes
        self._partitions: dict[str, tuple[float, int]] = {}

    def partitions(self, topic: str) -> int:
        hit = self._partitions.get(topic)
        if hit is not None and time.monotonic() - hit[0] < 5:
            return hit[1]
        validate_topic_name(topic)
        doc = self.http.call("GET", f"/topics/{topic}/partitions",
                             errors={"unknown_topic": lambda d: UnknownTopic(topic)})
        n = len(doc)
        self._partitions[topic] = (time.monotonic(), n)
        return n

    def watermarks(self, tp: tuple[str, int]) -> tuple[int, int]:
        doc = self.http.call("GET", f"/topics/{tp[0]}/partitions/{tp[1]}/offsets",
                             errors={"unknown_topic": lambda d: UnknownTopic(tp[0]),
                                     "unknown_partition": lambda d: UnknownPartition(
                                         tp[0], tp[1], self.partitions(tp[0]))})
        return doc["beginning_offset"], doc["end_offset"]

    def fetch(self, positions: Mapping[tuple[str, int], int], max_records: int, wait_ms: int):
        body = {"partitions": [{"topic": t, "partition": p, "offset": o}
                               for (t, p), o in positions.items()],
                "max_records": max_records, "max_bytes": self.max_bytes, "wait_ms": wait_ms,
                "min_bytes": self.min_bytes}
        data = self.http.call("POST", "/fetch", body, raw=True, timeout=wait_ms / 1000 + 30)
        out, errors = [], {}
        reader = pa.ipc.open_stream(data)
        while True:
            try:
                batch, meta = reader.read_next_batch_with_custom_metadata()
            except StopIteration:
                break
            m = {k.decode(): v.decode() for k, v in (meta or {}).items()}
            tp = (m["topic"], int(m["partition"]))
            if "error" in m:
                errors[tp] = OffsetOutOfRange(tp[0], tp[1], int(m["offset"]),
                                              int(m["log_start_offset"]), int(m["high_watermark"]))
            elif batch.num_rows:
                out.append((tp, batch, int(m["next_offset"])))
        return out, errors

    def close(self) -> None:
        self.http.close()

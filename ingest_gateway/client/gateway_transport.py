"""The consumer through gateways: group membership over HTTP, and ``POST /fetch`` long-polls.

Both find their gateway through the consumer's one
:class:`~ingest_gateway.client.cluster.ClusterRouter` (one Session per gateway):
group calls go to the group's coordinator, fetches to each partition's leader,
and both follow them when they move. Error answers come back as the
typed errors the coordinator raised (``unknown_member_id`` -> UnknownMemberId,
...). The routes are ``ingest_gateway.http.group_routes`` and ``.fetch_routes``;
``POST /fetch`` answers an Arrow stream whose batches carry ``topic``,
``partition`` and ``next_offset`` metadata (an empty batch with ``error``
reports an offset out of range).

A 401 or 403 (NotAuthenticated, NotAuthorized) is raised to the consumer's caller at
once: never retried, never taken for an unreachable gateway (NotAuthorized is a
PermissionError, hence an OSError, so each ``except OSError`` here lets it through
first).
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from conf.topic import validate_topic_name
from ingest_gateway.client.cluster import NOT_LEADER_ERRORS, ClusterRouter
from ingest_gateway.protocol.connection_security import AUTH_ERRORS
from ingest_gateway.protocol.groups import MemberState, validate_group_id
from ingest_gateway.protocol.session import RetryPolicy, Session
from ingest_gateway.errors import (GatewayError, IllegalGeneration, InconsistentGroupProtocol,
                                   NotCoordinator, RebalanceInProgress, UnknownMemberId)
from log_layout.errors import OffsetOutOfRange, UnknownPartition, UnknownTopic


class HttpMembership:
    """Group membership and commits through the group coordinator's group protocol routes.

    Each call goes to the gateway that coordinates the group (``router``); on a
    NOT_COORDINATOR answer or an unreachable gateway it asks again where the
    coordinator is and retries, until ``request_timeout_s``, then raises the last
    error (NotCoordinator, or OSError). A router that never reached any gateway
    fails at once: the address is wrong or nothing runs, and waiting hides that.
    """

    #: a coordinator decides membership: subscribe() may join through it
    coordinated = True

    def __init__(self, router: ClusterRouter, group: str, *, request_timeout_s: float = 30.0,
                 retry: RetryPolicy | None = None):
        self.router = router
        self.group = validate_group_id(group)
        self.request_timeout_s = request_timeout_s
        self.retry = retry or RetryPolicy(backoff_s=router.backoff_s)

    def _call(self, method: str, path: str, body: Any = None, *, timeout: float = 30.0,
              errors: Mapping[str, Any] | None = None, bound_s: float | None = None) -> Any:
        """``Session.call`` at the coordinator, following it for up to ``bound_s``
        (default ``request_timeout_s``; 0: only a redirect the refusal names)."""
        g = self.group
        errors = {**(errors or {}),
                  "not_coordinator": lambda d: NotCoordinator(g, d.get("coordinator"))}
        bound = self.request_timeout_s if bound_s is None else bound_s
        backoff = self.retry.start(time.monotonic() + bound)
        redirected = False
        while True:
            s = self.router.coordinator(g)
            moved = False
            try:
                if s is None:
                    raise self.router.last_error or NotCoordinator(g, None)
                return s.call(method, path, body, timeout=timeout, errors=errors)
            except NotCoordinator as e:
                moved = self.router.invalidate(group=g, hint=e.coordinator, asked=s)
                error: BaseException = e
            except AUTH_ERRORS:
                raise
            except OSError as e:
                if s is not None:
                    self.router.invalidate(failed=s)
                if not self.router.reached:
                    raise
                error = e
            if moved and not redirected:
                redirected = True  # the refusal named the coordinator: go there now
                continue
            redirected = False
            if not backoff.wait():
                raise error

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
        doc = self._call("POST", f"/groups/{self.group}/members",
                             {"topics": list(topics), "member_id": member_id,
                              "client_id": client_id, "strategies": list(strategies),
                              "session_timeout_ms": session_timeout_ms,
                              "rebalance_timeout_ms": rebalance_timeout_ms},
                             errors=self._errors(member_id))
        return MemberState.from_json(doc)

    def heartbeat(self, member_id: str, generation: int) -> MemberState:
        # bound 0: the heartbeat thread beats again soon, at the coordinator found by then
        doc = self._call("POST", f"/groups/{self.group}/members/{member_id}/heartbeat",
                         {"generation": generation}, timeout=10, bound_s=0,
                         errors=self._errors(member_id, generation))
        return MemberState.from_json(doc)

    def leave(self, member_id: str) -> None:
        # bound 0: leaving is a courtesy (the session timeout removes us anyway)
        self._call("DELETE", f"/groups/{self.group}/members/{member_id}", bound_s=0,
                   errors=self._errors(member_id))

    def commit(self, offsets: Mapping[tuple[str, int], int], member_id: str | None,
               generation: int) -> None:
        self._call("POST", f"/groups/{self.group}/offsets",
                   {"member_id": member_id, "generation": generation,
                    "offsets": [{"topic": t, "partition": p, "offset": o}
                                for (t, p), o in offsets.items()]},
                   errors=self._errors(member_id, generation))

    def committed(self, tps: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
        tps = list(tps)
        if not tps:
            return {}
        q = ",".join(f"{t}:{p}" for t, p in tps)
        doc = self._call("GET", f"/groups/{self.group}/offsets?partitions={q}")
        return {(o["topic"], o["partition"]): o["offset"] for o in doc["offsets"]}

    def close(self) -> None:
        pass  # the router (and its sessions) belongs to the consumer


class GatewaySource:
    """The Consumer's record source through gateways: ``POST /fetch`` long-polls, each
    to the gateway leading the partitions asked for."""

    def __init__(self, router: ClusterRouter, *, fetch_format: str = "arrow",
                 min_bytes: int = 1, max_bytes: int = 52_428_800,
                 isolation_level: str = "read_uncommitted"):
        if fetch_format != "arrow":
            raise ValueError("the Consumer fetches Arrow from the gateway (fetch_format='arrow')")
        self.router = router
        self.min_bytes, self.max_bytes = min_bytes, max_bytes
        self.isolation_level = isolation_level
        # the gateway's default is read_uncommitted: only read_committed is said
        self._level_q = "?isolation_level=read_committed" \
            if isolation_level == "read_committed" else ""
        self._partitions: dict[str, tuple[float, int]] = {}
        #: gateway -> (positions asked, its long-poll in flight), several gateways only
        self._inflight: dict[Session, tuple[dict[tuple[str, int], int],
                                            concurrent.futures.Future]] = {}
        self._threads: concurrent.futures.ThreadPoolExecutor | None = None

    def partitions(self, topic: str) -> int:
        """The topic's partition count (any gateway; cached 5 s); raises UnknownTopic."""
        hit = self._partitions.get(topic)
        if hit is not None and time.monotonic() - hit[0] < 5:
            return hit[1]
        validate_topic_name(topic)
        doc = self.router.any_gateway(lambda s: s.call(
            "GET", f"/topics/{topic}/partitions",
            errors={"unknown_topic": lambda d: UnknownTopic(topic)}))
        n = len(doc)
        self._partitions[topic] = (time.monotonic(), n)
        return n

    def watermarks(self, tp: tuple[str, int]) -> tuple[int, int]:
        """(log start, high watermark or, read_committed, last stable offset), from the
        partition's leader if it is reachable,
        else from any gateway (all read the store). Raises UnknownTopic, UnknownPartition."""
        def ask(s: Session) -> Any:
            return s.call("GET", f"/topics/{tp[0]}/partitions/{tp[1]}/offsets{self._level_q}",
                          errors={"unknown_topic": lambda d: UnknownTopic(tp[0]),
                                  "unknown_partition": lambda d: UnknownPartition(
                                      tp[0], tp[1], self.partitions(tp[0]))})

        leader = self.router.leader(*tp)
        doc = None
        if leader is not None:
            try:
                doc = ask(leader)
            except AUTH_ERRORS:
                raise
            except OSError:
                self.router.invalidate(failed=leader)
        if doc is None:
            doc = self.router.any_gateway(ask)
        return doc["beginning_offset"], doc["end_offset"]

    def fetch(self, positions: Mapping[tuple[str, int], int], max_records: int, wait_ms: int):
        """Fetch from each partition's leader: ([(tp, batch, next_offset)], {tp: error}).

        A gateway that cannot be reached, or refuses as no longer the leader, is
        skipped this time (the router asks where its partitions went), so one dead
        gateway does not fail the poll. With one gateway this is one long-poll of
        ``wait_ms``, as always. With several, as Kafka's consumer does, each gateway
        has one long-poll in flight at a time, all at once (on this source's threads):
        the call returns as soon as any of them answers with records (or all answered,
        or ``wait_ms`` passed), and the others stay in flight for the next call, so
        records on any gateway arrive as soon as that gateway sees them. An answer is
        kept only for partitions whose position is still the offset it was asked at
        (a seek, a rebalance or another answer may have moved it meanwhile).
        """
        by_gateway: dict[Session, dict[tuple[str, int], int]] = {}
        for tp, offset in positions.items():
            leader = self.router.leader(*tp)
            if leader is not None:  # none known yet: skipped until the metadata says
                by_gateway.setdefault(leader, {})[tp] = offset
        if not by_gateway and not self._inflight:
            time.sleep(min(wait_ms / 1000, self.router.backoff_s))  # back off, do not spin
            return [], {}
        if len(by_gateway) == 1 and not self._inflight:
            [(s, asked)] = by_gateway.items()
            return self._answer(s, asked, lambda: self._fetch_one(s, asked, max_records,
                                                                  wait_ms))
        for s, asked in by_gateway.items():
            if s not in self._inflight:
                self._inflight[s] = (asked, self._pool().submit(
                    self._fetch_one, s, asked, max_records, wait_ms))
        deadline = time.monotonic() + wait_ms / 1000
        out: list[tuple[tuple[str, int], pa.RecordBatch, int]] = []
        errors: dict[tuple[str, int], OffsetOutOfRange] = {}
        while True:
            pending = [f for _a, f in self._inflight.values()]
            concurrent.futures.wait(pending, max(0.0, deadline - time.monotonic()),
                                    return_when=concurrent.futures.FIRST_COMPLETED)
            for s, (asked, f) in list(self._inflight.items()):
                if not f.done():
                    continue
                del self._inflight[s]
                got, errs = self._answer(s, asked, f.result)
                out += [(tp, b, n) for tp, b, n in got if positions.get(tp) == asked[tp]]
                errors.update({tp: e for tp, e in errs.items()
                               if positions.get(tp) == asked[tp]})
            if out or errors or not self._inflight or time.monotonic() >= deadline:
                return out, errors

    def _answer(self, s: Session, asked: Mapping[tuple[str, int], int], call):
        """``call()``'s records and errors; a failed gateway answers nothing (the router
        is told, so the next call asks the new leader)."""
        try:
            return call()
        except AUTH_ERRORS:
            raise
        except OSError:
            self.router.invalidate(failed=s)
        except GatewayError as e:
            if e.status != 503:
                raise
            for t, p in asked:  # e.g. not the leader any more: ask again
                self.router.invalidate(topic=t, partition=p, asked=s)
        return [], {}

    def _pool(self) -> concurrent.futures.ThreadPoolExecutor:
        if self._threads is None:
            self._threads = concurrent.futures.ThreadPoolExecutor(
                max_workers=8, thread_name_prefix="sparklog-fetch")
        return self._threads

    def _fetch_one(self, s: Session, positions: Mapping[tuple[str, int], int],
                   max_records: int, wait_ms: int):
        """One ``POST /fetch`` to ``s``; raises OSError, GatewayError."""
        body = {"partitions": [{"topic": t, "partition": p, "offset": o}
                               for (t, p), o in positions.items()],
                "max_records": max_records, "max_bytes": self.max_bytes, "wait_ms": wait_ms,
                "min_bytes": self.min_bytes}
        if self._level_q:
            body["isolation_level"] = self.isolation_level
        data = s.call("POST", "/fetch", body, raw=True, timeout=wait_ms / 1000 + 30)
        out, errors = [], {}
        reader = pa.ipc.open_stream(data)
        while True:
            try:
                batch, meta = reader.read_next_batch_with_custom_metadata()
            except StopIteration:
                break
            m = {k.decode(): v.decode() for k, v in (meta or {}).items()}
            tp = (m["topic"], int(m["partition"]))
            if m.get("error") in NOT_LEADER_ERRORS:
                self.router.invalidate(topic=tp[0], partition=tp[1], asked=s)
            elif "error" in m:
                errors[tp] = OffsetOutOfRange(tp[0], tp[1], int(m["offset"]),
                                              int(m["log_start_offset"]), int(m["high_watermark"]))
            else:  # an empty batch: markers or aborted records skipped, the position moves
                out.append((tp, batch, int(m["next_offset"])))
        return out, errors

    def close(self) -> None:
        # the router (and its sessions) belongs to the consumer; long-polls in flight
        # end within their wait and their answers are dropped
        self._inflight.clear()
        if self._threads is not None:
            self._threads.shutdown(wait=False, cancel_futures=True)

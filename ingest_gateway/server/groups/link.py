"""One group's coordinator, wherever it is: this gateway's own, or another over HTTP.

A REST Proxy v2 consumer instance lives on the gateway its REST client created it
on, but its group is coordinated by one gateway of the broker application (the
leader of the group's offsets-topic partition), which may be another one and may
move. :class:`CoordinatorLink` sends each group call to the coordinator the
gateway's cluster membership names *now*: this gateway's ``GroupCoordinator``
when it is the one, else the other gateway's group routes (``http.group_routes``,
the routes a Python consumer uses, through :class:`RemoteCoordinator`). So the
instance follows the coordinator when it moves, keeping its member id and
generation (the new coordinator loads the group from its store document).

Records are not read through the coordinator: any gateway reads any partition from
the store, and committed offsets are read from the store too (the coordinator
writes each commit there before it answers).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from ingest_gateway.protocol.groups import MemberState, TopicPartition
from ingest_gateway.protocol.session import Session
from ingest_gateway.errors import (IllegalGeneration, InconsistentGroupProtocol, NotCoordinator,
                                   RebalanceInProgress, UnknownMemberId)
from ingest_gateway.server.groups.coordinator import GroupCoordinator
from ingest_gateway.server.groups.table import Cluster

T = TypeVar("T")
#: attempts of one call while the coordinator moves (each asks the cluster again)
ATTEMPTS = 3
#: the wait before the second attempt, doubled for the third: the cluster membership
#: reads the assignment every 250 ms, so a call refused by a stale view waits for that
BACKOFF_S = 0.15
#: seconds a remote coordinator has to answer (a heartbeat or commit is quick; a
#: frozen gateway must not hold the REST request, and a hub thread, for long)
REMOTE_TIMEOUT_S = 10.0


class RemoteCoordinator:
    """One group's calls to the group routes of the gateway at ``url``.

    Its refusals come back typed: UnknownMemberId, IllegalGeneration (the group's
    generation is not in the answer: ``current`` is -1), RebalanceInProgress,
    InconsistentGroupProtocol, NotCoordinator (with the coordinator it names); any
    other as GatewayError. No answer raises OSError. (The clients' HttpMembership
    finds the coordinator on its own; here the gateway's cluster membership already
    knows it, so this one only talks to the gateway it is given.)
    """

    def __init__(self, url: str, group: str):
        self.url, self.group = url, group
        self.http = Session(url, read_timeout_s=REMOTE_TIMEOUT_S)

    def _call(self, method: str, path: str, body: Any = None, *, member_id: object = None,
              generation: int = -1) -> Any:
        g = self.group
        errors = {
            "unknown_member_id": lambda d: UnknownMemberId(g, member_id),
            "illegal_generation": lambda d: IllegalGeneration(g, member_id, generation, -1),
            "rebalance_in_progress": lambda d: RebalanceInProgress(g, generation),
            "inconsistent_group_protocol": lambda d: InconsistentGroupProtocol(g, (), ()),
            "not_coordinator": lambda d: NotCoordinator(g, d.get("coordinator")),
        }
        return self.http.call(method, f"/groups/{g}{path}", body, timeout=REMOTE_TIMEOUT_S,
                              errors=errors)

    def join(self, topics: Sequence[str], member_id: str | None, *, client_id: str,
             session_timeout_ms: int | None) -> MemberState:
        return MemberState.from_json(self._call(
            "POST", "/members", {"topics": list(topics), "member_id": member_id,
                                 "client_id": client_id,
                                 "session_timeout_ms": session_timeout_ms},
            member_id=member_id))

    def heartbeat(self, member_id: str, generation: int) -> MemberState:
        return MemberState.from_json(self._call(
            "POST", f"/members/{member_id}/heartbeat", {"generation": generation},
            member_id=member_id, generation=generation))

    def commit(self, offsets: Mapping[TopicPartition, int], member_id: str,
               generation: int) -> None:
        self._call("POST", "/offsets",
                   {"member_id": member_id, "generation": generation,
                    "offsets": [{"topic": t, "partition": p, "offset": o}
                                for (t, p), o in offsets.items()]},
                   member_id=member_id, generation=generation)

    def leave(self, member_id: str) -> None:
        self._call("DELETE", f"/members/{member_id}", member_id=member_id)

    def close(self) -> None:
        self.http.close()


class CoordinatorLink:
    """Group calls of one group, sent to its current coordinator (thread-safe enough
    for one consumer instance, whose calls its lock already serializes).

    Every call raises what the coordinator raises (UnknownMemberId,
    IllegalGeneration, RebalanceInProgress, ...), and NotCoordinator when none is
    assigned or the ones asked kept refusing for ATTEMPTS, or at once when the
    coordinator does not answer (killed or frozen, and not yet replaced by a new
    assignment); clients retry that (503).
    """

    def __init__(self, coordinator: GroupCoordinator, group: str,
                 cluster: Cluster | None = None, *, attempts: int = ATTEMPTS,
                 backoff_s: float = BACKOFF_S):
        self.coordinator, self.group, self.cluster = coordinator, group, cluster
        self.attempts, self.backoff_s = attempts, backoff_s
        self._remote: tuple[str, RemoteCoordinator] | None = None

    # -- the group calls ---------------------------------------------------------------
    def join(self, topics: Sequence[str], member_id: str | None, *, client_id: str,
             session_timeout_ms: int | None) -> MemberState:
        return self._call(
            lambda c: c.join(self.group, topics, member_id=member_id, client_id=client_id,
                             session_timeout_ms=session_timeout_ms),
            lambda r: r.join(topics, member_id, client_id=client_id,
                             session_timeout_ms=session_timeout_ms))

    def heartbeat(self, member_id: str, generation: int) -> MemberState:
        return self._call(lambda c: c.heartbeat(self.group, member_id, generation),
                          lambda r: r.heartbeat(member_id, generation))

    def commit(self, offsets: Mapping[TopicPartition, int], member_id: str,
               generation: int) -> None:
        self._call(lambda c: c.commit(self.group, offsets, member_id=member_id,
                                      generation=generation),
                   lambda r: r.commit(offsets, member_id, generation))

    def leave(self, member_id: str) -> None:
        self._call(lambda c: c.leave(self.group, member_id), lambda r: r.leave(member_id))

    def committed(self, tps: Iterable[TopicPartition] | None) -> dict[TopicPartition, int]:
        """Committed offsets, read here (from the store when another gateway
        coordinates the group: it wrote them there before acknowledging)."""
        return self.coordinator.committed(self.group, tps)

    def close(self) -> None:
        """Close the connections to a remote coordinator (the link stays usable)."""
        if self._remote is not None:
            self._remote[1].close()
            self._remote = None

    # -- routing ---------------------------------------------------------------------------
    def _where(self) -> str | None:
        """The coordinator's URL, None when it is this gateway; raises NotCoordinator
        when none is known."""
        if self.cluster is None or self.cluster.is_coordinator(self.group):
            return None
        where = self.cluster.coordinator(self.group)
        if not where or not where.get("url"):
            raise NotCoordinator(self.group, where)
        return str(where["url"])

    def _membership(self, url: str) -> RemoteCoordinator:
        if self._remote is None or self._remote[0] != url:
            self.close()  # the coordinator moved: the old gateway's pool is of no use
            self._remote = (url, RemoteCoordinator(url, self.group))
        return self._remote[1]

    def _call(self, local: Callable[[GroupCoordinator], T],
              remote: Callable[[RemoteCoordinator], T]) -> T:
        refused: NotCoordinator | None = None
        for attempt in range(self.attempts):
            if attempt:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            url = None
            try:
                url = self._where()
                if url is None:
                    return local(self.coordinator)
                return remote(self._membership(url))
            except NotCoordinator as e:  # our view or the other gateway's was stale
                refused = e
            except OSError:
                if url is None:
                    raise  # the store, here: not a question of who coordinates
                # killed or frozen: asking it again at once would not help, and a frozen
                # one costs a timeout per try; the client retries the 503
                self.close()
                raise NotCoordinator(self.group, self._known()) from None
        assert refused is not None
        raise refused

    def _known(self) -> dict[str, Any] | None:
        return self.cluster.coordinator(self.group) if self.cluster is not None else None

"""The consumer's group membership (Kafka's ``ConsumerCoordinator``): joins, rebalances,
heartbeats and commits.

Runs on the polling thread (``handle_group`` before each fetch: eager or
cooperative rebalances, a lost membership) except the heartbeats, which run on
a thread of their own and share the member id, the group state and the lost flag
with it under one lock. Commits go through the membership (``HttpMembership``,
``LocalMembership`` or ``StoreOffsets``); a commit refused because our
membership is gone marks it lost, so the next poll gives up the partitions and
joins again (Kafka's CommitFailedException). A new assignment goes to the
:class:`~ingest_gateway.client.subscription.SubscriptionState`; the partitions it
adds start at their committed offsets through the
:class:`~ingest_gateway.client.fetcher.Fetcher`, whose consumed offsets are what
auto-commit stores.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

from conf.errors import SparklogError
from ingest_gateway.client.fetcher import Fetcher
from ingest_gateway.client.records import as_tp
from ingest_gateway.client.subscription import SubscriptionState
from ingest_gateway.errors import IllegalGeneration, IllegalState, UnknownMemberId
from ingest_gateway.protocol.groups import COOPERATIVE, MemberState, TopicPartition

Listener = Callable[[list[TopicPartition]], Any]


class GroupMetadata(NamedTuple):
    """A consumer's place in its group (Kafka's ``ConsumerGroupMetadata``): the generation
    it was last assigned in (-1 before), and its member id (None before it joined)."""

    group_id: str | None
    generation: int
    member_id: str | None


class GroupOptions(NamedTuple):
    """The Consumer's group options (Kafka's names, in ms)."""

    client_id: str
    strategies: tuple[str, ...]
    session_timeout_ms: int
    heartbeat_interval_ms: int
    max_poll_interval_ms: int
    enable_auto_commit: bool
    auto_commit_interval_ms: int


class ConsumerCoordinator:
    """One consumer's membership of its group (see the module docstring).

    ``membership_for(group)`` makes the membership of a group when one is first
    needed; ``stop`` is set when the consumer closes (it ends the heartbeats).
    """

    def __init__(self, group_id: str | None, options: GroupOptions, *,
                 membership_for: Callable[[str], Any], subscriptions: SubscriptionState,
                 fetcher: Fetcher, stop: threading.Event):
        self.group_id = group_id
        self._options = options
        self._membership_for = membership_for
        self._subscriptions, self._fetcher, self._stop = subscriptions, fetcher, stop
        self._membership: Any = None
        self._on_assign: Listener | None = None
        self._on_revoke: Listener | None = None
        self._on_lost: Listener | None = None
        # shared with the heartbeat thread under _lock
        self._lock = threading.Lock()
        self._member_id: str | None = None
        self._generation = -1
        self._state: MemberState | None = None
        self._lost = False
        self._hb_thread: threading.Thread | None = None
        self._last_commit = time.monotonic()
        self._committer: concurrent.futures.ThreadPoolExecutor | None = None

    @property
    def has_group(self) -> bool:
        """A membership exists: commits and committed offsets have somewhere to go."""
        return self._membership is not None

    def group_metadata(self) -> GroupMetadata:
        with self._lock:
            return GroupMetadata(self.group_id, self._generation, self._member_id)

    # -- joining -------------------------------------------------------------------------
    def use_group(self, group: str, *, on_assign: Listener | None, on_revoke: Listener | None,
                  on_lost: Listener | None) -> None:
        """``subscribe``'s group (the one joined, if any): its membership (made now if none
        yet) and listeners. Raises IllegalState without a coordinator."""
        if self._membership is None:
            membership = self._membership_for(group)
            if not membership.coordinated:
                raise IllegalState("subscribe() needs a coordinator: give the Consumer a "
                                   "gateway= URL (or coordinator=); a direct consumer without "
                                   "one can only assign()")
            self._membership = membership
        self.group_id = group
        self._on_assign, self._on_revoke, self._on_lost = on_assign, on_revoke, on_lost

    def use_offsets(self) -> None:
        """``assign`` with a ``group_id``: commits and committed offsets of that group."""
        if self.group_id is not None and self._membership is None:
            self._membership = self._membership_for(self.group_id)

    def join_group(self) -> None:
        """Join with the subscription and start the heartbeats."""
        self._adopt(self._join())
        if self._hb_thread is None:
            self._hb_thread = threading.Thread(target=self._heartbeat_loop, daemon=True,
                                               name=f"sparklog-heartbeat-{self._options.client_id}")
            self._hb_thread.start()

    def _join(self) -> MemberState:
        o = self._options
        return self._membership.join(self._subscriptions.topics, self._member_id,
                                     client_id=o.client_id, strategies=o.strategies,
                                     session_timeout_ms=o.session_timeout_ms,
                                     rebalance_timeout_ms=o.max_poll_interval_ms)

    def _adopt(self, st: MemberState) -> None:
        with self._lock:
            self._member_id = st.member_id
            self._state = st
            self._lost = False

    def rejoining(self) -> bool:
        """Waiting for an assignment (the poll then checks the group again soon)."""
        st = self._state
        return st is None or not st.assigned or st.rebalance

    # -- group handling (on the polling thread) -----------------------------------------
    def handle_group(self) -> None:
        """Before a fetch: act on a lost membership, a rebalance or a new assignment."""
        with self._lock:
            st, lost = self._state, self._lost
        if lost:
            self._rejoin_lost()
            return
        if st is None:
            return
        cooperative = st.strategy == COOPERATIVE
        if st.rebalance and not cooperative:
            # Eager: give up everything (commit first), then rejoin.
            owned = list(self._subscriptions.assigned)
            if owned and self._options.enable_auto_commit:
                self._commit_quietly()
            if owned and self._on_revoke is not None:
                self._on_revoke(owned)
            self._subscriptions.set_assignment([])
            self._rejoin()
            return
        if st.assigned and st.generation != self._generation:
            self._take_assignment(st)
        if st.rebalance and cooperative:
            self._rejoin()  # keeping the partitions: they stay ours until told otherwise

    def _rejoin_lost(self) -> None:
        # Our session expired (or the coordinator restarted): the partitions are
        # someone else's now, so do not commit; join as a new member.
        owned = list(self._subscriptions.assigned)
        self._subscriptions.set_assignment([])
        self._generation = -1
        if owned:
            (self._on_lost or self._on_revoke or (lambda _: None))(owned)
        try:  # IllegalGeneration keeps the member id; a removed member joins anew
            st = self._join()
        except UnknownMemberId:
            with self._lock:
                self._member_id = None
            st = self._join()
        self._adopt(st)

    def _take_assignment(self, st: MemberState) -> None:
        assigned = self._subscriptions.assigned
        new = list(st.assignment)
        gone = [tp for tp in assigned if tp not in new]
        added = [tp for tp in new if tp not in assigned]
        self._generation = st.generation
        if gone:  # cooperative: only what moved; commit it under the new generation
            if self._options.enable_auto_commit:
                self._commit_quietly({tp: off for tp, off in self._commit_offsets().items()
                                      if tp in gone})
            if self._on_revoke is not None:
                self._on_revoke(gone)
        self._subscriptions.set_assignment(new)
        self._fetcher.init_positions(added, self.committed, self.group_id)
        if self._on_assign is not None and (added or not gone):
            self._on_assign(added)

    def _rejoin(self) -> None:
        try:
            self._adopt(self._join())
        except UnknownMemberId:
            with self._lock:
                self._lost = True

    def _heartbeat_loop(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                member, st = self._member_id, self._state
            interval = self._options.heartbeat_interval_ms / 1000
            if st is not None and (st.rebalance or not st.assigned):
                interval = min(interval, 0.02)  # waiting for others: learn the outcome soon
            if member is not None and st is not None:
                try:
                    new = self._membership.heartbeat(member, st.generation)
                    with self._lock:
                        if self._member_id == member:
                            self._state = new
                except (UnknownMemberId, IllegalGeneration):
                    with self._lock:
                        if self._member_id == member:
                            self._lost = True
                except Exception:  # noqa: BLE001 - a failed heartbeat is retried at the next beat
                    pass
            self._stop.wait(interval)

    # -- commits ---------------------------------------------------------------------------
    def committed(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The group's committed offsets of ``tps`` ({} without a group)."""
        if self._membership is None:
            return {}
        return self._membership.committed(list(tps))

    def _commit_offsets(self) -> dict[TopicPartition, int]:
        return self._fetcher.consumed_offsets(self._subscriptions.assigned)

    def commit(self, offsets: Mapping[Any, int] | None = None, *, asynchronous: bool = False,
               ) -> concurrent.futures.Future | None:
        """See Consumer.commit."""
        if self._membership is None:
            raise IllegalState("commit() needs a group: set group_id= (or subscribe with group=)")
        todo = ({as_tp(tp): off for tp, off in offsets.items()} if offsets is not None
                else self._commit_offsets())
        member, generation = (self._member_id, self._generation) \
            if self._subscriptions.topics else (None, -1)
        if not asynchronous:
            self._send_commit(todo, member, generation)
            return None
        if self._committer is None:
            self._committer = concurrent.futures.ThreadPoolExecutor(
                1, thread_name_prefix="sparklog-commit")
        return self._committer.submit(self._send_commit, todo, member, generation)

    def _send_commit(self, offsets: Mapping[TopicPartition, int], member: str | None,
                     generation: int) -> None:
        if offsets:
            try:
                try:
                    self._membership.commit(dict(offsets), member, generation)
                except IllegalGeneration:
                    newer = self._newer_generation(member, generation)
                    if newer is None:
                        raise
                    self._membership.commit(dict(offsets), member, newer)
            except (UnknownMemberId, IllegalGeneration):
                # Our membership is gone (Kafka's CommitFailedException): the next
                # poll gives up the partitions (on_lost) and joins again.
                if member is not None:
                    with self._lock:
                        if self._member_id == member:
                            self._lost = True
                raise
        self._last_commit = time.monotonic()

    def _newer_generation(self, member: str | None, generation: int) -> int | None:
        """After a commit refused with IllegalGeneration: the group's generation if we
        are still a member and it moved on, else None (we are a zombie).

        A cooperative member keeps its partitions while it rejoins, so the coordinator
        can complete the next generation before this thread adopts it (at the next
        poll; the heartbeat thread may not even have heard of it). Committing under
        that generation is then right: the coordinator still checks that we own, or
        are revoking, each partition committed. An eager member owns nothing by then.
        Raises UnknownMemberId if the coordinator no longer knows us.
        """
        if member is None:
            return None
        st = self._membership.heartbeat(member, generation)
        return st.generation if st.generation != generation else None

    def _commit_quietly(self, offsets: Mapping[TopicPartition, int] | None = None) -> None:
        try:
            if offsets is None or offsets:
                self.commit(offsets)
        except (SparklogError, OSError):
            pass  # a refused auto-commit only means more records are read again

    def maybe_auto_commit(self) -> None:
        """Commit the consumed offsets if auto-commit is on and its interval has passed."""
        o = self._options
        if (o.enable_auto_commit and self._membership is not None and self._subscriptions.assigned
                and (time.monotonic() - self._last_commit) * 1000 >= o.auto_commit_interval_ms):
            self._commit_quietly()

    # -- closing ---------------------------------------------------------------------------
    def commit_on_close(self, commit: bool | None) -> None:
        """Before closing: commit the consumed offsets (``commit``, default auto-commit)
        unless the membership was lost."""
        if (self._options.enable_auto_commit if commit is None else commit) \
                and self._membership is not None and self._subscriptions.assigned \
                and not self._lost:
            self._commit_quietly()

    def close(self) -> None:
        """After ``stop`` is set: end the heartbeats and commits, leave the group."""
        self.abandon()
        if self._committer is not None:
            self._committer.shutdown(wait=True)
        if self._subscriptions.topics and self._member_id is not None:
            owned = list(self._subscriptions.assigned)
            if owned and self._on_revoke is not None:
                self._on_revoke(owned)
            try:
                self._membership.leave(self._member_id)
            except (SparklogError, OSError):
                pass  # already gone: the group rebalances without us either way
        if self._membership is not None:
            self._membership.close()

    def abandon(self) -> None:
        """After ``stop`` is set: wait for the heartbeat thread to end (no leave, no commit)."""
        if self._hb_thread is not None:
            self._hb_thread.join()

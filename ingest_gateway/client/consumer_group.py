"""The consumer's group membership: rebalances, heartbeats and commits.

Runs on the polling thread (``_handle_group`` before each fetch: eager or
cooperative rebalances, a lost membership) except the heartbeats, which run on
a thread of their own and share ``_member_id``, ``_state`` and ``_lost`` with it
under ``_lock``. Commits go through the membership (``HttpMembership``,
``LocalMembership`` or ``StoreOffsets``); a commit refused because our
membership is gone marks it lost, so the next poll gives up the partitions and
joins again (Kafka's CommitFailedException).
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Mapping
from typing import Any, NamedTuple

from conf.errors import SparklogError
from ingest_gateway.protocol.groups import COOPERATIVE, MemberState, TopicPartition
from ingest_gateway.client.records import as_tp
from ingest_gateway.errors import IllegalGeneration, IllegalState, UnknownMemberId


class GroupMetadata(NamedTuple):
    """A consumer's place in its group (Kafka's ``ConsumerGroupMetadata``): the generation
    it was last assigned in (-1 before), and its member id (None before it joined)."""

    group_id: str | None
    generation: int
    member_id: str | None


class GroupMember:
    """Group handling and commits of :class:`~ingest_gateway.client.consumer.Consumer`
    (a base class: it works on the Consumer's state)."""

    _membership: Any
    _lock: threading.Lock

    def group_metadata(self) -> GroupMetadata:
        """The group, generation and member id this consumer commits under now."""
        with self._lock:
            return GroupMetadata(self.group_id, self._generation, self._member_id)

    # -- group handling (on the polling thread) -----------------------------------------
    def _join(self) -> MemberState:
        return self._membership.join(self._subscription, self._member_id, client_id=self.client_id,
                                     strategies=self.strategies,
                                     session_timeout_ms=self.session_timeout_ms,
                                     rebalance_timeout_ms=self.max_poll_interval_ms)

    def _adopt(self, st: MemberState) -> None:
        with self._lock:
            self._member_id = st.member_id
            self._state = st
            self._lost = False

    def _handle_group(self) -> None:
        with self._lock:
            st, lost = self._state, self._lost
        if lost:
            # Our session expired (or the coordinator restarted): the partitions are
            # someone else's now, so do not commit; join as a new member.
            owned = list(self._assignment)
            self._set_assignment([])
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
            return
        if st is None:
            return
        cooperative = st.strategy == COOPERATIVE
        if st.rebalance and not cooperative:
            # Eager: give up everything (commit first), then rejoin.
            owned = list(self._assignment)
            if owned and self.enable_auto_commit:
                self._commit_quietly()
            if owned and self._on_revoke is not None:
                self._on_revoke(owned)
            self._set_assignment([])
            self._rejoin()
            return
        if st.assigned and st.generation != self._generation:
            new = list(st.assignment)
            gone = [tp for tp in self._assignment if tp not in new]
            added = [tp for tp in new if tp not in self._assignment]
            self._generation = st.generation
            if gone:  # cooperative: only what moved; commit it under the new generation
                if self.enable_auto_commit:
                    self._commit_quietly({tp: off for tp, off in self._commit_offsets().items()
                                          if tp in gone})
                if self._on_revoke is not None:
                    self._on_revoke(gone)
            self._set_assignment(new)
            self._init_positions(added)
            if self._on_assign is not None and (added or not gone):
                self._on_assign(added)
        if st.rebalance and cooperative:
            self._rejoin()  # keeping the partitions: they stay ours until told otherwise

    def _rejoin(self) -> None:
        try:
            self._adopt(self._join())
        except UnknownMemberId:
            with self._lock:
                self._lost = True

    def _start_heartbeats(self) -> None:
        if self._hb_thread is not None:
            return
        self._hb_thread = threading.Thread(target=self._heartbeat_loop, daemon=True,
                                           name=f"sparklog-heartbeat-{self.client_id}")
        self._hb_thread.start()

    def _heartbeat_loop(self) -> None:
        while not self._hb_stop.is_set():
            with self._lock:
                member, st = self._member_id, self._state
            interval = self.heartbeat_interval_ms / 1000
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
            self._hb_stop.wait(interval)

    # -- commits ---------------------------------------------------------------------------
    def _commit_offsets(self) -> dict[TopicPartition, int]:
        return {tp: off for tp, off in self._consumed.items() if tp in self._assignment}

    def commit(self, offsets: Mapping[Any, int] | None = None, *, asynchronous: bool = False,
               ) -> concurrent.futures.Future | None:
        """Commit consumed positions (or ``offsets``: next offsets to read).

        Sync by default (raises the coordinator's typed error, e.g.
        IllegalGeneration for a zombie); ``asynchronous=True`` returns a Future
        resolved on a background thread (commits are sent in order).
        """
        self._check_open()
        if self._membership is None:
            raise IllegalState("commit() needs a group: set group_id= (or subscribe with group=)")
        todo = ({as_tp(tp): off for tp, off in offsets.items()} if offsets is not None
                else self._commit_offsets())
        member, generation = (self._member_id, self._generation) if self._subscription \
            else (None, -1)
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

    def _maybe_auto_commit(self) -> None:
        if (self.enable_auto_commit and self._membership is not None and self._assignment
                and (time.monotonic() - self._last_commit) * 1000 >= self.auto_commit_interval_ms):
            self._commit_quietly()

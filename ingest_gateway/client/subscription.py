"""What a consumer reads (Kafka's ``SubscriptionState``): its subscribed topics or its
manual assignment, the partitions assigned now, and the paused ones.

A consumer either subscribes (its group assigns the partitions) or assigns them
itself (``manual``), never both. When the assignment changes, the partitions it
no longer holds are handed to ``on_change(removed, kept)`` (the fetcher drops their
buffered records and forgets their positions) before the new one takes effect.
"""

from __future__ import annotations

from collections.abc import Callable

from ingest_gateway.client.records import as_tp
from ingest_gateway.errors import IllegalState
from ingest_gateway.protocol.groups import TopicPartition

Change = Callable[[set[TopicPartition], set[TopicPartition]], None]


class SubscriptionState:
    """Subscription, assignment and pauses of one consumer (its polling thread)."""

    def __init__(self, on_change: Change):
        self._on_change = on_change
        #: the subscribed topics (empty: not subscribed)
        self.topics: tuple[str, ...] = ()
        #: assign() was called: the partitions are the user's, not a group's
        self.manual = False
        self._assignment: list[TopicPartition] = []
        self._paused: set[TopicPartition] = set()

    def subscribe(self, topics: tuple[str, ...]) -> None:
        self.topics = topics

    def assign(self, tps: list[TopicPartition]) -> None:
        """The user's own assignment (``Consumer.assign``)."""
        self.manual = True
        self.set_assignment(tps)

    @property
    def assigned(self) -> list[TopicPartition]:
        """The partitions assigned now (the list itself: do not change it)."""
        return self._assignment

    def set_assignment(self, tps: list[TopicPartition]) -> None:
        keep = set(tps)
        self._on_change({tp for tp in self._assignment if tp not in keep}, keep)
        self._assignment = list(tps)
        self._paused &= keep

    def check_assigned(self, tp: object) -> TopicPartition:
        """``tp`` as a (topic, partition) pair; raises IllegalState if not assigned."""
        tp = as_tp(tp)
        if tp not in self._assignment:
            raise IllegalState(f"{tp[0]}-{tp[1]} is not assigned to this consumer "
                               f"(assigned: {self._assignment})")
        return tp

    def fetchable(self) -> list[TopicPartition]:
        """The assigned partitions not paused, in assignment order."""
        return [tp for tp in self._assignment if tp not in self._paused]

    def pause(self, tp: TopicPartition) -> None:
        self._paused.add(tp)

    def resume(self, tp: TopicPartition) -> None:
        self._paused.discard(tp)

    def paused(self) -> list[TopicPartition]:
        return sorted(self._paused)

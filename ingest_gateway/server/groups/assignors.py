"""Partition assignment strategies of the group coordinator, pure functions.

``range``, ``roundrobin`` and ``sticky`` follow Kafka's assignors; ``cooperative-sticky``
is sticky plus KIP-429's withholding of moving partitions (:func:`plan`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ingest_gateway.protocol.groups import COOPERATIVE, TopicPartition


def assign_range(members: Mapping[str, frozenset[str]],
                 partitions: Mapping[str, int]) -> dict[str, list[TopicPartition]]:
    """Kafka's RangeAssignor: per topic, members sorted, contiguous ranges,
    the first ``n % m`` members one extra."""
    out: dict[str, list[TopicPartition]] = {m: [] for m in members}
    for topic in sorted(partitions):
        subs = sorted(m for m, topics in members.items() if topic in topics)
        if not subs:
            continue
        n = partitions[topic]
        each, extra = divmod(n, len(subs))
        start = 0
        for i, m in enumerate(subs):
            count = each + (1 if i < extra else 0)
            out[m].extend((topic, p) for p in range(start, start + count))
            start += count
    return out


def assign_roundrobin(members: Mapping[str, frozenset[str]],
                      partitions: Mapping[str, int]) -> dict[str, list[TopicPartition]]:
    """Kafka's RoundRobinAssignor: all partitions in order, dealt to the
    subscribed members in turn."""
    out: dict[str, list[TopicPartition]] = {m: [] for m in members}
    order = sorted(members)
    if not order:
        return out
    i = 0
    for topic in sorted(partitions):
        for p in range(partitions[topic]):
            for _ in range(len(order)):
                m = order[i % len(order)]
                i += 1
                if topic in members[m]:
                    out[m].append((topic, p))
                    break
    return out


def assign_sticky(members: Mapping[str, frozenset[str]], partitions: Mapping[str, int],
                  previous: Mapping[TopicPartition, str]) -> dict[str, list[TopicPartition]]:
    """Balanced like round-robin, but a partition stays with its previous owner
    unless that owner has more than its share (Kafka's StickyAssignor, simplified)."""
    out: dict[str, list[TopicPartition]] = {m: [] for m in members}
    if not members:
        return out
    all_tps = [(t, p) for t in sorted(partitions) for p in range(partitions[t])]
    eligible = {tp: sorted(m for m in members if tp[0] in members[m]) for tp in all_tps}
    todo = []
    for tp in all_tps:
        owner = previous.get(tp)
        if owner in members and tp[0] in members[owner]:
            out[owner].append(tp)
        elif eligible[tp]:
            todo.append(tp)
    # Everyone's fair share: total / members (the first `extra` may hold one more).
    total = sum(1 for tp in all_tps if eligible[tp])
    each, extra = divmod(total, len(members))
    # Take away from members above their share (most loaded first), newest partitions first.
    allowed = {m: each for m in members}
    for m in sorted(members, key=lambda m: (-len(out[m]), m))[:extra]:
        allowed[m] += 1
    for m in members:
        while len(out[m]) > allowed[m]:
            todo.append(out[m].pop())
    for tp in sorted(todo):
        cands = [m for m in eligible[tp]]
        m = min(cands, key=lambda m: (len(out[m]) >= allowed[m], len(out[m]), m))
        out[m].append(tp)
    for m in out:
        out[m].sort()
    return out




def common_strategy(strategy_lists: Sequence[Sequence[str]]) -> str | None:
    """The first strategy of the oldest member's list (the first given) that every
    member supports; None if there is none (or no member)."""
    lists = [lst for lst in strategy_lists if lst]
    if not lists:
        return None
    for s in lists[0]:
        if all(s in lst for lst in lists):
            return s
    return None


def plan(strategy: str, members: Mapping[str, frozenset[str]], partitions: Mapping[str, int],
         previous: Mapping[TopicPartition, str],
         ) -> tuple[dict[str, list[TopicPartition]], dict[TopicPartition, str]]:
    """(member -> partitions, partitions withheld -> their old owner) for a new generation.

    ``members`` in join order (member id -> subscribed topics), ``previous`` the
    owners of the last generation still in the group.
    """
    if strategy == "roundrobin":
        out = assign_roundrobin(members, partitions)
    elif strategy in ("sticky", COOPERATIVE):
        out = assign_sticky(members, partitions, previous)
    else:
        out = assign_range(members, partitions)
    revoking: dict[TopicPartition, str] = {}
    if strategy == COOPERATIVE:
        # Incremental (KIP-429): members kept their partitions while rejoining. A
        # partition moving from A to B is withheld from B in this generation; A
        # learns that it lost it, commits and revokes just that one, and the
        # follow-up rebalance started by the coordinator hands it to B.
        for member in members:
            mine = out[member]
            out[member] = [tp for tp in mine if previous.get(tp) in (None, member)]
            revoking.update({tp: previous[tp] for tp in mine
                             if previous.get(tp) not in (None, member)})
    return out, revoking

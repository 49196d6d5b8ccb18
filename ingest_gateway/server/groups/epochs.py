"""KIP-848's member epochs and reconciliation, pure functions over a group's state.

A consumer-protocol member (``state.CONSUMER``) never rejoins: the coordinator's plan
of each new generation (the *group epoch*, which is also the target assignment's
epoch here: the plan is computed at once) gives every member a **target**, and each
heartbeat moves the member's current ``assignment`` towards it, as Kafka's
``CurrentAssignmentBuilder`` does:

* partitions it holds that the target does not are **revoked first**: the member
  keeps its epoch and is told its assignment without them (``pending_revocation``);
  it stays there until a heartbeat's owned partitions no longer name them (or its
  rebalance timeout passes: it is removed);
* then it moves to the group's epoch and gets the target's partitions that nobody
  else holds; those another member still holds (``Group.holders``) are *unreleased*
  and come with a later heartbeat, once released.

So a partition is never owned by two members at once, and only what moves is revoked.

**Classic members in the same group** (Kafka 4 allows it): when a group has a
consumer-protocol member, its plan comes from the server assignor (``uniform`` or
``range``, :func:`assign`), classic members included; a classic member's partitions
moving elsewhere are withheld from their new owner (``Group.revoking``) until it has
rejoined (a follow-up rebalance, as the cooperative protocol does), and a partition
a consumer-protocol member still holds is withheld from a classic member until the
consumer member has released it (then the classic members rebalance once more).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from ingest_gateway.protocol.groups import COOPERATIVE, TopicPartition
from ingest_gateway.server.groups import assignors
from ingest_gateway.server.groups.state import CLASSIC, CONSUMER, Group, Member

#: the server assignors offered (Kafka's names); ``group.consumer.assignors`` picks
ASSIGNORS = ("uniform", "range")


def ready(g: Group, m: Member) -> bool:
    """Has ``m`` rejoined for the generation the group prepares? A consumer-protocol
    member is always ready: it never rejoins, its target just changes."""
    return m.protocol == CONSUMER or m.joined_generation == g.generation + 1


def mixed(g: Group) -> bool:
    """Does the group plan with a server assignor (it has a consumer-protocol member)?"""
    return any(m.protocol == CONSUMER for m in g.members.values())


def cooperative(g: Group, m: Member, group_strategy: str | None) -> bool:
    """Does classic member ``m`` keep its partitions while rejoining (KIP-429)? In a
    group with consumer-protocol members each classic member is told its own first
    strategy, so its own decides; else the group's."""
    return (m.strategies[0] if mixed(g) and m.strategies else group_strategy) == COOPERATIVE


def preferred_assignor(members: Iterable[Member], offered: Sequence[str]) -> str:
    """The server assignor most consumer-protocol members asked for (ties: the first
    offered); none asked: the first of ``group.consumer.assignors`` (Kafka's rule)."""
    votes = Counter(m.assignor for m in members if m.protocol == CONSUMER and m.assignor)
    if not votes:
        return offered[0]
    return max(votes, key=lambda a: (votes[a], -offered.index(a) if a in offered else -99))


def assign(assignor: str, subs: Mapping[str, frozenset[str]], counts: Mapping[str, int],
           previous: Mapping[TopicPartition, str]) -> dict[str, list[TopicPartition]]:
    """The plan of a server assignor: ``uniform`` balances and keeps partitions where
    they are (Kafka's UniformAssignor), ``range`` gives contiguous ranges per topic."""
    if assignor == "range":
        return assignors.assign_range(subs, counts)
    return assignors.assign_sticky(subs, counts, previous)


def plan_generation(g: Group, members: Sequence[Member], strategy: str,
                    counts: Mapping[str, int], previous: Mapping[TopicPartition, str],
                    now: int) -> bool:
    """Plan the generation ``g.generation + 1`` with ``strategy`` and give it to the
    members (``members`` in join order); returns whether the classic members must
    rebalance again (partitions withheld from them). A group without consumer-protocol
    members plans as the classic coordinator always did (``assignors.plan``)."""
    subs = {m.member_id: m.topics for m in members}
    g.generation, g.strategy, g.preparing = g.generation + 1, strategy, False
    if mixed(g):  # KIP-848: the server assignor plans, members reconcile towards it
        again = apply_plan(g, assign(strategy, subs, counts, previous), now, strategy)
        g.last_owners = {tp: m.member_id for m in members for tp in m.target}
        return again
    plan, g.revoking = assignors.plan(strategy, subs, counts, previous)
    for m in members:
        m.assignment = tuple(plan[m.member_id])
    g.last_owners = g.owners()
    return bool(g.revoking)


def apply_plan(g: Group, plan: Mapping[str, Sequence[TopicPartition]], now: int,
               group_strategy: str | None) -> bool:
    """Give a new generation's plan to every member of a group with consumer-protocol
    members (module docstring); returns whether classic members must rebalance again
    to pick up partitions withheld from them. ``g.generation`` is the new one."""
    holders: dict[TopicPartition, str] = {}
    for m in g.members.values():
        if m.protocol == CONSUMER:
            holders.update((tp, m.member_id) for tp in (*m.assignment, *m.pending_revocation))
        elif cooperative(g, m, group_strategy):  # eager members rejoined holding nothing
            holders.update((tp, m.member_id) for tp in m.assignment)
    revoking: dict[TopicPartition, str] = {}
    for m in g.members.values():
        if m.protocol == CONSUMER:
            continue
        mine = list(plan.get(m.member_id, ()))
        revoking.update((tp, m.member_id) for tp in m.assignment if tp not in mine)
        revoking.update((tp, holders[tp]) for tp in mine
                        if holders.get(tp, m.member_id) != m.member_id)
        m.assignment = tuple(tp for tp in mine if holders.get(tp, m.member_id) == m.member_id)
        m.target = tuple(mine)
    g.revoking = revoking
    for m in g.members.values():
        if m.protocol == CONSUMER:  # each reconciles in its own heartbeat (Kafka's way:
            m.target = tuple(plan.get(m.member_id, ()))  # its answer says what changed)
    return any(g.members[o].protocol == CLASSIC for o in revoking.values() if o in g.members)


def reconcile(g: Group, m: Member, owned: frozenset[TopicPartition] | None, now: int) -> bool:
    """Move consumer-protocol member ``m`` towards its target (module docstring);
    ``owned`` is what its heartbeat says it owns (None: not said). Returns whether
    the member's epoch, assignment or revocations changed."""
    before = (m.member_epoch, m.assignment, m.pending_revocation)
    if m.pending_revocation:
        if owned is None or owned & set(m.pending_revocation):
            return False  # still revoking: nothing moves until it has
        m.pending_revocation = ()
    others = {tp: o for tp, o in g.holders().items() if o != m.member_id}
    target, current = set(m.target), set(m.assignment)
    keep = current & target
    revoke = current - keep
    if revoke and (owned is None or owned & revoke):
        m.assignment, m.pending_revocation = tuple(sorted(keep)), tuple(sorted(revoke))
        m.revoke_deadline_ms = now + m.rebalance_timeout_ms
    else:
        free = {tp for tp in target - keep if tp not in others}
        m.assignment, m.pending_revocation = tuple(sorted(keep | free)), ()
        if m.member_epoch != g.generation:
            m.previous_epoch, m.member_epoch = m.member_epoch, g.generation
    return before != (m.member_epoch, m.assignment, m.pending_revocation)


def released(g: Group, m: Member) -> bool:
    """Forget the withholdings (``g.revoking``) of partitions ``m`` no longer holds;
    returns whether there were any (the classic members waiting on them rebalance)."""
    held = set(m.assignment) | set(m.pending_revocation)
    gone = [tp for tp, o in g.revoking.items() if o == m.member_id and tp not in held]
    for tp in gone:
        del g.revoking[tp]
    return bool(gone)


def overdue(g: Group, now: int) -> list[str]:
    """Consumer-protocol members that did not revoke within their rebalance timeout
    (Kafka fences them: they lose their partitions and rejoin)."""
    return [mid for mid, m in g.members.items() if m.protocol == CONSUMER
            and m.pending_revocation and now >= m.revoke_deadline_ms]

"""Static membership (Kafka's KIP-345, ``group.instance.id``) for the group coordinator.

A member that joins with an instance id is *static*. When a member joins with no
member id but an instance id a member of the group already has, the new member takes
the old one's place: it gets a fresh member id but the old member's subscription,
generation and partitions, and the group does **not** rebalance (a consumer restarted
within its session timeout carries on where it stopped). The old member id is then
*fenced*: a call that names it together with the instance id is refused with
:class:`FencedInstanceId` (so of two live processes with one instance id, the older
stops). A static member that stays away past its session timeout expires like any
other and the group rebalances.

HTTP members never have instance ids: nothing here changes their behaviour.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from ingest_gateway.errors import FencedInstanceId, UnknownMemberId
from ingest_gateway.server.groups.state import Group, Member
from ingest_gateway.server.groups.table import GroupTable


def find(g: Group, instance_id: str | None) -> Member | None:
    """The member of ``g`` with this instance id (None: none, or no instance id)."""
    if not instance_id:
        return None
    return next((m for m in g.members.values() if m.instance_id == instance_id), None)


def replace(g: Group, old: Member, member_id: str, client_id: str, now: int,
            table: GroupTable) -> Member:
    """Put a new member id in ``old``'s place (same position in join order, same
    assignment and generation) and write the group's document (so a coordinator taking
    the group over knows the new id); returns the new member, its session starting at
    ``now``. Raises what ``GroupTable.write`` raises."""
    new = dataclasses.replace(old, member_id=member_id, client_id=client_id,
                              last_heartbeat_ms=now)
    # rebuild in order: the oldest member's strategy is the group's
    g.members = {(member_id if mid == old.member_id else mid): (new if mid == old.member_id
                                                                 else m)
                 for mid, m in g.members.items()}
    g.last_owners = {tp: (member_id if o == old.member_id else o)
                     for tp, o in g.last_owners.items()}
    g.revoking = {tp: (member_id if o == old.member_id else o) for tp, o in g.revoking.items()}
    table.write(g, *g.snapshot_doc())
    return new


def check(g: Group | None, member_id: str, instance_id: str | None) -> None:
    """Raises FencedInstanceId if ``instance_id`` now belongs to another member than
    ``member_id`` (a newer one took its place), or UnknownMemberId if ``member_id``
    is a member with another instance id. Nothing to check without an instance id."""
    if not instance_id or g is None:
        return
    current = find(g, instance_id)
    if current is not None and current.member_id != member_id:
        raise FencedInstanceId(g.name, member_id, instance_id)
    m = g.members.get(member_id)
    if m is not None and m.instance_id != instance_id:
        raise UnknownMemberId(g.name, member_id)


def member_of(g: Group | None, member_id: str, instance_id: str | None) -> str:
    """The member id a LeaveGroup means: ``member_id``, or the member with
    ``instance_id`` when no member id is given (KIP-345 leaves by instance id).
    Raises FencedInstanceId (see :func:`check`)."""
    if member_id:
        check(g, member_id, instance_id)
        return member_id
    m = find(g, instance_id) if g is not None else None
    return m.member_id if m is not None else member_id


def leave(table: GroupTable, leave_: Callable[[str, str], None], group: str, member_id: str,
          instance_id: str | None) -> None:
    """LeaveGroup of a member named by its id, or by its instance id alone: calls
    ``leave_`` (the coordinator's ``leave``) with the member id, under the table's lock
    (reentrant: the coordinator takes it again). Raises FencedInstanceId, or what
    ``leave_`` raises."""
    with table.lock:
        leave_(group, member_of(table.groups.get(group), member_id, instance_id))

"""Rebalance time of a 10-member group: KIP-848 (``group.protocol=consumer``) vs the
classic protocol, on sparklog's Kafka listener and on Apache Kafka in the same run
(``bench/kafka_protocol.py``'s ``rebalance_*`` figures, issue 31).

Ten confluent-kafka consumers, each polling on its own thread, subscribe to one topic of
20 partitions in a fresh group. Two times are taken:

* ``join``: from the first subscribe until every member owns partitions and together
  they own every partition exactly once;
* ``leave``: from one member's close (a clean leave) until the nine others own every
  partition exactly once.

Both brokers keep their defaults for what decides these times: KIP-848's
``group.consumer.heartbeat.interval.ms`` 5 s (a member learns of partitions another one
released at its next heartbeat), librdkafka's classic ``heartbeat.interval.ms`` 3 s and
eager ``range,roundrobin``; Kafka's ``group.initial.rebalance.delay.ms`` is 0 in the
bench's broker. Each figure: ours = sparklog, baseline = Kafka, ratio = Kafka / sparklog
(a time: higher is better), no target.
"""

from __future__ import annotations

import statistics
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

MEMBERS, PARTITIONS = 10, 20
#: a ``--quick`` run's heartbeats, 1 s instead of the defaults (KIP-848's 5 s told by the
#: broker, librdkafka's classic 3 s): the join and the leave then take about a second
#: each instead of five, through the same code (a quick run measures nothing)
QUICK_HEARTBEAT_MS = 1000
QUICK_CLIENT = {"heartbeat.interval.ms": QUICK_HEARTBEAT_MS}
QUICK_KAFKA_PROPS = {"group.consumer.heartbeat.interval.ms": QUICK_HEARTBEAT_MS,
                     "group.consumer.min.heartbeat.interval.ms": QUICK_HEARTBEAT_MS}
QUICK_GATEWAY_SETTINGS = {"gateway.group.consumer.heartbeat.interval.ms":
                          str(QUICK_HEARTBEAT_MS)}
PROTOCOLS = ("consumer", "classic")
FIGURES = {
    ("join", "consumer"): "10 consumers join a group, KIP-848 (group.protocol=consumer)",
    ("join", "classic"): "10 consumers join a group, classic protocol (eager range)",
    ("leave", "consumer"): "1 of 10 leaves, the 9 own everything again, KIP-848",
    ("leave", "classic"): "1 of 10 leaves, the 9 own everything again, classic",
}


class _Member(threading.Thread):
    """One consumer polling on its own thread (librdkafka's handle is used by it alone)."""

    def __init__(self, conf: dict, topic: str):
        super().__init__(daemon=True)
        self.conf, self.topic = conf, topic
        self.owned: frozenset[int] = frozenset()
        self.stop = threading.Event()
        self.closed = threading.Event()

    def run(self) -> None:
        import confluent_kafka as ck

        c = ck.Consumer(self.conf)
        c.subscribe([self.topic])
        try:
            while not self.stop.is_set():
                c.poll(0.05)
                self.owned = frozenset(tp.partition for tp in c.assignment())
        finally:
            c.close()
            self.owned = frozenset()
            self.closed.set()


def _covered(members: Sequence[_Member]) -> bool:
    owned = [m.owned for m in members]
    return all(owned) and sum(map(len, owned)) == PARTITIONS \
        and frozenset().union(*owned) == frozenset(range(PARTITIONS))


def _wait(members: Sequence[_Member], since: float, timeout_s: float) -> float | None:
    """Seconds from ``since`` until the members cover the topic (None: not in time)."""
    while time.monotonic() - since < timeout_s:
        if _covered(members):
            return time.monotonic() - since
        time.sleep(0.01)
    return None


def one_group(bootstrap: str, create: Callable[[str, int], Any], protocol: str,
              timeout_s: float = 120, client: dict | None = None
              ) -> tuple[float | None, float | None]:
    """(join seconds, leave seconds) of one fresh group (None: not within timeout_s);
    ``client``: more settings of a classic group's members (a ``--quick`` run's shorter
    heartbeat; a KIP-848 member is told its interval by the broker)."""
    topic = f"rebalance-{uuid.uuid4().hex[:8]}"
    create(topic, PARTITIONS)
    conf = {"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False, "auto.offset.reset": "earliest"}
    if protocol == "consumer":
        conf["group.protocol"] = "consumer"
    else:
        conf.update(client or {})
    members = [_Member({**conf, "client.id": f"m{i}"}, topic) for i in range(MEMBERS)]
    join_s = leave_s = None
    try:
        start = time.monotonic()
        for m in members:
            m.start()
        join_s = _wait(members, start, timeout_s)
        if join_s is not None:
            t0 = time.monotonic()
            members[0].stop.set()  # a clean close: LeaveGroup / a heartbeat with epoch -1
            leave_s = _wait(members[1:], t0, timeout_s)
    finally:
        for m in members:
            m.stop.set()
        for m in members:
            m.join(30)
    return join_s, leave_s


def runs(sides: Sequence[tuple[str, str, Callable[[str, int], Any]]], repeat: int,
         load: Callable[[], float], log: Callable[[str], None],
         client: dict | None = None) -> dict:
    """{(phase, protocol, side): [seconds, ...]} over ``repeat`` rounds, sides alternating
    (``client``: more settings of classic members, see :func:`one_group`)."""
    out: dict = {}
    for r in range(repeat):
        for protocol in PROTOCOLS:
            for name, bootstrap, create in sides:
                join_s, leave_s = one_group(bootstrap, create, protocol, client=client)
                out.setdefault(("join", protocol, name), []).append((join_s, load()))
                out.setdefault(("leave", protocol, name), []).append((leave_s, load()))
                log(f"rebalance round {r + 1}, {protocol:8s} on {name:8s}: join "
                    f"{_fmt(join_s)} s, leave {_fmt(leave_s)} s")
    return out


def _fmt(x: float | None) -> str:
    return "timeout" if x is None else f"{x:.2f}"


def figures(results: dict) -> list[dict]:
    """The ``rebalance_*`` figures (ms; ours sparklog, baseline Kafka; see the docstring)."""
    out = []
    for (phase, protocol), label in FIGURES.items():
        ours = [s for s, _ in results.get((phase, protocol, "sparklog"), ()) if s is not None]
        theirs = [s for s, _ in results.get((phase, protocol, "kafka"), ()) if s is not None]
        if not ours and not theirs:
            continue
        med = {k: statistics.median(v) * 1000 if v else None
               for k, v in (("ours", ours), ("theirs", theirs))}
        loads = [ld for side in ("sparklog", "kafka")
                 for _, ld in results.get((phase, protocol, side), ())]
        out.append({
            "name": f"rebalance_{phase}_{protocol}", "label": label, "unit": "ms",
            "ours": None if med["ours"] is None else round(med["ours"], 1),
            "ours_best": round(min(ours) * 1000, 1) if ours else None,
            "baseline": None if med["theirs"] is None else round(med["theirs"], 1),
            "baseline_best": round(min(theirs) * 1000, 1) if theirs else None,
            "ratio": round(med["theirs"] / med["ours"], 3) if ours and theirs else None,
            "target": None, "timeouts": sum(1 for side in ("sparklog", "kafka") for s, _ in
                                            results.get((phase, protocol, side), ()) if s is None),
            "loads": [round(x, 2) for x in loads]})
    return out

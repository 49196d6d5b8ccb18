"""``sparklog cluster status``: the broker application as the store records it.

Reads only the documents under ``_brokers/`` (``log_layout.brokers``: the driver,
each slot's gateway, the current assignment) and the group documents, so it
works with no gateway running, and after the application stopped. It prints the
application (Spark app id, master, driver, driver epoch, heartbeat age, state,
Spark UI, the maintenance the driver schedules), the gateways (a heartbeat older
than 12.5 s is marked stale: gateways write theirs every 2 s, the driver every 5 s,
issue 33), the driver's view of its slots, the assignment, and each group's
coordinator. A store no broker application has used says so (exit status 0).

``--json`` prints one document; its keys are stable (ages in ms at ``now_ms``;
a fact the store does not hold is null)::

    {"store": "file:///data/log", "now_ms": 1763800000000, "stale_after_ms": 12500,
     "ran": true,                                   # false: nothing under _brokers/
     "application": {"id": "app-2026...", "master": "spark://h:7077",
                     "ui": "http://h:4040", "host": "h", "pid": 4242,
                     "driver_epoch": 3, "started_ms": ..., "heartbeat_ms": ...,
                     "heartbeat_age_ms": 800, "stale": false, "state": "running",
                     "maintenance": {"interval_ms": ..., "last_run_ms": ...,
                                     "last_result": {...}} | null} | null,
     "slots": [{"slot": 0, "port": 8082, "host": "h", "url": "http://h:8082",
                "executor": "1", "task_attempt": 0, "up": true, "since_ms": ...,
                "runs": 1}],                        # the driver's view of its slots
     "gateways": [{"slot": 0, "gateway_id": "gw0-1a2b", "url": "http://h:8082",
                   "host": "h", "pid": 777, "epoch": 5, "live": true,
                   "started_ms": ..., "heartbeat_ms": ..., "heartbeat_age_ms": 300,
                   "stale": false, "partitions_led": 4, "partitions_assigned": 4,
                   "bytes_in_per_s": 1.2e6, "records_in_per_s": 9000.0}],
     "assignment": {"driver_epoch": 3, "generation": 41, "written_ms": ...,
                    "age_ms": 1200, "live": [0], "slots": {"0": "http://h:8082"}} | null,
     "groups": [{"group": "billing", "coordinator_slot": 0,
                 "coordinator_url": "http://h:8082"}]}

``live`` is whether the assignment counts the gateway's slot as alive;
``partitions_led`` counts the partitions the gateway reports leading,
``partitions_assigned`` those the assignment gives its slot (the offsets topic
excluded in both); a group's coordinator is null before the first assignment.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from typing import Any

from jobs.cli_output import plural

#: a heartbeat older than this marks its writer stale (2.5 of the driver's 5 s beats,
#: jobs.leadership.HEARTBEAT_S; the gateways beat every 2 s)
STALE_AFTER_MS = 12_500
DRIVER_SLOT_KEYS = ("slot", "port", "host", "url", "executor", "task_attempt", "up",
                    "since_ms", "runs")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cluster", help="the broker application's state, read from the store",
                       description=__doc__.split("\n\n", 1)[1].split("\n\n", 1)[0],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    s = actions.add_parser("status", help="application, gateways, assignment, coordinators")
    s.add_argument("--json", action="store_true", help="print one JSON document")
    s.add_argument("--storage-options", metavar="JSON", type=_json_object,
                   help="fsspec storage options as JSON (as given to broker-app)")
    p.set_defaults(handler=run)


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"not JSON: {e}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("expected a JSON object")
    return value


def _now_ms() -> int:
    # imported here: the CLI loads the storage layer only for a command that uses it
    from log_layout import wall_clock_ms

    return wall_clock_ms()


def run(args: argparse.Namespace) -> int:
    from jobs.cli import settings_from
    from log_layout import open_log_from_settings

    log = open_log_from_settings(settings_from(args), storage_options=args.storage_options)
    doc = status(log, now_ms=_now_ms())
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print_status(doc)
    return 0


# -- the facts ------------------------------------------------------------------
def status(log, *, now_ms: int) -> dict[str, Any]:
    """The ``--json`` document of ``log``'s store at ``now_ms`` (see the module doc)."""
    from log_layout.brokers import BrokerRegistry

    registry = BrokerRegistry(log.store)
    driver, gateways, assignment = registry.driver(), registry.gateways(), registry.assignment()
    return {
        "store": log.url, "now_ms": now_ms, "stale_after_ms": STALE_AFTER_MS,
        "ran": bool(driver or gateways or assignment),
        "application": None if driver is None else _application(driver, now_ms),
        "slots": [{k: s.get(k) for k in DRIVER_SLOT_KEYS}
                  for s in (driver or {}).get("slots") or [] if isinstance(s, Mapping)],
        "gateways": [_gateway(g, assignment, now_ms) for _, g in sorted(gateways.items())],
        "assignment": None if assignment is None else {
            "driver_epoch": assignment.driver_epoch, "generation": assignment.generation,
            "written_ms": assignment.written_ms,
            "age_ms": _age(assignment.written_ms, now_ms), "live": sorted(assignment.live),
            "slots": {str(s): u for s, u in sorted(assignment.slots.items())}},
        "groups": [_coordinator(group, assignment) for group in log.groups()],
    }


def _age(then_ms: Any, now_ms: int) -> int | None:
    """ms since ``then_ms``; None if the document holds no time (clocks may differ a
    little between hosts: a negative age is shown as 0)."""
    return max(0, now_ms - int(then_ms)) if isinstance(then_ms, (int, float)) and then_ms else None


def _stale(age_ms: int | None) -> bool:
    return age_ms is None or age_ms > STALE_AFTER_MS


def _application(driver: Mapping[str, Any], now_ms: int) -> dict[str, Any]:
    age = _age(driver.get("heartbeat_ms"), now_ms)
    return {"id": driver.get("application"), "master": driver.get("master"),
            "ui": driver.get("ui"), "host": driver.get("host"), "pid": driver.get("pid"),
            "driver_epoch": driver.get("driver_epoch"), "started_ms": driver.get("started_ms"),
            "heartbeat_ms": driver.get("heartbeat_ms"), "heartbeat_age_ms": age,
            "stale": _stale(age), "state": driver.get("state"),
            "maintenance": driver.get("maintenance")}


def _gateway(g, assignment, now_ms: int) -> dict[str, Any]:
    from log_layout.brokers import OFFSETS_TOPIC

    age = _age(g.heartbeat_ms, now_ms)
    led = [tp for tp in g.partitions if not tp.startswith(f"{OFFSETS_TOPIC}/")]
    return {"slot": g.slot, "gateway_id": g.gateway_id, "url": g.url, "host": g.host,
            "pid": g.pid, "epoch": g.epoch,
            "live": assignment is not None and g.slot in assignment.live,
            "started_ms": g.started_ms, "heartbeat_ms": g.heartbeat_ms, "heartbeat_age_ms": age,
            "stale": _stale(age), "partitions_led": len(led),
            "partitions_assigned": None if assignment is None else len(assignment.led_by(g.slot)),
            "bytes_in_per_s": g.bytes_in_per_s, "records_in_per_s": g.records_in_per_s}


def _coordinator(group: str, assignment) -> dict[str, Any]:
    slot = None if assignment is None else assignment.coordinator_slot(group)
    return {"group": group, "coordinator_slot": slot,
            "coordinator_url": None if assignment is None else assignment.url(slot)}


# -- the tables -----------------------------------------------------------------
def _console():
    from jobs.cli_output import console

    # piped output gets whole rows instead of 80 squeezed columns (as `maintain` does)
    return console()


def print_status(doc: Mapping[str, Any]) -> None:
    """``status()``'s document as tables."""
    console = _console()
    if not doc["ran"]:
        console.print(f"no broker application has run on this store ({doc['store']}): "
                      "nothing under _brokers/", highlight=False)
    else:
        _print_application(console, doc)
        console.print()
        _print_gateways(console, doc)
    groups = doc["groups"]
    if groups and doc["assignment"] is not None:
        console.print()
        table = _table("group coordinators", "group", "slot", "url")
        for g in groups:
            table.add_row(g["group"], _text(g["coordinator_slot"]), _text(g["coordinator_url"]))
        table.print()
    elif groups:
        console.print(f"{plural(len(groups), 'group')}; no coordinators: no assignment was "
                      "written",
                      highlight=False)


def _print_application(console, doc: Mapping[str, Any]) -> None:
    app = doc["application"]
    table = _table("application", "fact", "value")
    if app is None:
        table.add_row("driver", "no driver document (_brokers/driver.json)")
    else:
        rows = {"app id": app["id"], "master": app["master"],
                "driver": f"{_text(app['host'])} pid {_text(app['pid'])}",
                "driver epoch": app["driver_epoch"], "state": app["state"],
                "heartbeat": _heartbeat(app), "Spark UI": app["ui"],
                "maintenance": _maintenance(app["maintenance"], doc["now_ms"])}
        for key, value in rows.items():
            table.add_row(key, _text(value))
    a = doc["assignment"]
    table.add_row("assignment", "none written yet" if a is None else
                  f"generation {a['generation']} of driver epoch {a['driver_epoch']}, "
                  f"written {_secs(a['age_ms'])} ago, live slots {a['live']}")
    table.print()


def _print_gateways(console, doc: Mapping[str, Any]) -> None:
    table = _table("gateways", "slot", "id", "url", "host", "pid", "epoch", "live", "heartbeat",
                   "led", "assigned", "in/s")
    for g in doc["gateways"]:
        table.add_row(str(g["slot"]), g["gateway_id"], g["url"], g["host"] or "-",
                      str(g["pid"] or "-"), str(g["epoch"]), "yes" if g["live"] else "no",
                      _heartbeat(g), str(g["partitions_led"]), _text(g["partitions_assigned"]),
                      human_rate(g["bytes_in_per_s"]))
    if not doc["gateways"]:
        table.add_row("-", "(no gateway registered)", *[""] * 9)
    table.print()
    if doc["slots"]:
        console.print()
        table = _table("slots (the driver's view)", "slot", "up", "url", "executor", "attempt",
                       "runs", "since")
        for s in doc["slots"]:
            since = _age(s["since_ms"], doc["now_ms"])
            table.add_row(_text(s["slot"]), "up" if s["up"] else "down", _text(s["url"]),
                          _text(s["executor"]), _text(s["task_attempt"]), _text(s["runs"]),
                          "-" if since is None else f"{_secs(since)} ago")
        table.print()


def _table(title: str, *columns: str):
    """Aligned columns (``cli_output.Table``), whole at any width; headers as Kafka's
    tools write them (``IN/S``), every column left-aligned (most cells are words)."""
    from jobs.cli_output import Table

    names = [c.upper().replace(" ", "-") for c in columns]
    return Table(*names, title=f"{title}:", left=names)


def _text(value: Any) -> str:
    return "-" if value is None or value == "" else str(value)


def _secs(ms: int | None) -> str:
    return "?" if ms is None else f"{ms / 1000:.1f} s"


def _heartbeat(doc: Mapping[str, Any]) -> str:
    age = doc["heartbeat_age_ms"]
    text = "never" if age is None else f"{_secs(age)} ago"
    return f"{text} (stale)" if doc["stale"] else text


def _maintenance(m: Any, now_ms: int) -> str | None:
    """The driver's maintenance status (``jobs.app_maintenance``) in one line."""
    if not isinstance(m, Mapping):
        return None
    every = f"every {_secs(m.get('interval_ms'))}"
    last, result = _age(m.get("last_run_ms"), now_ms), m.get("last_result")
    if last is None:
        return f"{every}, no pass yet"
    if isinstance(result, Mapping) and result.get("ok") is False:
        outcome = f"failed: {result.get('error')}"
    elif isinstance(result, Mapping):
        outcome = (f"{plural(result.get('partitions', 0), 'partition')}, "
                   f"{plural(result.get('records_removed', 0), 'record')} removed, "
                   f"{plural(len(result.get('errors') or []), 'error')}")
    else:
        outcome = "the first pass is under way"
    return f"{every}, last pass started {_secs(last)} ago; last result: {outcome}"


def human_rate(bytes_per_s: float) -> str:
    """Bytes per second, short and decimal as network rates are: 0 B/s, 812 B/s,
    31.2 kB/s, 4.0 MB/s, 1.2 GB/s."""
    value = float(bytes_per_s or 0)
    for unit in ("B/s", "kB/s", "MB/s"):
        if abs(value) < 1000:
            return f"{value:.0f} {unit}" if unit == "B/s" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} GB/s"

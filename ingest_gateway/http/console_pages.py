"""The web console's pages as HTML (``http.console`` gathers their data and serves them).

Each function takes what ``console_data`` read and returns a whole page; every value
shown is escaped by ``console_render`` (names, records, configs, errors are
user-controlled).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ingest_gateway.http.console_data import PartitionRow, TopicRow, total_lag
from ingest_gateway.http.console_render import (esc, format_switch, line_chart, link, num, page,
                                                seg, show_bytes, show_headers, size, table, url,
                                                when)
from ingest_gateway.server.groups.state import GroupDescription


def messages_url(topic: str, **query: Any) -> str:
    return url(f"/ui/topics/{seg(topic)}/messages", **query)


def _topics_table(topics: Sequence[TopicRow]) -> str:
    rows = [(link(f"/ui/topics/{seg(t.name)}", t.name), num(len(t.partitions)), num(t.records),
             esc(size(t.bytes)), num(t.segments)) for t in topics]
    return table(["Topic", "Partitions", "Records", "Size", "Segments"], rows, id="topics",
                 numeric=(1, 2, 3, 4))


def _groups_table(groups: Sequence[GroupDescription]) -> str:
    rows = [(link(f"/ui/groups/{seg(d.group)}", d.group), f'<span class="state {esc(d.state)}">'
             f'{esc(d.state)}</span>', num(len(d.members)),
             esc(", ".join(sorted({p.topic for p in d.partitions}))), num(total_lag(d)))
            for d in groups]
    return table(["Group", "State", "Members", "Topics", "Lag"], rows, id="groups",
                 numeric=(2, 4))


def overview(state: Any, topics: Sequence[TopicRow], groups: Sequence[GroupDescription]) -> str:
    totals = state.metrics.totals
    charts = _throughput(state.metrics.history.rates(), "")
    batcher = state.batcher
    cards = [("Gateway", esc(batcher.id)), ("Store", esc(state.log.url)),
             ("Topics", num(len(topics))),
             ("Partitions", num(sum(len(t.partitions) for t in topics))),
             ("Consumer groups", num(len(groups))),
             ("Records in / out", f"{num(totals[0])} / {num(totals[2])}"),
             ("Bytes in / out", f"{esc(size(totals[1]))} / {esc(size(totals[3]))}")]
    card_html = "".join(f'<div class=card><span>{esc(k)}</span><b>{v}</b></div>'
                        for k, v in cards)
    body = (f'<section class=cards id=summary>{card_html}</section>'
            f'<section class=charts>{charts}</section>'
            f"<h2>Topics</h2>{_topics_table(topics)}"
            f"<h2>Consumer groups</h2>{_groups_table(groups)}")
    return page("Overview", body, active="/ui")


def topics(rows: Sequence[TopicRow]) -> str:
    return page("Topics", _topics_table(rows), active="/ui/topics")


def _throughput(rates: Sequence[tuple[float, ...]], what: str) -> str:
    """The records and bytes per second charts of ``rates`` (History.rates)."""
    return (line_chart([("in", "in", [(r[0], r[1]) for r in rates]),
                        ("out", "out", [(r[0], r[3]) for r in rates])],
                       unit=" rec/s", id="chart-records", title=f"Records per second{what}")
            + line_chart([("in", "in", [(r[0], r[2]) for r in rates]),
                          ("out", "out", [(r[0], r[4]) for r in rates])],
                         unit="B/s", id="chart-bytes", title=f"Bytes per second{what}"))


def topic(name: str, rows: Sequence[PartitionRow], configs: Sequence[tuple[str, str, bool]],
          leaders: Mapping[int, Any], rates: Sequence[tuple[float, ...]],
          subjects: str = "") -> str:
    """A topic's page; ``subjects``: its "Schemas" section (markup, ``console_schemas``)."""
    prow = []
    for p in rows:
        leader = leaders.get(p.partition)
        prow.append((num(p.partition), esc(leader["url"] if leader else "this gateway"),
                     num(p.log_start), num(p.log_end), num(p.records), esc(size(p.bytes)),
                     num(p.segments), num(p.leader_epoch), esc(when(p.last_commit_ms)),
                     link(messages_url(name, partition=p.partition), "browse")))
    parts = table(["Partition", "Leader", "Log start", "Log end", "Records", "Size", "Segments",
                   "Leader epoch", "Last commit", ""], prow, id="partitions",
                  numeric=(0, 2, 3, 4, 5, 6, 7))
    crow = [(f"<code>{esc(k)}</code>", f"<code>{esc(v)}</code>",
             '<span class=tag>override</span>' if o else '<span class=muted>default</span>')
            for k, v, o in configs]
    conf = table(["Config", "Value", "Source"], crow, id="configs")
    options = "".join(f"<option value={p.partition}>{p.partition}</option>" for p in rows)
    form = (f'<form method=post action="/ui/topics/{esc(seg(name))}/produce" id=produce '
            'class=produce><label>Partition <select name=partition>'
            f'<option value="">by key (or sticky)</option>{options}</select></label>'
            '<label>Key <input name=key placeholder="(none)"></label>'
            '<label class=wide>Value <textarea name=value rows=3></textarea></label>'
            '<label class=check><input type=checkbox name=null_value value=1> '
            'null value (a tombstone)</label><label class=wide>'
            '<span>Headers, one <code>key: value</code> a line</span>'
            '<textarea name=headers rows=2></textarea></label>'
            '<button type=submit>Produce</button></form>')
    body = (f'<p><a href="/ui/topics">Topics</a> › {esc(name)} · '
            f'{link(messages_url(name), "browse messages")}</p>'
            f"<h2>Partitions</h2>{parts}<section class=charts>{_throughput(rates, ' of this topic')}"
            f"</section><div class=split><div><h2>Configs</h2>{conf}</div>"
            f"<div><h2>Produce a record</h2>{form}</div></div>{subjects}")
    return page(f"Topic {name}", body, active="/ui/topics")


def messages(topic: str, rows: Sequence[PartitionRow], partition: int, offset: int, count: int,
             fmt: str, ts: int | None, records: Sequence[dict[str, Any]], *,
             notice: str = "") -> str:
    row = rows[partition]
    options = "".join(f'<option value={p.partition}'
                      f'{" selected" if p.partition == partition else ""}>{p.partition}</option>'
                      for p in rows)
    form = (f'<form method=get class=browse id=browse action="{esc(messages_url(topic))}">'
            f"<label>Partition <select name=partition>{options}</select></label>"
            f'<label>Offset <input name=offset type=number min=0 value="{offset}"></label>'
            '<label>or from time (UTC) <input name=timestamp type=datetime-local step=1>'
            f'</label><label>Count <input name=count type=number min=1 max=500 value={count}>'
            f'</label><input type=hidden name=format value="{esc(fmt)}">'
            "<button type=submit>Show</button></form>")
    recs = [(num(r["offset"]), esc(when(_ms(r["timestamp"]))), show_bytes(r["key"], fmt),
             show_bytes(r["value"], fmt), show_headers(r["headers"], fmt)) for r in records]
    start = f"from {when(ts)}, " if ts is not None else ""
    info = (f'<p class=muted id=range>Partition {partition}: log start {num(row.log_start)}, '
            f"log end {num(row.log_end)}; showing {start}offset {num(offset)}, "
            f"{num(len(records))} record{'s' if len(records) != 1 else ''}.</p>")
    nav = []
    if offset > row.log_start:
        nav.append(link(messages_url(topic, partition=partition, count=count, format=fmt,
                                     offset=max(row.log_start, offset - count)), "‹ older"))
    if records and records[-1]["offset"] + 1 < row.log_end:
        nav.append(link(messages_url(topic, partition=partition, count=count, format=fmt,
                                     offset=records[-1]["offset"] + 1), "newer ›"))
    switch = format_switch(messages_url(topic), fmt, partition=partition, offset=offset,
                           count=count)
    body = (f'<p>{link("/ui/topics", "Topics")} › {link(f"/ui/topics/{seg(topic)}", topic)} › '
            f"messages</p>{form}<div class=bar>{info}{switch}</div>"
            + table(["Offset", "Timestamp", "Key", "Value", "Headers"], recs, id="records",
                    numeric=(0,))
            + f'<p class=pager>{" · ".join(nav)}</p>')
    return page(f"Messages of {topic}", body, active="/ui/topics", notice=notice)


def _ms(ts: Any) -> int:
    """A record's timestamp (a datetime from Arrow) in epoch milliseconds."""
    return int(ts.timestamp() * 1000) if hasattr(ts, "timestamp") else int(ts)


def groups(descs: Sequence[GroupDescription]) -> str:
    return page("Consumer groups", _groups_table(descs), active="/ui/groups")


def group(d: GroupDescription, lags: Sequence[tuple[float, int]]) -> str:
    cards = [("Type", esc(d.type)), ("State", esc(d.state)),
             ("Generation" if d.type == "classic" else "Group epoch", num(d.generation)),
             ("Strategy" if d.type == "classic" else "Assignor", esc(d.strategy or "–")),
             ("Members", num(len(d.members))), ("Total lag", num(total_lag(d)))]
    card_html = "".join(f'<div class=card><span>{esc(k)}</span><b>{v}</b></div>'
                        for k, v in cards)

    def parts_of(pairs: Any) -> str:
        return esc(", ".join(f"{a['topic']}-{a['partition']}" for a in pairs or ()) or "–")

    # a KIP-848 member's epoch and target: its assignment moves there as others release
    mrows = [(f"<code>{esc(m['member_id'])}</code>", esc(m.get("client_id") or "–"),
              esc(m.get("protocol") or "classic"),
              num(m["member_epoch"]) if "member_epoch" in m else "–",
              esc(", ".join(m.get("topics", ()))), parts_of(m.get("assignment")),
              parts_of(m.get("target")) if "target" in m else "–",
              esc(when(m.get("last_heartbeat_ms")))) for m in d.members]
    members = table(["Member", "Client id", "Protocol", "Epoch", "Topics",
                     "Assigned partitions", "Target", "Last heartbeat"], mrows, id="members")
    prows = [(link(f"/ui/topics/{seg(p.topic)}", p.topic), num(p.partition),
              "–" if p.committed is None else num(p.committed), num(p.log_start_offset),
              num(p.high_watermark), "–" if p.lag is None else
              f'<b class="{"lagging" if p.lag else "caught-up"}">{num(p.lag)}</b>',
              f"<code>{esc(p.owner)}</code>" if p.owner else "–") for p in d.partitions]
    parts = table(["Topic", "Partition", "Committed", "Log start", "Log end", "Lag", "Owner"],
                  prows, id="lag", numeric=(1, 2, 3, 4, 5))
    chart = line_chart([("total lag", "lag", [(t, float(v)) for t, v in lags])],
                       unit=" rec", id="chart-lag", title="Total lag (records)")
    body = (f'<p>{link("/ui/groups", "Consumer groups")} › {esc(d.group)}</p>'
            f'<section class=cards id=group-summary>{card_html}</section>'
            f"<h2>Lag per partition</h2>{parts}<section class=charts>{chart}</section>"
            f"<h2>Members</h2>{members}")
    return page(f"Group {d.group}", body, active="/ui/groups")


def maintenance(runs: Sequence[dict[str, Any]]) -> str:
    rows = []
    for r in runs:
        before, after = int(r.get("bytes_before", 0)), int(r.get("bytes_after", 0))
        errors = r.get("errors") or []
        rows.append((esc(when(r.get("now_ms"))), esc(r.get("command", "")),
                     esc(", ".join(r.get("topics") or []) or "all"),
                     num(int(r.get("duration_ms", 0))), num(int(r.get("partitions", 0))),
                     num(int(r.get("records_removed", 0))), esc(size(max(0, before - after))),
                     num(int(r.get("files_deleted", 0))),
                     "dry run" if r.get("dry_run") else "",
                     f'<span class=error>{esc("; ".join(map(str, errors)))}</span>'
                     if errors else "–"))
    body = table(["Ran at", "Command", "Topics", "ms", "Partitions", "Records removed",
                  "Reclaimed", "Files deleted", "", "Errors"], rows, id="runs",
                 numeric=(3, 4, 5, 6, 7))
    return page("Maintenance history", body, active="/ui/maintenance")

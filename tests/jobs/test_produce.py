"""``sparklog produce``: stdin lines through a gateway; every failed record counted."""

from __future__ import annotations

import uuid

from log_layout import open_log
from tests.jobs.cli_proc import assert_one_line_error, sparklog, text


def _topic(store: str, **config) -> str:
    name = f"p-{uuid.uuid4().hex[:8]}"
    open_log(store).create_topic(name, config)
    return name


def _stored(store: str, topic: str) -> list[dict]:
    return [r for p in open_log(store).partitions(topic) for r in p.read_table(0).to_pylist()]


def test_produce_reads_stdin_lines_with_keys(local_gateway):
    gw, store = local_gateway
    topic = _topic(store, partitions=2)
    lines = "".join(f"user-{i % 5}:event {i}\n" for i in range(25_000)) + "no separator\n"
    run = sparklog("produce", topic, "--bootstrap-server", gw.url, "--key-separator", ":",
                   "--progress-every", "10000", stdin=lines.encode())
    out, err = text(run)
    assert run.returncode == 0, err
    assert f"produced 25,001 records to {topic}" in err
    assert "10,000 records" in err  # the progress line
    rows = _stored(store, topic)
    assert len(rows) == 25_001
    by_value = {r["value"]: r["key"] for r in rows}
    assert by_value[b"event 7"] == b"user-2" and by_value[b"no separator"] is None


def test_a_refused_record_in_the_middle_fails_the_command(local_gateway):
    """Only the last record's result was checked: a refused one before it went unnoticed."""
    gw, store = local_gateway
    topic = _topic(store, partitions=1, **{"max.message.bytes": 100})
    run = sparklog("produce", topic, "--bootstrap-server", gw.url,
                   stdin=b"a\n" + b"x" * 500 + b"\nb\n")
    assert_one_line_error(run, "1 of 3 records failed", "HTTP 413",
                          "exceeds max.message.bytes=100")
    assert f"produced 2 records to {topic}" in text(run)[1]
    assert [r["value"] for r in _stored(store, topic)] == [b"a", b"b"]


def test_every_record_of_a_refused_batch_is_counted(local_gateway):
    """Keyless records refused by a compacted topic fail their whole batch: the count
    of failed records is exactly what the log is missing."""
    gw, store = local_gateway
    topic = _topic(store, partitions=2, **{"cleanup.policy": "compact"})
    lines = "".join(f"k{i}:v{i}\n" if i % 3 else f"no key {i}\n" for i in range(30))
    run = sparklog("produce", topic, "--bootstrap-server", gw.url, "--key-separator", ":",
                   stdin=lines.encode())
    _, err = text(run)
    assert run.returncode == 2, err
    assert "Traceback" not in err
    stored = len(_stored(store, topic))
    failed = 30 - stored
    assert failed >= 10  # at least the keyless records
    assert f"sparklog: error: {failed} of 30 records failed: " in err
    assert "every record needs a key" in err
    assert f"produced {stored} records to {topic}" in err


def test_bad_partition_unknown_topic_and_bad_urls_are_one_line_errors(local_gateway):
    gw, store = local_gateway
    topic = _topic(store, partitions=2)
    assert_one_line_error(sparklog("produce", topic, "--bootstrap-server", gw.url,
                                   "--partition", "2", stdin=b"a\n"),
                          "--partition", "partitions 0..1")
    assert_one_line_error(sparklog("produce", "nope", "--bootstrap-server", gw.url,
                                   stdin=b"a\n"),
                          "topic 'nope'", "404")
    assert_one_line_error(sparklog("produce", topic, "--bootstrap-server", "ftp://x",
                                   stdin=b"a\n"), "--bootstrap-server")
    # without a scheme: http:// is meant
    run = sparklog("produce", topic, "--bootstrap-server", gw.url.removeprefix("http://"),
                   stdin=b"a\n")
    assert run.returncode == 0, text(run)[1]

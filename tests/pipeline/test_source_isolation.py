"""``kafka.isolation.level`` of the ``sparklog`` source: read_committed ends at the last
stable offset and never returns an aborted transaction's records, in batch and in a
stream; read_uncommitted (the default) reads to the high watermark. Offsets keep gaps."""

from __future__ import annotations

import pytest
from chispa import assert_df_equality

from log_layout import transactions as tx
from pipeline.errors import InvalidSourceOption
from pipeline.options import parse
from tests.log_layout.txn_helpers import txn_append
from tests.pipeline.conftest import append, read, source_options

T0 = 1_000_000


def _txn(log, tid: str, values: list[bytes], end: bool | None) -> tuple[int, int]:
    """A transaction of ``tid`` writing ``values`` to t-0; committed (True), aborted
    (False) or left open (None)."""
    pid, epoch = tx.init_transactions(log, tid, 60_000, now_ms=T0)
    tx.add_partitions(log, tid, pid, epoch, [("t", 0)], now_ms=T0)
    txn_append(log, "t", 0, pid, epoch, values)
    if end is not None:
        tx.end_transaction(log, tid, pid, epoch, end, now_ms=T0)
    return pid, epoch


def _layout(log) -> tuple[int, int]:
    """t-0: a b | commit(c1 c2) marker | abort(x) marker | d | open(o1) | e; t-1: p.
    Offsets 0 1 | 2 3 4 | 5 6 | 7 | 8 | 9. Returns the open transaction's (pid, epoch)."""
    log.create_topic("t", {"partitions": 2})
    append(log, "t", 0, ["a", "b"])
    append(log, "t", 1, ["p"])
    _txn(log, "committer", [b"c1", b"c2"], True)
    _txn(log, "aborter", [b"x"], False)
    append(log, "t", 0, ["d"])
    open_txn = _txn(log, "open", [b"o1"], None)
    append(log, "t", 0, ["e"])
    return open_txn


def check(actual, records):
    got = sorted((r["partition"], r["offset"], r["value"].decode())
                 for r in actual.select("partition", "offset", "value").collect())
    assert got == sorted(records)


UNCOMMITTED = [(0, 0, "a"), (0, 1, "b"), (0, 2, "c1"), (0, 3, "c2"), (0, 5, "x"), (0, 7, "d"),
               (0, 8, "o1"), (0, 9, "e"), (1, 0, "p")]
COMMITTED = [(0, 0, "a"), (0, 1, "b"), (0, 2, "c1"), (0, 3, "c2"), (0, 7, "d"), (1, 0, "p")]


@pytest.mark.spark
def test_batch_read_committed_against_read_uncommitted(spark, slog):
    _layout(slog)
    assert slog.partition("t", 0).last_stable_offset() == 8
    check(read(spark, slog, subscribe="t"), UNCOMMITTED)  # Kafka's default
    check(read(spark, slog, subscribe="t", **{"kafka.isolation.level": "read_uncommitted"}),
          UNCOMMITTED)
    committed = read(spark, slog, subscribe="t", **{"kafka.isolation.level": "read_committed"})
    check(committed, COMMITTED)
    check(read(spark, slog, subscribe="t", **{"isolation.level": "read_committed"}), COMMITTED)
    # explicit ending offsets above the LSO are lowered to it; a slice of a segment
    check(read(spark, slog, subscribe="t", endingOffsets='{"t": {"0": 10, "1": 1}}',
               maxRecordsPerPartition=1, **{"isolation.level": "read_committed"}), COMMITTED)
    wanted = spark.createDataFrame([(v.encode(), p, o) for p, o, v in COMMITTED],
                                   "value binary, partition int, offset long")
    assert_df_equality(committed.select("value", "partition", "offset"), wanted,
                       ignore_row_order=True, ignore_nullable=True)


def _run(spark, log, tmp_path):
    q = (spark.readStream.format("sparklog")
         .options(**source_options(log, subscribe="t", startingOffsets="earliest",
                                   **{"kafka.isolation.level": "read_committed"})).load()
         .writeStream.format("parquet").option("path", str(tmp_path / "out"))
         .option("checkpointLocation", str(tmp_path / "checkpoint"))
         .trigger(availableNow=True).start())
    q.awaitTermination()
    return spark.read.parquet(str(tmp_path / "out"))


@pytest.mark.spark
def test_stream_read_committed_stops_at_the_lso_then_reads_the_rest_once(spark, slog, tmp_path):
    pid, epoch = _layout(slog)
    check(_run(spark, slog, tmp_path), COMMITTED)
    check(_run(spark, slog, tmp_path), COMMITTED)  # nothing new is stable yet
    tx.end_transaction(slog, "open", pid, epoch, True, now_ms=T0)  # marker at 10
    append(slog, "t", 1, ["q"])
    out = _run(spark, slog, tmp_path)
    check(out, COMMITTED + [(0, 8, "o1"), (0, 9, "e"), (1, 1, "q")])
    assert out.count() == len(COMMITTED) + 3  # exactly once


def test_isolation_level_option_values(tmp_path):
    base = {"store": f"file://{tmp_path}", "subscribe": "t"}
    assert parse(base).isolation_level == "read_uncommitted"
    assert parse({**base, "kafka.isolation.level": "read_committed"}).read_committed
    assert parse({**base, "isolation.level": "READ_COMMITTED"}).read_committed
    assert parse({**base, "isolation.level": "read_committed",
                  "kafka.isolation.level": "read_committed"}).read_committed
    for name in ("kafka.isolation.level", "isolation.level"):
        with pytest.raises(InvalidSourceOption, match="read_uncommitted or read_committed") as e:
            parse({**base, name: "serializable"})
        assert e.value.option == name and e.value.value == "serializable"
    with pytest.raises(InvalidSourceOption, match="disagrees") as e:
        parse({**base, "isolation.level": "read_committed",
               "kafka.isolation.level": "read_uncommitted"})
    assert e.value.option == "isolation.level"

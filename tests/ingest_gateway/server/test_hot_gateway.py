"""A gateway with the hot tier on (gateway.hot.enable): a flush of many partitions is one
shared object and one journal entry, and every reader -- a consumer through the
gateway, a direct consumer, offsets by time, read_committed, a maintenance pass -- reads
it. On S3 the gateway is hot by default (gateway.hot.enable=auto)."""

from __future__ import annotations

import pytest

from ingest_gateway.client import Consumer, Producer
from jobs.gateway_process import GatewayProcess, wait_for
from log_layout import open_log, paths, wall_clock_ms
from tests.conftest import make_log_url

PARTITIONS = 32
RECORDS = 2_000


def _hot_files(lg) -> tuple[int, int]:
    entries = objects = 0
    for journal in lg.store.list_folders(paths.HOT_FOLDER):
        for f in lg.store.list(paths.journal_folder(journal.rstrip("/").rsplit("/", 1)[-1])):
            entries += f.name.endswith(".json")
            objects += f.name.endswith(".wal")
    return entries, objects


def _hot_objects(lg) -> set[str]:
    """The shared objects of every journal in ``lg``'s store."""
    return {f"{journal}{f.name}" for journal in lg.store.list_folders(paths.HOT_FOLDER)
            for f in lg.store.list(paths.journal_folder(journal.rstrip("/").rsplit("/", 1)[-1]))
            if f.name.endswith(".wal")}


def _read_all(consumer: Consumer, n: int) -> list:
    got: list = []
    wait_for(lambda: got.extend(consumer.poll(0.5)) or len(got) >= n, timeout=120,
             what=f"{n} records")
    return got


# S3: 15-20 s at load 5-12, a third of it the maintenance pass over 32 partitions
@pytest.mark.parametrize("backend", ["file", pytest.param("s3", marks=pytest.mark.slow)])
def test_a_hot_gateway_writes_one_object_per_flush_and_every_reader_reads_it(
        backend, request, tmp_path):
    from jobs import maintain

    url, options = make_log_url(backend, request, tmp_path)
    lg = open_log(url, storage_options=options)
    lg.create_topic("hot", {"partitions": PARTITIONS, "file.delete.delay.ms": 0})
    # on S3 the hot tier is on by default (gateway.hot.enable=auto); a local store asks
    gw = GatewayProcess(url, options, log_path=str(tmp_path / "gateway.log"),
                        settings={"gateway.hot.enable": "true"} if backend == "file" else {})
    gw.start()
    try:
        before = wall_clock_ms()
        with Producer(gw.url, acks="all", linger_ms=20) as producer:
            handles = [producer.send("hot", b"v%05d" % i, key=b"k%d" % i)
                       for i in range(RECORDS)]
            producer.flush(timeout=120)
        metas = [h.result(timeout=1) for h in handles]
        by_partition: dict[int, list[int]] = {}
        for m in metas:
            by_partition.setdefault(m.partition, []).append(m.offset)
        assert len(by_partition) == PARTITIONS  # keys spread over every partition
        for offsets in by_partition.values():
            assert sorted(offsets) == list(range(len(offsets)))
        # one object and one entry per flush, however many partitions each held; and no
        # partition folder got a segment file on the produce path
        entries, objects = _hot_files(lg)
        assert 0 < objects <= entries
        flushed_partitions = sum(len(lg.partition("hot", p).snapshot().segments)
                                 for p in range(PARTITIONS))
        assert objects < flushed_partitions
        assert not any(f.name.endswith(".arrow") for p in range(PARTITIONS)
                       for f in lg.store.list(paths.partition_folder("hot", p)))
        wanted = {(m.partition, m.offset): b"v%05d" % i for i, m in enumerate(metas)}
        for where in ({"gateway": gw.url}, {"store": url, "storage_options": options}):
            with Consumer(auto_offset_reset="earliest", **where) as c:
                c.assign([("hot", p) for p in range(PARTITIONS)])
                got = _read_all(c, RECORDS)
            assert {(r.partition, r.offset): r.value for r in got} == wanted
        fresh = open_log(url, storage_options=options)
        assert fresh.partition("hot", 0).offset_for_timestamp(before) == 0
        assert fresh.partition("hot", 0).read_table(
            0, isolation_level="read_committed").num_rows == len(by_partition[0])
        # a maintenance pass (as `sparklog maintain` and the broker app's scheduler run
        # it) while the gateway goes on: roll-up moves every record into per-partition
        # segments, vacuum and the hot sweep delete the shared objects (an hour on: past
        # the sweep's floor for objects freed in this very pass)
        before = _hot_objects(lg)
        summary = maintain.run(fresh, now_ms=wall_clock_ms() + 3_600_000)
        assert not summary.errors
        rolled = [s.file for p in range(PARTITIONS)
                  for s in open_log(url, storage_options=options).partition("hot", p)
                  .snapshot().segments]
        assert rolled and not any(paths.is_hot_file(f) for f in rolled)
        assert before and not before & _hot_objects(lg)
        with Producer(gw.url, acks="all") as producer:
            after = producer.send("hot", b"after", partition=0).result(timeout=60)
        assert after.offset == len(by_partition[0])
        again = open_log(url, storage_options=options).partition("hot", 0)
        values = again.read_table(0).column("value").to_pylist()
        assert values[-1] == b"after" and len(values) == len(by_partition[0]) + 1
    finally:
        gw.stop()
    with open(tmp_path / "gateway.log") as f:
        assert "hot tier on (gateway.hot.enable)" in f.read()


def test_kafka_clients_produce_and_read_through_a_hot_gateway(tmp_path):
    """confluent-kafka (librdkafka) produces idempotently through the Kafka listener of a
    hot gateway and reads every record back, transactions too."""
    import confluent_kafka

    from tests.ingest_gateway.kafka.kafka_gateway import KafkaGatewayProcess

    store = str(tmp_path / "store")
    open_log(store).create_topic("k", {"partitions": 8})
    with KafkaGatewayProcess(store, settings={"gateway.hot.enable": "true"}) as gw:
        producer = confluent_kafka.Producer({"bootstrap.servers": gw.bootstrap,
                                             "enable.idempotence": True, "linger.ms": 5})
        for i in range(500):
            producer.produce("k", key=b"k%d" % i, value=b"v%d" % i)
        assert producer.flush(60) == 0
        txn = confluent_kafka.Producer({"bootstrap.servers": gw.bootstrap,
                                        "transactional.id": "hot-txn", "linger.ms": 5})
        txn.init_transactions(30)
        for committed in (False, True):
            txn.begin_transaction()
            txn.produce("k", key=b"t", value=b"committed" if committed else b"aborted",
                        partition=0)
            (txn.commit_transaction if committed else txn.abort_transaction)(30)
        consumer = confluent_kafka.Consumer({
            "bootstrap.servers": gw.bootstrap, "group.id": "hot-readers",
            "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
        consumer.subscribe(["k"])
        got = []
        wait_for(lambda: got.extend(m.value() for m in consumer.consume(100, 0.5)
                                    if m.error() is None) or len(got) >= 501,
                 timeout=120, what="501 records")
        consumer.close()
        del producer, txn  # librdkafka's threads go before the gateway does
    assert sorted(got) == sorted([b"v%d" % i for i in range(500)] + [b"committed"])
    _, objects = _hot_files(open_log(store))
    assert objects > 0


def test_a_partition_taken_back_by_an_append_to_its_log_is_led_again(tmp_path):
    """Another process appends to a hot partition's ``_log`` at its epoch (as a
    transaction marker written elsewhere, or a Spark sink's task, does): that seals the
    gateway's journal for it. Nobody else claimed it, so the gateway claims it again on
    the next produce instead of answering not_leader for good; nothing is lost."""
    import pyarrow as pa

    url = str(tmp_path / "store")
    lg = open_log(url)
    lg.create_topic("back", {"partitions": 1})
    with GatewayProcess(url, settings={"gateway.hot.enable": "true"},
                        log_path=str(tmp_path / "gateway.log")) as gw, \
            Producer(gw.url, acks="all") as producer:
        first = [producer.send("back", b"a%d" % i, partition=0) for i in range(5)]
        producer.flush(timeout=60)
        assert [h.result(timeout=1).offset for h in first] == list(range(5))
        epoch = lg.partition("back", 0).snapshot().leader_epoch
        result = open_log(url).partition("back", 0).writer().append(
            pa.table({"value": [b"from elsewhere"]}))
        assert result.base_offset == 5
        taken = lg.partition("back", 0).snapshot()
        assert taken.hot_journal is None and taken.leader_epoch == epoch
        then = [producer.send("back", b"b%d" % i, partition=0) for i in range(5)]
        producer.flush(timeout=60)
        assert [h.result(timeout=1).offset for h in then] == list(range(6, 11))
    after = open_log(url).partition("back", 0)
    assert after.snapshot().leader_epoch > epoch  # claimed again
    assert after.read_table(0).column("value").to_pylist() == \
        [b"a%d" % i for i in range(5)] + [b"from elsewhere"] + [b"b%d" % i for i in range(5)]


class _HeldUploads:
    """A hot journal's uploads held until :meth:`release`; the ``fail``-th (from 1)
    raises as a store refusing the object would. Counts the uploads out at once."""

    def __init__(self, journal, fail: int | None = None):
        import threading

        self.gate, self.lock = threading.Event(), threading.Lock()
        self.started = self.out = self.most_out = 0
        real = journal._upload

        def held(flush) -> None:
            with self.lock:
                self.started += 1
                n = self.started
                self.out += 1
                self.most_out = max(self.most_out, self.out)
            try:
                assert self.gate.wait(60)
                if n == fail:
                    raise OSError("the store refused this object")
                real(flush)
            finally:
                with self.lock:
                    self.out -= 1

        journal._upload = held

    def release(self) -> None:
        self.gate.set()


def test_a_partition_in_several_uploads_at_once_and_a_failed_first_fails_the_rest(tmp_path):
    """An idempotent producer's three batches of one partition go out in three uploads at
    once (each planned after the ones before). The first upload fails: the two planned
    after it fail too (KAFKA_STORAGE_ERROR, retriable), nothing of them shows. The client
    retries -- the second and third before the first, as a client with five requests in
    flight may -- and every record lands once, in sequence order, with no gap; a
    duplicate retry gets the offsets already written."""
    import asyncio
    import uuid

    import pyarrow as pa

    import conf
    from ingest_gateway.errors import FlushFailed
    from ingest_gateway.server.batcher import Batcher
    from ingest_gateway.server.codec import PART_SCHEMA, Parsed
    from ingest_gateway.server.metrics import GatewayMetrics
    from log_layout.hot_writer import PredecessorFailed

    url = f"memory://sparklog-{uuid.uuid4().hex}"  # not a local store: uploads in flight
    lg = open_log(url)
    lg.create_topic("t", {"partitions": 1})
    settings = conf.load({"store.url": url, "gateway.hot.enable": "true",
                          "gateway.hot.flush.interval.ms": "0",
                          "gateway.hot.uploads.in.flight": "4"})
    pid, epoch = 7, 0

    def request(first: int, n: int = 3) -> Parsed:
        values = [b"s%d" % s for s in range(first, first + n)]
        return Parsed({0: pa.table({"key": [None] * n, "value": values,
                                    "timestamp": [None] * n, "headers": [[]] * n},
                                   schema=PART_SCHEMA)})

    async def until(condition) -> None:
        async def wait():
            while not condition():
                await asyncio.sleep(0.002)
        await asyncio.wait_for(wait(), timeout=60)

    async def scenario():
        batcher = Batcher(lg, settings.gateway, topic_defaults=settings.topic,
                          metrics=GatewayMetrics())
        try:
            await batcher.lead("t", 0)
            assert batcher.journal is not None and batcher.journal.uploads_in_flight == 4
            held = _HeldUploads(batcher.journal, fail=1)

            def produce(first: int):
                return asyncio.ensure_future(batcher.produce(
                    "t", request(first), acks=-1, producer=(pid, epoch), sequences={0: first}))

            first = []
            for i, seq in enumerate((0, 3, 6)):  # each in its own flush, the ones before held
                first.append(produce(seq))
                await until(lambda: held.started == i + 1)
            assert held.most_out == 3  # the partition is in three uploads at once
            assert len(batcher.writing("t", 0).flushing) == 3
            held.release()
            answers = [(await f)[0] for f in first]
            assert all(isinstance(a.error, FlushFailed) for a in answers)
            assert "refused this object" in str(answers[0].error)
            assert all(PredecessorFailed.__name__ in str(a.error) for a in answers[1:])
            assert lg.partition("t", 0).snapshot().next_offset == 0  # nothing half shows

            # the retries, the later ones first: held until their predecessor is in
            later = [produce(3), produce(6)]
            await asyncio.sleep(0.05)
            retried = [(await f)[0] for f in [produce(0), *later]]
            assert [(a.error, a.base_offset) for a in retried] == \
                [(None, 0), (None, 3), (None, 6)]
            again = (await produce(3))[0]  # a duplicate: the offsets already written
            assert (again.error, again.base_offset) == (None, 3)
        finally:
            await batcher.close()

    asyncio.run(scenario())
    t = open_log(url).partition("t", 0).read_table(0)
    assert t.column("offset").to_pylist() == list(range(9))
    assert t.column("value").to_pylist() == [b"s%d" % s for s in range(9)]

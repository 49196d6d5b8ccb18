"""Hostile input to the APIs issue 31 added (CreatePartitions, ElectLeaders,
DescribeLogDirs, ListTransactions, DescribeTransactions, DescribeProducers,
WriteTxnMarkers, the reassignment and ACL APIs, Produce v13, Fetch v18 with fetch sessions,
Metadata v13) against a real gateway process:

- fuzzed bodies (random, cut short, bytes flipped, huge lengths spliced in:
  ``fuzz_cases``) for every version of each, through the listener fuzzer's batches:
  the process stays alive, answers ApiVersions, stays within its RSS bound and carries a
  client's records;
- parsable but absurd values answered with Kafka's error codes on a connection that
  stays open: partition counts of -1, 0 and 2**31 - 1, negative and unknown partitions,
  unknown sessions and epochs, a regular expression that does not compile, thousands
  of unknown transactional ids, a fetch session fed more partitions than it may hold."""

from __future__ import annotations

import datetime
import importlib
import random
import uuid

import pytest

from tests.ingest_gateway.kafka import fuzz_cases
from tests.ingest_gateway.kafka import test_listener_fuzz as lf
from tests.ingest_gateway.kafka.kafka_gateway import KafkaGatewayProcess, call, connect
from log_layout import open_log

ck = pytest.importorskip("confluent_kafka")

#: (api key, lowest version fuzzed): the new APIs whole, the new versions of old ones
NEW = {37: 0, 43: 0, 35: 1, 61: 0, 65: 0, 66: 0, 27: 1, 34: 1, 45: 0, 46: 0, 29: 1, 30: 1,
       31: 1, 0: 13, 1: 18, 3: 13}
INVALID_PARTITIONS, UNKNOWN_TOPIC_OR_PARTITION = 37, 3


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    store = f"file://{tmp_path_factory.mktemp('admin-fuzz') / 'store'}"
    open_log(store).create_topic(lf.CANARY, {"partitions": 1})
    open_log(store).create_topic("t", {"partitions": 2})
    with KafkaGatewayProcess(store, settings={"gateway.request.read.timeout.ms": "2000"}) as g:
        yield g


def _cases(seed: int, per_version: int) -> list[tuple[int, int, bytes]]:
    rnd = random.Random(seed)
    out = []
    for key, low in sorted(NEW.items()):
        high = fuzz_cases.offered()[key][1]
        for version in range(low, high + 1):
            valid = fuzz_cases.valid_bodies(key, version, 3)
            out += [(key, version, fuzz_cases.mutate(rnd, rnd.choice(valid)))
                    for _ in range(per_version)]
    rnd.shuffle(out)
    return out


def test_fuzzed_bodies_of_the_new_apis_leave_the_gateway_serving(gw):
    cases = _cases(31, 20)
    rss_base = None
    for batch_no, start in enumerate(range(0, len(cases), lf.BATCH)):
        lf._send_batch(gw, cases[start:start + lf.BATCH])
        lf._still_serves(gw, batch_no, 31)
        rss = lf._rss(gw.proc.pid)
        rss_base = rss if rss_base is None else rss_base
        assert rss - rss_base < lf.RSS_GROWTH_BYTES
    lf._client_round_trip(gw, -1)


def kio(api: str, version: int):
    return importlib.import_module(f"kio.schema.{api}.v{version}.request")


def test_absurd_values_get_kafkas_codes_on_a_connection_kept_open(gw):
    cp, el = kio("create_partitions", 3), kio("elect_leaders", 2)
    dp, dt = kio("describe_producers", 0), kio("describe_transactions", 0)
    lt, ld = kio("list_transactions", 2), kio("describe_log_dirs", 4)
    five = datetime.timedelta(seconds=5)
    with connect(gw) as s:
        for n in (-1, 0, 2**31 - 1):
            _, resp = call(s, cp.CreatePartitionsRequest(topics=(cp.CreatePartitionsTopic(
                name="t", count=n, assignments=None),), timeout=five, validate_only=False), 3)
            assert [r.error_code for r in resp.results] == [INVALID_PARTITIONS], n
        _, resp = call(s, el.ElectLeadersRequest(election_type=0, topic_partitions=(
            el.TopicPartitions(topic="t", partitions=(-1, 2**31 - 1, *range(2000))),),
            timeout=five), 2)
        codes = [p.error_code for p in resp.replica_election_results[0].partition_result]
        assert codes[:2] == [UNKNOWN_TOPIC_OR_PARTITION] * 2 and set(codes[2:4]) == {84}
        assert codes[4:] == [UNKNOWN_TOPIC_OR_PARTITION] * 1998
        _, resp = call(s, dp.DescribeProducersRequest(topics=(dp.TopicRequest(
            name="t", partition_indexes=(-5, 2**31 - 1)), dp.TopicRequest(
            name="no-such", partition_indexes=(0,)))), 0)
        assert [p.error_code for t in resp.topics for p in t.partitions] == \
            [UNKNOWN_TOPIC_OR_PARTITION] * 3
        _, resp = call(s, lt.ListTransactionsRequest(
            state_filters=tuple(f"s{i}" for i in range(3000)), producer_id_filters=(-1,),
            duration_filter=-(2**63), transactional_id_pattern="(?P<x"), 2)
        assert resp.error_code == 128 and resp.transaction_states == ()
        _, resp = call(s, ld.DescribeLogDirsRequest(topics=(ld.DescribableLogDirTopic(
            topic="no-such", partitions=(0, -1)),)), 4)
        assert resp.error_code == 0 and resp.results[0].topics == ()
        # many unknown ids (kio cannot read the -1 start times: the frame is checked)
        from tests.ingest_gateway.kafka.kafka_gateway import frame, read_frame

        ids = tuple(uuid.uuid4().hex for _ in range(3000))
        s.sendall(frame(dt.DescribeTransactionsRequest(transactional_ids=ids), 0))
        assert read_frame(s).count(b"\x00\x69") >= 3000  # 105 TRANSACTIONAL_ID_NOT_FOUND
        # the connection still serves
        _, resp = call(s, cp.CreatePartitionsRequest(topics=(cp.CreatePartitionsTopic(
            name="t", count=3, assignments=None),), timeout=five, validate_only=True), 3)
        assert resp.results[0].error_code == 0


@pytest.mark.slow  # 130,000 partitions sent: ~15 s at load 18, ~40 s at load 6 (2026-11-29)
def test_fetch_sessions_refuse_forged_ids_epochs_and_floods(gw):
    from ingest_gateway.kafka.fetch_sessions import MAX_PARTITIONS
    from tests.ingest_gateway.kafka.test_fetch_sessions import _fetch

    # an incremental fetch walks its whole session: the request that brings it to 90,000
    # partitions took 18 s of the gateway (2026-11-29, load 6), over connect()'s 10 s
    with connect(gw, timeout=120) as s:
        for sid, epoch in ((-7, 1), (2**31 - 1, 2**31 - 1), (0, 5), (1, -2)):
            resp = _fetch(s, 12, "t", {0: 0}, sid, epoch)
            assert resp.error_code == 70 and resp.responses == ()  # FETCH_SESSION_ID_NOT_FOUND
        sid = _fetch(s, 12, "t", {0: 0}, 0, 0).session_id
        assert sid > 0
        # grow it past its bound in requests of 30,000 partitions each
        epoch, code = 1, 0
        for start in range(0, MAX_PARTITIONS + 30_000, 30_000):
            resp = _fetch(s, 12, "no-such", {p: 0 for p in range(start, start + 30_000)},
                          sid, epoch)
            code = resp.error_code
            if code:
                break
            epoch += 1
        assert code == 70  # closed once past the bound: the client starts again
        assert _fetch(s, 12, "t", {0: 0}, sid, epoch + 1).error_code == 70

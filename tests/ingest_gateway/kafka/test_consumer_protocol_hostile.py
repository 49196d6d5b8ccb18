"""Hostile input to KIP-848's ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69)
against a real gateway process:

- fuzzed bodies (random, cut short, bytes flipped, huge lengths spliced in:
  ``fuzz_cases``) for every version of both, through the listener fuzzer's batches: the
  process stays alive, answers ApiVersions, stays within its RSS bound and carries a
  client's records;
- parsable but absurd values answered with Kafka's error codes on one connection that
  stays open: epochs below -2 and above the member's, a first heartbeat without its
  subscription or with owned partitions, an empty or 10,000-character member id, a
  regular expression RE2 refuses or a backtracking bomb, an assignor nobody offers,
  20,000 subscribed topics, owned partitions of unknown topic ids and negative
  partitions, a describe of 3,000 groups with bad names among them; commits and offset fetches with a stale epoch
  (STALE_MEMBER_EPOCH), a KIP-848 member's commit below v9 (UNSUPPORTED_VERSION).
"""

from __future__ import annotations

import datetime
import random
import uuid

import pytest
from kio.schema.consumer_group_describe.v1 import request as cgd
from kio.schema.consumer_group_heartbeat.v1 import request as cgh

from log_layout import open_log
from tests.ingest_gateway.kafka import fuzz_cases
from tests.ingest_gateway.kafka import test_listener_fuzz as lf
from tests.ingest_gateway.kafka.kafka_gateway import KafkaGatewayProcess, call, connect

NONE, INVALID_REQUEST, UNKNOWN_MEMBER_ID = 0, 42, 25
GROUP_ID_NOT_FOUND, INVALID_GROUP_ID = 69, 24
FENCED_MEMBER_EPOCH, UNSUPPORTED_ASSIGNOR, STALE_MEMBER_EPOCH = 110, 112, 113
UNSUPPORTED_VERSION, INVALID_REGULAR_EXPRESSION = 35, 128
REBALANCE = datetime.timedelta(seconds=30)


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    store = f"file://{tmp_path_factory.mktemp('kip848-fuzz') / 'store'}"
    open_log(store).create_topic(lf.CANARY, {"partitions": 1})
    open_log(store).create_topic("t", {"partitions": 4})
    with KafkaGatewayProcess(store, settings={"gateway.request.read.timeout.ms": "2000"}) as g:
        yield g


def test_fuzzed_bodies_leave_the_gateway_serving(gw):
    rnd = random.Random(848)
    cases = []
    for key in (68, 69):
        low, high = fuzz_cases.offered()[key]
        for version in range(low, high + 1):
            valid = fuzz_cases.valid_bodies(key, version, 4)
            cases += [(key, version, fuzz_cases.mutate(rnd, rnd.choice(valid)))
                      for _ in range(150)]
    rnd.shuffle(cases)
    rss_base = None
    for batch_no, start in enumerate(range(0, len(cases), lf.BATCH)):
        lf._send_batch(gw, cases[start:start + lf.BATCH])
        lf._still_serves(gw, batch_no, 848)
        rss = lf._rss(gw.proc.pid)
        rss_base = rss if rss_base is None else rss_base
        assert rss - rss_base < lf.RSS_GROWTH_BYTES
    lf._client_round_trip(gw, -1)


def beat(s, member_id: str, epoch: int, *, group: str = "hostile", version: int = 1,
         topics=("t",), owned=(), **kw):
    req = cgh.ConsumerGroupHeartbeatRequest(
        group_id=group, member_id=member_id, member_epoch=epoch,
        rebalance_timeout=kw.pop("rebalance", REBALANCE), subscribed_topic_names=topics,
        topic_partitions=owned, **kw)
    return call(s, req, version)[1]


def commit(s, member_id: str, epoch: int, version: int) -> int:
    from importlib import import_module

    oc = import_module(f"kio.schema.offset_commit.v{version}.request")
    req = oc.OffsetCommitRequest(
        group_id="hostile", generation_id_or_member_epoch=epoch, member_id=member_id,
        group_instance_id=None, topics=(oc.OffsetCommitRequestTopic(name="t", partitions=(
            oc.OffsetCommitRequestPartition(partition_index=0, committed_offset=0,
                                            committed_metadata=""),)),))
    return call(s, req, version)[1].topics[0].partitions[0].error_code


def fetch(s, member_id: str, epoch: int):
    from kio.schema.offset_fetch.v9 import request as of

    req = of.OffsetFetchRequest(groups=(of.OffsetFetchRequestGroup(
        group_id="hostile", member_id=member_id, member_epoch=epoch,
        topics=(of.OffsetFetchRequestTopics(name="t", partition_indexes=(0,)),)),),
        require_stable=True)
    return call(s, req, 9)[1].groups[0]


def test_absurd_heartbeats_get_kafkas_codes_on_a_connection_kept_open(gw):
    tid = uuid.uuid4()
    with connect(gw) as s:
        assert beat(s, "m1", -5).error_code == INVALID_REQUEST
        assert beat(s, "m1", 7).error_code == UNKNOWN_MEMBER_ID  # never joined
        assert beat(s, "", 0).error_code == INVALID_REQUEST  # v1: the client names itself
        assert beat(s, "x" * 10_000, 0).error_code == INVALID_REQUEST
        assert beat(s, "m1", 0, topics=None).error_code == INVALID_REQUEST
        assert beat(s, "m1", 0, owned=None).error_code == INVALID_REQUEST
        owned = (cgh.TopicPartitions(topic_id=tid, partitions=(0,)),)
        assert beat(s, "m1", 0, owned=owned).error_code == INVALID_REQUEST
        for bad in ("(?P<x", "a" * 5000, "\\p{Nope}"):  # RE2 refuses; the length bound
            assert beat(s, "m1", 0, subscribed_topic_regex=bad).error_code \
                == INVALID_REGULAR_EXPRESSION, bad
        # linear time whatever the pattern (RE2): a backtracking bomb answers at once
        assert beat(s, "bomb", 0, topics=None, subscribed_topic_regex="(a*)*b" * 50,
                    group="hostile-bomb").error_code == NONE
        assert beat(s, "m1", 0, server_assignor="sticky").error_code == UNSUPPORTED_ASSIGNOR
        many = tuple(f"topic-{i}" for i in range(20_000))
        assert beat(s, "m1", 0, topics=many).error_code == INVALID_REQUEST
        assert beat(s, "m1", 0, group="bad/name").error_code == INVALID_GROUP_ID
        # a real member, then forged epochs and owned partitions nobody has
        joined = beat(s, "m1", 0)
        assert joined.error_code == NONE and joined.member_epoch > 0
        epoch = joined.member_epoch
        assert {p for t in joined.assignment.topic_partitions for p in t.partitions} \
            == {0, 1, 2, 3}
        assert beat(s, "m1", epoch + 5, topics=None, owned=None).error_code \
            == FENCED_MEMBER_EPOCH
        second = beat(s, "m2", 0)  # a new group epoch: m2 joins at it
        assert second.error_code == NONE and second.member_epoch > epoch
        assert beat(s, "m2", second.member_epoch - 1, topics=None, owned=None).error_code \
            == FENCED_MEMBER_EPOCH
        # commits and fetches carry the member epoch (OffsetCommit v9, OffsetFetch v9)
        m2 = second.member_epoch
        assert commit(s, "m2", m2 + 1, 9) == STALE_MEMBER_EPOCH
        assert commit(s, "m2", m2, 8) == UNSUPPORTED_VERSION  # Kafka: v9+ for KIP-848
        assert commit(s, "m2", m2, 9) == NONE
        assert fetch(s, "m2", m2 + 3).error_code == STALE_MEMBER_EPOCH
        assert fetch(s, "nobody", 1).error_code == UNKNOWN_MEMBER_ID
        got = fetch(s, "m2", m2)
        assert got.error_code == NONE
        assert [(t.name, p.partition_index, p.committed_offset) for t in got.topics
                for p in t.partitions] == [("t", 0, 0)]
        junk = (cgh.TopicPartitions(topic_id=tid, partitions=(-1, 2**31 - 1)),
                cgh.TopicPartitions(topic_id=None, partitions=tuple(range(5000))))
        ok = beat(s, "m1", epoch, topics=None, owned=junk)
        # its owned list names none of its partitions: it revoked them all, so it moves on
        assert ok.error_code == NONE and ok.member_epoch == second.member_epoch
        # describe: many groups, bad names among them, each answered
        names = tuple(f"g{i}" for i in range(3000)) + ("bad/name", "", "hostile")
        _, resp = call(s, cgd.ConsumerGroupDescribeRequest(
            group_ids=names, include_authorized_operations=True), 1)
        codes = [g.error_code for g in resp.groups]
        assert codes[:3000] == [GROUP_ID_NOT_FOUND] * 3000
        assert codes[3000:3002] == [INVALID_GROUP_ID] * 2 and codes[-1] == NONE
        assert sorted(m.member_id for m in resp.groups[-1].members) == ["m1", "m2"]
        assert resp.groups[-1].authorized_operations > 0  # asked for: every one (no ACLs)
        # leaving works on the same connection
        assert beat(s, "m1", -1, topics=None, owned=None).error_code == NONE

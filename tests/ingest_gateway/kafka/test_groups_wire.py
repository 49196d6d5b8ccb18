"""The group APIs' refusals, over a raw socket with kio-built requests (what a client
library would not send): a non-``consumer`` protocol type, unparsable subscription
bytes, no common strategy, an unknown member, a transaction coordinator lookup; and
the consumer protocol's bytes themselves."""

from __future__ import annotations

import dataclasses
import itertools
import datetime
import io
import socket
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from ingest_gateway.kafka.groups_protocol import (BadSubscription, encode_assignment,
                                                  encode_subscription, parse_assignment,
                                                  parse_subscription)
from tests.ingest_gateway.kafka.test_groups import TOPIC, gateway  # noqa: F401 - fixture

MS = datetime.timedelta(milliseconds=1)


class RawClient:
    """One Kafka connection speaking kio's typed bodies (header v1, or v2 when flexible)."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.correlation = 0

    def call(self, api_key: int, version: int, **fields):
        cls = load_request_schema(api_key, version)
        mod = __import__(cls.__module__, fromlist=["x"])
        fields = {k: v for k, v in fields.items()
                  if k in {f.name for f in dataclasses.fields(cls)}}
        body = io.BytesIO()
        entity_writer(cls)(body, cls(**_nested(mod, cls, fields)))
        self.correlation += 1
        head = struct.pack(">hhih", api_key, version, self.correlation, 1) + b"t"
        if cls.__flexible__:
            head += b"\0"
        frame = head + body.getvalue()
        self.sock.sendall(struct.pack(">i", len(frame)) + frame)
        size = struct.unpack(">i", self._read(4))[0]
        data = self._read(size)
        assert struct.unpack_from(">i", data)[0] == self.correlation
        resp = load_response_schema(api_key, version)
        pos = 5 if resp.__flexible__ else 4
        return entity_reader(resp)(data, pos)[0]

    def _read(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            assert chunk, "the gateway closed the connection"
            buf += chunk
        return buf

    def close(self) -> None:
        self.sock.close()


def _nested(mod, cls, fields):
    """JoinGroup protocols given as (name, metadata) pairs."""
    if "protocols" in fields:
        fields["protocols"] = tuple(mod.JoinGroupRequestProtocol(name=n, metadata=m)
                                    for n, m in fields["protocols"])
    return fields


@pytest.fixture
def client(gateway):  # noqa: F811 - the fixture imported above
    c = RawClient(gateway.kafka_port)
    yield c
    c.close()


def join(client, protocol_type="consumer", protocols=(("range", None),), member_id="",
         group="raw"):
    protocols = tuple((n, encode_subscription([TOPIC]) if m is None else m)
                      for n, m in protocols)
    return client.call(11, 7, group_id=group, session_timeout=10_000 * MS,
                       rebalance_timeout=10_000 * MS, member_id=member_id,
                       group_instance_id=None, protocol_type=protocol_type,
                       protocols=protocols)


def test_join_refusals(client):
    assert join(client, protocol_type="connect").error_code.value == 23
    assert join(client, protocols=(("range", b"\x00\x01garbage"),)).error_code.value == 23
    assert join(client, protocols=(("my-own-assignor", None),)).error_code.value == 23
    assert join(client, member_id="nobody").error_code.value == 25  # UNKNOWN_MEMBER_ID


def test_a_subscription_naming_a_missing_topic_joins_with_the_others(client):
    joined = join(client, protocols=(("range", encode_subscription([TOPIC, "missing"])),))
    assert joined.error_code.value == 0
    synced = client.call(14, 5, group_id="raw", generation_id=joined.generation_id,
                         member_id=joined.member_id, group_instance_id=None,
                         protocol_type="consumer", protocol_name="range", assignments=())
    assert sorted(parse_assignment(synced.assignment)) == [(TOPIC, p) for p in range(4)]
    left = client.call(13, 0, group_id="raw", member_id=joined.member_id)
    assert left.error_code.value == 0
    only_missing = join(client, protocols=(("range", encode_subscription(["missing"])),))
    assert only_missing.error_code.value == 3  # UNKNOWN_TOPIC_OR_PARTITION


def test_join_sync_heartbeat_commit_fetch_leave(client):
    joined = join(client, protocols=(("roundrobin", None), ("range", None)))
    assert joined.error_code.value == 0
    assert joined.protocol_name == "roundrobin" and joined.leader != joined.member_id
    me, gen = joined.member_id, joined.generation_id
    synced = client.call(14, 5, group_id="raw", generation_id=gen, member_id=me,
                         group_instance_id=None, protocol_type="consumer",
                         protocol_name="roundrobin", assignments=())
    assert synced.error_code.value == 0
    assert sorted(parse_assignment(synced.assignment)) == [(TOPIC, p) for p in range(4)]
    hb = client.call(12, 4, group_id="raw", generation_id=gen, member_id=me,
                     group_instance_id=None)
    assert hb.error_code.value == 0
    stale = client.call(12, 4, group_id="raw", generation_id=gen - 1, member_id=me,
                        group_instance_id=None)
    assert stale.error_code.value == 22  # ILLEGAL_GENERATION: rejoin
    unknown = client.call(12, 4, group_id="raw", generation_id=gen, member_id="x",
                          group_instance_id=None)
    assert unknown.error_code.value == 25
    mod = __import__(load_request_schema(8, 8).__module__, fromlist=["x"])
    commit = client.call(8, 8, group_id="raw", generation_id_or_member_epoch=gen,
                         member_id=me, group_instance_id=None, topics=(
                             mod.OffsetCommitRequestTopic(name=TOPIC, partitions=(
                                 mod.OffsetCommitRequestPartition(
                                     partition_index=1, committed_offset=7,
                                     committed_leader_epoch=-1, committed_metadata=None),)),))
    assert [p.error_code.value for t in commit.topics for p in t.partitions] == [0]
    fmod = __import__(load_request_schema(9, 7).__module__, fromlist=["x"])
    fetched = client.call(9, 7, group_id="raw", require_stable=False, topics=(
        fmod.OffsetFetchRequestTopic(name=TOPIC, partition_indexes=(0, 1)),))
    assert [(p.partition_index, p.committed_offset) for t in fetched.topics
            for p in t.partitions] == [(0, -1), (1, 7)]
    lmod = __import__(load_request_schema(13, 5).__module__, fromlist=["x"])
    left = client.call(13, 5, group_id="raw", members=(
        lmod.MemberIdentity(member_id=me, group_instance_id=None, reason=None),
        lmod.MemberIdentity(member_id="nobody", group_instance_id=None, reason=None)))
    assert [m.error_code.value for m in left.members] == [0, 25]


def test_find_coordinator(client, gateway):  # noqa: F811
    found = client.call(10, 4, key_type=0, coordinator_keys=("raw", "bad group!"))
    assert [(c.error_code.value, c.port) for c in found.coordinators] == \
        [(0, gateway.kafka_port), (24, -1)]
    old = client.call(10, 3, key="raw", key_type=0)
    assert (old.error_code.value, old.port) == (0, gateway.kafka_port)
    txn = client.call(10, 3, key="my-txn", key_type=1)  # a transactional id: txn.py
    assert (txn.error_code.value, txn.port) == (0, gateway.kafka_port)


def test_subscription_bytes():
    java_v3 = (struct.pack(">hi", 3, 2) + struct.pack(">h", 1) + b"a"
               + struct.pack(">h", 2) + b"bc" + struct.pack(">i", -1)
               + struct.pack(">i", 0) + struct.pack(">i", 5) + struct.pack(">h", -1))
    assert parse_subscription(java_v3) == ("a", "bc")
    assert parse_subscription(encode_subscription(["x", "y"])) == ("x", "y")
    for bad in (b"", b"\x00", struct.pack(">hi", 0, 2**31 - 1),
                struct.pack(">hih", 0, 1, 50) + b"ab", struct.pack(">hih", 0, 1, 1) + b"\xff"):
        with pytest.raises(BadSubscription):
            parse_subscription(bad)
    pairs = [("t", 3), ("t", 1), ("u", 0)]
    assert sorted(parse_assignment(encode_assignment(pairs))) == sorted(pairs)


int32 = st.integers(-2**31, 2**31 - 1)
FRESH = itertools.count()
timeouts = st.one_of(st.sampled_from([-2**31, -1, 0, 1]), st.integers(900, 2000))
names = st.one_of(st.sampled_from(["fuzz", "fuzz-2", TOPIC]),
                  st.sampled_from(["", "bad group!", ".", "x" * 300]), st.text(max_size=20))


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_hostile_field_values_get_error_codes(client, data):
    """Whatever the fields hold, an answer with a known Kafka code (never
    UNKNOWN_SERVER_ERROR, never a closed connection)."""
    group, member = data.draw(names), data.draw(st.one_of(st.just(""), names))
    api = data.draw(st.sampled_from(["join", "sync", "heartbeat", "commit", "fetch", "leave"]))
    generations = int32
    if api == "join" and data.draw(st.booleans()):  # a valid join, then other APIs on it
        group = f"fuzz-{next(FRESH)}"  # its own group: no join waits on another's member
        joined = join(client, group=group)
        assert joined.error_code.value == 0
        member, generations = joined.member_id, st.one_of(st.just(joined.generation_id), int32)
        api = data.draw(st.sampled_from(["sync", "heartbeat", "commit", "leave"]))
    if api == "join":
        # timeouts past 2 s would be honoured: a join waiting on an earlier example's
        # member (which never rejoins) would wait that long
        r = client.call(11, 7, group_id=group, session_timeout=data.draw(timeouts) * MS,
                        rebalance_timeout=data.draw(timeouts) * MS, member_id=member,
                        group_instance_id=None, protocol_type="consumer",
                        protocols=((data.draw(st.sampled_from(["range", "sticky", "?"])),
                                    data.draw(st.one_of(
                                        st.just(encode_subscription([TOPIC])),
                                        st.just(encode_subscription([TOPIC, "x", ""])),
                                        st.binary(max_size=30)))),))
        codes_ = [r.error_code.value]
    elif api in ("sync", "heartbeat"):
        fields = dict(group_id=group, generation_id=data.draw(generations), member_id=member,
                      group_instance_id=None)
        r = client.call(14, 5, protocol_type="consumer", protocol_name="range",
                        assignments=(), **fields) if api == "sync" else \
            client.call(12, 4, **fields)
        codes_ = [r.error_code.value]
    elif api == "commit":
        mod = __import__(load_request_schema(8, 8).__module__, fromlist=["x"])
        r = client.call(8, 8, group_id=group,
                        generation_id_or_member_epoch=data.draw(generations),
                        member_id=member, group_instance_id=None, topics=(
                            mod.OffsetCommitRequestTopic(name=data.draw(names), partitions=(
                                mod.OffsetCommitRequestPartition(
                                    partition_index=data.draw(int32),
                                    committed_offset=data.draw(st.integers(-2**63, 2**63 - 1)),
                                    committed_leader_epoch=-1,
                                    committed_metadata=data.draw(st.text(max_size=5000))),)),))
        codes_ = [p.error_code.value for t in r.topics for p in t.partitions]
    elif api == "fetch":
        fmod = __import__(load_request_schema(9, 7).__module__, fromlist=["x"])
        r = client.call(9, 7, group_id=group, require_stable=False, topics=(
            fmod.OffsetFetchRequestTopic(name=data.draw(names),
                                         partition_indexes=(data.draw(int32),)),))
        codes_ = [r.error_code.value]
    else:
        r = client.call(13, 0, group_id=group, member_id=member)
        codes_ = [r.error_code.value]
    assert -1 not in codes_, (api, codes_)

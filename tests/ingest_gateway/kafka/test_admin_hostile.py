"""Hostile input to the admin APIs of ``admin_configs``, ``admin_records`` and
``admin_brokers`` (a real gateway process): every offered version's request cut short
or grown with bad lengths closes the connection, and parsable but absurd values get
typed error codes; the gateway answers the next client either way."""

from __future__ import annotations

import importlib
import socket
import struct
import uuid

import pytest

from ingest_gateway.kafka.wire import make
from tests.ingest_gateway.kafka.kafka_gateway import call, connect, frame, read_frame

pytest.importorskip("kio")

API_VERSIONS = {32: (1, 4), 33: (0, 2), 44: (0, 1), 21: (0, 2), 23: (2, 4), 60: (0, 1)}
NAMES = {32: "describe_configs", 33: "alter_configs", 44: "incremental_alter_configs",
         21: "delete_records", 23: "offset_for_leader_epoch", 60: "describe_cluster"}
#: the topic the requests name: the module's own on the session's shared gateway
TOPIC = f"hostile-{uuid.uuid4().hex[:8]}"


def _request(key: int, version: int, topic: str = TOPIC, partition: int = 0, offset: int = 0):
    m = importlib.import_module(f"kio.schema.{NAMES[key]}.v{version}.request")
    if key == 32:
        return make(m.DescribeConfigsRequest, resources=(make(
            m.DescribeConfigsResource, resource_type=2, resource_name=topic,
            configuration_keys=None),), include_synonyms=False, include_documentation=False)
    if key in (33, 44):
        cfg = make(m.AlterableConfig, name="retention.ms", config_operation=0, value="1000")
        cls = m.AlterConfigsRequest if key == 33 else m.IncrementalAlterConfigsRequest
        return make(cls, resources=(make(m.AlterConfigsResource, resource_type=2,
                                         resource_name=topic, configs=(cfg,)),),
                    validate_only=True)
    if key == 21:
        import datetime
        return make(m.DeleteRecordsRequest, topics=(make(m.DeleteRecordsTopic, name=topic,
                    partitions=(make(m.DeleteRecordsPartition, partition_index=partition,
                                     offset=offset),)),),
                    timeout=datetime.timedelta(seconds=1))
    if key == 23:
        return make(m.OffsetForLeaderEpochRequest, replica_id=-1, topics=(make(
            m.OffsetForLeaderTopic, topic=topic, partitions=(make(
                m.OffsetForLeaderPartition, partition=partition, leader_epoch=offset,
                current_leader_epoch=-1),)),))
    return make(m.DescribeClusterRequest, include_cluster_authorized_operations=False)


def _closed(gw, data: bytes) -> bool:
    """Whether the gateway closes the connection on ``data`` (no answer)."""
    with connect(gw) as s:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        return read_frame(s) is None


def _alive(gw) -> None:
    from kio.schema.api_versions.v3.request import ApiVersionsRequest
    with connect(gw) as s:
        req = ApiVersionsRequest(client_software_name="t", client_software_version="1")
        assert call(s, req, 3)[1].error_code == 0


@pytest.mark.parametrize("key", sorted(API_VERSIONS))
def test_truncated_and_overlong_requests_close_the_connection(kafka_gateway, kafka_log, key):
    if TOPIC not in kafka_log.topics():
        kafka_log.create_topic(TOPIC, {"partitions": 1})
    low, high = API_VERSIONS[key]
    for version in range(low, high + 1):
        req = _request(key, version)
        payload = frame(req, version)[4:]
        # api key, version, correlation id, client id "raw"; a tag count when flexible
        header = 10 + len("raw") + (1 if type(req).__flexible__ else 0)
        for cut in sorted({header, (header + len(payload)) // 2, len(payload) - 1}):
            if key == 60 and cut >= len(payload) - 1:
                continue  # DescribeCluster's last byte may be a tag count kio does not need
            part = payload[:cut]
            assert _closed(kafka_gateway, struct.pack(">i", len(part)) + part), (key, version, cut)
        # an array length of 2**31-1 elements where a short array was
        grown = payload[:header] + b"\x7f\xff\xff\xff" + payload[header + 4:]
        _closed(kafka_gateway, struct.pack(">i", len(grown)) + grown)
    _alive(kafka_gateway)


def test_absurd_values_get_typed_codes(kafka_gateway, kafka_log):
    if TOPIC not in kafka_log.topics():
        kafka_log.create_topic(TOPIC, {"partitions": 1})
    long_name = "x" * 10_000
    with connect(kafka_gateway) as s:
        described = call(s, _request(32, 4, topic=long_name), 4)[1].results[0]
        assert described.error_code == 17 and described.configs == ()
        deleted = call(s, _request(21, 2, offset=-5), 2)[1].topics[0].partitions[0]
        assert (deleted.error_code, deleted.low_watermark) == (1, -1)
        deleted = call(s, _request(21, 2, partition=-1), 2)[1].topics[0].partitions[0]
        assert deleted.error_code == 3
        epoch = call(s, _request(23, 4, offset=2**31 - 1), 4)[1].topics[0].partitions[0]
        assert (epoch.error_code, epoch.leader_epoch, epoch.end_offset) == (0, -1, -1)
        epoch = call(s, _request(23, 4, partition=-1), 4)[1].topics[0].partitions[0]
        assert epoch.error_code == 3
    assert kafka_log.partition(TOPIC, 0).snapshot(refresh=True).log_start_offset == 0

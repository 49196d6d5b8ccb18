"""The store's HDFS credentials as Hadoop's Java client takes them
(``log_layout.hadoop_client``): the token string's format both ways, the RPC copy's
kind and service, and a bad token refused without being printed. Spark acting as that
user on a real HDFS: tests/pipeline/test_spark_hdfs_user.py."""

from __future__ import annotations

import base64

import pytest

from conf.errors import ConfigError
from log_layout.hadoop_client import (HDFS_TOKEN_KIND, _vint, decode_token, encode_token,
                                      hadoop_environment, rpc_services)

#: a token as a MiniDFSCluster's WebHDFS GETDELEGATIONTOKEN issued it to alice
WEBHDFS_TOKEN = ("HgAFYWxpY2UFYWxpY2UAigGiFt6cqIoBojrrIKgBAhT9LN703nKiM0VvI8XE8jrM7IH9zhJXRUJ"
                 "IREZTIGRlbGVnYXRpb24PMTI3LjAuMC4xOjMzMTU1")


def test_a_webhdfs_token_decodes_and_encodes_back_to_itself():
    identifier, password, kind, service = decode_token(WEBHDFS_TOKEN)
    assert (len(identifier), len(password)) == (30, 20)  # 20: HMAC-SHA1
    assert b"alice" in identifier
    assert (kind, service) == ("WEBHDFS delegation", "127.0.0.1:33155")
    assert encode_token(identifier, password, kind, service) == WEBHDFS_TOKEN


@pytest.mark.parametrize("n", [0, 1, 127, 128, 255, 256, 65_535, 70_000])
def test_lengths_past_one_byte_round_trip(n):
    """Hadoop's vint: one byte up to 127, else -112-k and k bytes (WritableUtils)."""
    assert _vint(127) == b"\x7f" and _vint(128) == b"\x8f\x80" and _vint(256) == b"\x8e\x01\x00"
    identifier = bytes(range(256)) * (n // 256) + bytes(n % 256)
    token = encode_token(identifier, b"pw", "k", "s")
    assert decode_token(token) == (identifier, b"pw", "k", "s")


def test_the_environment_has_the_user_and_both_tokens():
    env = hadoop_environment(user="alice", token=WEBHDFS_TOKEN,
                             store_url="hdfs://127.0.0.1:8020/logs",
                             locations=["hdfs://127.0.0.1:8020/tables", None,
                                        "hdfs://10.0.0.9:8020/elsewhere", "s3://b/t"])
    assert env["HADOOP_USER_NAME"] == "alice"
    given, rpc = env["HADOOP_TOKEN"].split(",")
    assert given == WEBHDFS_TOKEN
    identifier, password, _, _ = decode_token(WEBHDFS_TOKEN)
    # another NameNode's URL gets no copy: the token is the store's NameNode's
    assert decode_token(rpc) == (identifier, password, HDFS_TOKEN_KIND, "127.0.0.1:8020")
    assert hadoop_environment(user="", token="", store_url="hdfs://nn:8020/x") == {}


def test_rpc_services_as_hadoop_names_them():
    assert rpc_services("hdfs://localhost:9000/x") == ["127.0.0.1:9000", "localhost:9000"]
    # a nameservice (no port, not a host here): Hadoop's logical token service
    assert rpc_services("hdfs://prod-ns.invalid/x") == ["ha-hdfs:prod-ns.invalid",
                                                        "prod-ns.invalid:8020"]
    # a webhdfs:// store: the RPC address comes from the hdfs:// tables on its host
    assert rpc_services("webhdfs://127.0.0.1:9870/x", ["hdfs://127.0.0.1:8020/t"]) == \
        ["127.0.0.1:8020"]
    assert rpc_services("webhdfs://127.0.0.1:9870/x") == []
    assert rpc_services("s3://bucket/x", ["hdfs://127.0.0.1:8020/t"]) == []


@pytest.mark.parametrize("bad", ["not a token!", base64.urlsafe_b64encode(b"\x05ab").decode(),
                                 WEBHDFS_TOKEN + "AAAA", "////"])
def test_a_bad_token_is_refused_naming_the_key_not_the_value(bad):
    with pytest.raises(ConfigError) as refused:
        hadoop_environment(user="", token=bad, store_url="hdfs://127.0.0.1:8020/x")
    assert refused.value.key == "store.hdfs.delegation.token"
    assert bad not in str(refused.value)

"""``kafka.bounds``: every declared length is checked against the frame before kio reads it.

Valid requests of every (API, version) offered pass the check; each length kind that
lies is refused naming its field; and hostile bodies (the kept crashes first) are
decoded by the listener's own ``parse_request`` in a child process, where a native
abort shows as the child's death instead of killing the test run.
"""

from __future__ import annotations

import io
import os
import pickle
import struct
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest_gateway.errors import ProtocolError
from ingest_gateway.kafka import bounds
from jobs.gateway_process import ROOT
from tests.ingest_gateway.kafka import fuzz_cases

pytest.importorskip("kio")

from kio.index import load_request_schema  # noqa: E402
from kio.serial import entity_reader, entity_writer  # noqa: E402
from kio.static.primitive import Records  # noqa: E402

st.register_type_strategy(Records, st.binary(max_size=64))


@pytest.mark.parametrize("api_key,version", fuzz_cases.pairs())
def test_every_valid_request_passes(api_key, version):
    cls = load_request_schema(api_key, version)

    def encode(request) -> bytes:
        buf = io.BytesIO()
        entity_writer(cls)(buf, request)
        return buf.getvalue()

    @settings(max_examples=6, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(st.from_type(cls))
    def roundtrip(request):
        data = encode(request)
        bounds.check_body(cls, data, 0)
        # what kio reads back encodes to the same bytes (times are written in whole ms,
        # so the request itself may not compare equal)
        assert encode(entity_reader(cls)(data, 0)[0]) == data

    roundtrip()


def _refused(api_key: int, version: int, body: bytes, field: str) -> str:
    with pytest.raises(ProtocolError) as e:
        bounds.check_body(load_request_schema(api_key, version), body, 0)
    assert field in str(e.value), str(e.value)
    return str(e.value)


def test_a_huge_compact_array_is_refused_before_kio_sees_it():
    # Metadata v12, topics: a five-byte varint of 3.5 billion (the gateway-killer)
    message = _refused(3, 12, b"\x8d\xe3\xda\x97\x0d" + bytes(12), "MetadataRequest.topics")
    assert "3,539,382,668 items" in message


def test_each_kind_of_length_is_checked():
    _refused(3, 4, struct.pack(">i", 2**31 - 1) + bytes(8), "MetadataRequest.topics")
    _refused(3, 4, struct.pack(">i", -2), "MetadataRequest.topics")
    # a legacy string longer than the frame; a null where the schema allows none
    _refused(3, 4, struct.pack(">ih", 1, 500) + b"abc", "MetadataRequestTopic.name")
    _refused(3, 4, struct.pack(">ih", 1, -1) + b"\0", "MetadataRequestTopic.name")
    # a compact string longer than the frame (v12: topic_id then name)
    _refused(3, 12, b"\x02" + bytes(16) + b"\x90\x03abc", "MetadataRequestTopic.name")
    # a varint of six bytes, and one above 2**32 - 1
    _refused(3, 12, b"\xff\xff\xff\xff\xff\x01", "MetadataRequest.topics")
    _refused(3, 12, b"\xff\xff\xff\xff\x7f", "MetadataRequest.topics")
    # Produce v3: records (int32 length) longer than the frame
    produce = (struct.pack(">h", -1) + struct.pack(">hi", 1, 1000) + struct.pack(">i", 1)
               + struct.pack(">h", 1) + b"t" + struct.pack(">i", 1) + struct.pack(">i", 0)
               + struct.pack(">i", 1 << 30) + b"x")
    _refused(0, 3, produce, "records")
    # a tagged field whose size runs past the frame (Metadata v12 with no topics)
    _refused(3, 12, b"\x01\x00\x00\x01\x00\x7f", "tagged fields")


def _decode_in_child(cases: list, tmp_path) -> tuple[int, int]:
    """Decode ``cases`` in a child process; (parsed, refused). Fails naming the case and
    its bytes if the child dies."""
    path = tmp_path / "cases.pickle"
    path.write_bytes(pickle.dumps(cases))
    proc = subprocess.run([sys.executable, "-m", "tests.ingest_gateway.kafka.decode_child",
                           str(path)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    lines = proc.stdout.split()
    if proc.returncode != 0:
        last = [line for line in proc.stdout.splitlines() if line.startswith("case ")]
        case = cases[int(last[-1].split()[1])] if last else None
        pytest.fail(f"the decoder died ({proc.returncode}) on {case and case[:2]} body "
                    f"{case and case[2].hex()}: {proc.stderr[-2000:]}")
    assert lines[-3] == "done"
    return int(lines[-2]), int(lines[-1])


def test_the_kept_crashes_are_refused(tmp_path):
    kept = fuzz_cases.crashes()
    assert len(kept) >= 30
    parsed, refused = _decode_in_child(kept, tmp_path)
    assert (parsed, refused) == (0, len(kept))


@pytest.mark.parametrize("seed", [1, 2])
def test_hostile_bodies_never_kill_the_decoder(seed, tmp_path):
    # 1,000 bodies a seed in the inner loop (make test-fast); the slow run below decodes 40,000
    count = int(os.environ.get("SPARKLOG_KAFKA_FUZZ_CASES", "1000"))
    cases = list(fuzz_cases.cases(seed, count))
    parsed, refused = _decode_in_child(cases, tmp_path)
    assert parsed + refused == len(cases)
    assert refused > len(cases) // 4  # the hostile ones are refused, not all parsed


@pytest.mark.slow
def test_many_hostile_bodies_never_kill_the_decoder(tmp_path):
    count = int(os.environ.get("SPARKLOG_KAFKA_FUZZ_CASES_SLOW", "40000"))
    cases = list(fuzz_cases.cases(1000, count))
    parsed, refused = _decode_in_child(cases, tmp_path)
    assert parsed + refused == len(cases)

"""Hostile record batch bytes: every input decodes or raises a KafkaRecordsError (with a
Kafka error code), never another exception, a crash or unbounded memory.

Not collected by itself: ``test_records_fuzz.py`` runs this module in a child pytest,
so an abort in native code (the compiled record codec, aiokafka's reader, cramjam's
decompressors) fails that test instead of killing the run.

Mutations are applied to valid batches in every codec and the CRC is recomputed
afterwards in half the cases, so the fuzz reaches the decompressors and the record
reader rather than stopping at the checksum.
"""

from __future__ import annotations

import os
import struct
import tracemalloc

import crc32c
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest_gateway.kafka.records import CODECS, KafkaRecordsError, decode_batches, encode_batch
from log_layout.segment_schema import HEADER_TYPE

MAX_BYTES = 1 << 20
EXAMPLES = int(os.environ.get("SPARKLOG_RECORDS_FUZZ_EXAMPLES", "300"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])


def _seed_batches() -> list[bytes]:
    table = pa.table({
        "key": pa.array([None, b"k1", b"key-two"], pa.binary()),
        "value": pa.array([b"v" * 40, None, b"\x00\xff" * 9], pa.binary()),
        "timestamp": pa.array([10, 20, 30], pa.int64()),
        "headers": pa.array([[{"key": "h", "value": b"x"}], None,
                             [{"key": "n", "value": None}]], HEADER_TYPE)})
    return [encode_batch(table, base_offset=0, codec=c, producer_id=1, producer_epoch=0,
                         base_sequence=0) for c in CODECS]


SEEDS = _seed_batches()
EDGES = (0, 1, -1, 0x7F, 0x80, 0xFF, 2**31 - 1, -2**31)


def _recrc(buf: bytearray) -> bytes:
    if len(buf) >= 21:
        struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))
    return bytes(buf)


def _decode_or_typed_error(data: bytes) -> None:
    try:
        batches = decode_batches(data, max_bytes=MAX_BYTES)
    except KafkaRecordsError as e:
        assert e.error_code in (2, 10, 32, 35, 76)
        return
    for b in batches:  # what decodes is a consistent table
        assert b.table.num_rows == len(b.offset_deltas) > 0
        b.table.validate(full=True)


@st.composite
def mutated(draw) -> bytes:
    buf = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "byte", "int32", "truncate", "insert", "delete"]))
        at = draw(st.integers(0, len(buf) - 1)) if buf else 0
        if kind == "flip" and buf:
            buf[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "byte" and buf:
            buf[at] = draw(st.integers(0, 255))
        elif kind == "int32" and len(buf) >= at + 4:
            struct.pack_into(">i", buf, at, draw(st.sampled_from(EDGES)))
        elif kind == "truncate":
            del buf[at:]
        elif kind == "insert":
            buf[at:at] = draw(st.binary(min_size=1, max_size=12))
        elif kind == "delete":
            del buf[at:at + draw(st.integers(1, 12))]
    return _recrc(buf) if draw(st.booleans()) else bytes(buf)


@SETTINGS
@given(mutated())
def test_mutated_batches(data):
    _decode_or_typed_error(data)


@SETTINGS
@given(st.binary(max_size=200))
def test_random_bytes(data):
    _decode_or_typed_error(data)


@SETTINGS
@given(st.sampled_from(SEEDS), st.binary(min_size=1, max_size=64), st.booleans())
def test_records_section_replaced(seed, records, header_first):
    """A valid header (length and CRC made right) over arbitrary record bytes:
    varints that overflow or never end, lengths past the end, bad UTF-8 header keys."""
    buf = bytearray(seed[:61]) + records
    struct.pack_into(">i", buf, 8, len(buf) - 12)
    struct.pack_into(">h", buf, 21, 0)  # uncompressed: the bytes are the records
    _decode_or_typed_error(_recrc(buf))


def test_fuzzed_inputs_stay_in_bounded_memory():
    """Huge claimed lengths and counts never turn into allocations."""
    seed = bytearray(SEEDS[0])
    tracemalloc.start()
    try:
        for field, value in ((8, 2**31 - 1), (57, 2**31 - 1), (23, 2**31 - 1)):
            buf = bytearray(seed)
            struct.pack_into(">i", buf, field, value)
            _decode_or_typed_error(_recrc(buf))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20

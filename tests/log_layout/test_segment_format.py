"""The segment file format: the stored form (format 2) and the canonical form (format 1).

``segment.encode`` writes the stored form and ``segment.decode`` gives back exactly the
table it was given, in the segment schema, whatever the table holds: consecutive or
gapped offsets, any timestamps, null or mixed keys, values and headers, no rows,
compressed buffers, several record batches. Segments written before the stored form
(the canonical schema, no format marker) still decode; damaged or foreign files raise
CorruptSegment; a 100-byte record costs less on disk than Kafka's 110 bytes.
"""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from log_layout import CorruptSegment, open_log, segment, segment_stored

NOW_MS = 1_764_000_000_000
HEADERS = segment.HEADER_TYPE


def make(n: int = 5, *, offsets=None, ts_us=None, keys=None, values=None, headers=None,
         base: int = 100) -> pa.Table:
    """A table of the segment schema; by default consecutive offsets from ``base``, one
    timestamp, no keys, no headers, values ``v<i>``."""
    offsets = list(range(base, base + n)) if offsets is None else offsets
    ts_us = [NOW_MS * 1000] * n if ts_us is None else ts_us
    return pa.Table.from_arrays([
        pa.array(offsets, pa.int64()),
        pa.array(ts_us, pa.int64()).cast(segment.TS_TYPE),
        pa.array([None] * n if keys is None else keys, pa.binary()),
        pa.array([b"v%d" % i for i in range(n)] if values is None else values, pa.binary()),
        pa.array([None] * n if headers is None else headers, HEADERS),
    ], schema=segment.SCHEMA)


def round_trip(table: pa.Table, compression: str | None = None) -> tuple[pa.Table, pa.Schema]:
    """The table decoded from its encoding, and the stored schema the file has."""
    buf, crc = segment.encode(table, compression=compression)
    out = segment.decode(buf, path="seg", crc32=crc, size=buf.size)
    assert out.schema == segment.SCHEMA and out.schema.metadata is None
    out.validate(full=True)
    assert out.equals(table)
    return out, pa.ipc.open_file(buf).schema


def stored_types(schema: pa.Schema) -> dict[str, pa.DataType]:
    return {f.name: f.type for f in schema}


def test_a_plain_append_stores_only_the_values():
    _, schema = round_trip(make(1000))
    assert stored_types(schema) == {"key": pa.null(), "value": pa.binary(), "headers": pa.null()}
    meta = schema.metadata
    assert meta[segment_stored.FORMAT_KEY] == b"2" and meta[segment_stored.BASE_OFFSET_KEY] == b"100"
    assert meta[segment_stored.BASE_TIMESTAMP_KEY] == b"%d" % (NOW_MS * 1000)


def test_one_record():
    out, schema = round_trip(make(1, base=7))
    assert out.column("offset").to_pylist() == [7]
    assert stored_types(schema) == {"key": pa.null(), "value": pa.binary(), "headers": pa.null()}


def test_no_records():
    out, _ = round_trip(make(0))
    assert out.num_rows == 0


@pytest.mark.parametrize("offsets, stored", [
    ([0, 2, 3, 9], pa.uint8()),
    ([5, 300, 301], pa.uint16()),
    ([10, 70_000], pa.uint32()),
    ([10, 10 + 2**33], pa.int64()),  # too far apart for 32 bits: as they are
])
def test_gapped_offsets_are_stored_as_deltas(offsets, stored):
    _, schema = round_trip(make(len(offsets), offsets=offsets))
    assert stored_types(schema)["offset"] == stored


def test_offsets_that_break_the_order_are_kept_not_renumbered():
    # not a valid segment (offsets must strictly increase), but what goes in comes out
    for offsets in ([3, 2, 4, 5], [1, 1, 3], [9, 8]):
        _, schema = round_trip(make(len(offsets), offsets=offsets))
        assert "offset" in schema.names


@pytest.mark.parametrize("span_ms, stored", [
    (0, None),  # one timestamp for all: no column
    (255, pa.uint8()),
    (256, pa.uint16()),
    (65_535, pa.uint16()),
    (86_400_000, pa.uint32()),
    (60 * 86_400_000, segment.TS_TYPE),  # over 49 days: as they are
])
def test_timestamps_are_stored_as_millisecond_deltas_from_the_smallest(span_ms, stored):
    # the smallest in the middle: deltas from it, none negative
    ts = [(NOW_MS + d) * 1000 for d in (span_ms // 2, 0, span_ms, span_ms // 3)]
    _, schema = round_trip(make(4, ts_us=ts))
    assert stored_types(schema).get("timestamp") == stored
    if stored is not None:
        assert schema.metadata[segment_stored.BASE_TIMESTAMP_KEY] == b"%d" % (NOW_MS * 1000)


def test_timestamps_before_1970_and_at_the_extremes():
    round_trip(make(3, ts_us=[-5_000_000, 0, 7_000]))
    round_trip(make(2, ts_us=[-2**63, 2**63 - 1]))


def test_sub_millisecond_timestamps_are_kept_in_microseconds():
    _, schema = round_trip(make(3, ts_us=[NOW_MS * 1000 + 1, NOW_MS * 1000, NOW_MS * 1000 + 60]))
    assert stored_types(schema)["timestamp"] == pa.uint8()
    assert schema.metadata[segment_stored.TIMESTAMP_UNIT_KEY] == b"1"


def test_keys_values_and_headers_null_or_mixed():
    hdrs = [[{"key": "h", "value": b"x"}], None, [], [{"key": "a", "value": None}]]
    _, schema = round_trip(make(4, keys=[b"k", None, b"", b"k3"], values=[b"v", None, b"", None],
                                headers=hdrs))
    assert stored_types(schema) == {"key": pa.binary(), "value": pa.binary(), "headers": HEADERS}
    # empty header lists are not null: kept, so they come back empty, not null
    _, schema = round_trip(make(2, headers=[[], []]))
    assert stored_types(schema)["headers"] == HEADERS


def test_all_tombstones():
    out, schema = round_trip(make(3, keys=[b"a", b"b", b"c"], values=[None] * 3))
    assert stored_types(schema)["value"] == pa.null()
    assert out.column("value").null_count == 3


def test_null_columns_come_back_without_child_rows():
    out, _ = round_trip(make(1000))
    headers = out.column("headers").chunk(0)
    assert len(headers.values) == 0 and out.column("key").chunk(0).buffers()[2].size == 0


@pytest.mark.parametrize("compression", ["lz4", "zstd"])
def test_compressed(compression):
    n = 3000
    table = make(n, offsets=list(range(0, 2 * n, 2)), ts_us=[(NOW_MS + i) * 1000 for i in range(n)],
                 keys=[b"k%d" % (i % 7) for i in range(n)])
    round_trip(table, compression)
    assert segment.encode(table, compression=compression)[0].size < segment.encode(table)[0].size


@pytest.mark.parametrize("gapped", [False, True])
def test_several_record_batches(gapped):
    # a table in chunks is written as one batch per chunk: offsets go on across them
    parts = [make(3, base=10), make(4, base=13, keys=[b"k"] * 4), make(2, base=17)]
    if gapped:
        parts[2] = make(2, offsets=[40, 41])
    table = pa.concat_tables(parts)
    buf, crc = segment.encode(table)
    assert pa.ipc.open_file(buf).num_record_batches == 3
    out = segment.decode(buf, path="seg", crc32=crc)
    assert out.equals(table) and out.schema == segment.SCHEMA


def test_the_append_path_round_trips():
    records = segment.normalize(pa.table({"value": [b"a", b"b"], "timestamp": [5, 9]}),
                                default_ts_ms=NOW_MS)
    table = segment.with_offsets(records, 42)
    encoded = segment.encode_chunks(table)
    data = pa.py_buffer(b"".join(bytes(c) for c in encoded.chunks))
    assert segment.decode(data, path="seg", crc32=encoded.checksum()).equals(table)


def test_any_arrow_reader_opens_a_segment_with_its_trailer():
    table = make(10, keys=[b"k"] * 10)
    encoded = segment.encode_chunks(table)
    whole = b"".join([*(bytes(c) for c in encoded.chunks),
                      *segment.trailer(b'{"version": 1}', encoded)])
    stored = pa.ipc.open_file(pa.py_buffer(whole)).read_all()
    assert segment.canonical(stored).equals(table)
    assert segment.read_trailer(whole) == b'{"version": 1}'
    assert segment.decode(whole, path="seg", crc32=encoded.checksum(),
                          size=encoded.size).equals(table)


def _canonical_form(table: pa.Table) -> pa.Buffer:
    """A segment as sparklog wrote it before the stored form: the segment schema as is."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, segment.SCHEMA) as writer:
        writer.write_table(table)
    return sink.getvalue()


def test_segments_in_the_canonical_form_still_decode():
    table = make(4, offsets=[0, 1, 5, 6], keys=[b"k", None, None, b"k"],
                 headers=[None, [{"key": "h", "value": b"x"}], None, None])
    data = _canonical_form(table)
    out = segment.decode(data, path="seg", crc32=segment.checksum(data))
    assert out.equals(table)
    assert segment.canonical(pa.ipc.open_file(data).read_all()).equals(table)


def test_damaged_segments_raise_corrupt_segment():
    buf, crc = segment.encode(make(50))
    data = bytearray(buf.to_pybytes())
    data[len(data) // 2] ^= 0xFF
    with pytest.raises(CorruptSegment, match="CRC-32"):
        segment.decode(bytes(data), path="seg", crc32=crc)
    with pytest.raises(CorruptSegment, match="manifest recorded"):
        segment.decode(buf.slice(0, buf.size - 1), path="seg", crc32=crc, size=buf.size)
    with pytest.raises(CorruptSegment, match="not a readable Arrow IPC file"):
        segment.decode(buf.to_pybytes()[:buf.size // 2], path="seg", crc32=None)


def _stored_file(table: pa.Table, metadata: dict) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema.with_metadata(metadata)) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def test_a_foreign_or_unknown_stored_form_is_refused():
    good = {segment_stored.FORMAT_KEY: b"2", segment_stored.BASE_OFFSET_KEY: b"0",
            segment_stored.BASE_TIMESTAMP_KEY: b"0", segment_stored.TIMESTAMP_UNIT_KEY: b"1000"}
    values = pa.table({"key": pa.nulls(1), "value": [b"v"], "headers": pa.nulls(1)})
    assert segment.decode(_stored_file(values, good), path="p", crc32=None).num_rows == 1
    cases = [
        (values, {**good, segment_stored.FORMAT_KEY: b"3"}, "format 3"),
        (values, {k: v for k, v in good.items() if k != segment_stored.BASE_OFFSET_KEY}, "metadata"),
        (values, {**good, segment_stored.BASE_TIMESTAMP_KEY: b"soon"}, "metadata"),
        (values, {**good, segment_stored.TIMESTAMP_UNIT_KEY: b"0"}, "metadata"),
        (pa.table({"value": [b"v"], "key": pa.nulls(1), "headers": pa.nulls(1)}), good, "schema"),
        (values.append_column("extra", pa.array([1])), good, "schema"),
        (pa.table({"offset": pa.array([1], pa.int8()), "key": pa.nulls(1), "value": [b"v"],
                   "headers": pa.nulls(1)}), good, "schema"),
        (pa.table({"key": pa.nulls(1), "value": ["text"], "headers": pa.nulls(1)}), good, "schema"),
    ]
    for table, metadata, reason in cases:
        with pytest.raises(CorruptSegment, match=reason):
            segment.decode(_stored_file(table, metadata), path="p", crc32=None)


@pytest.fixture
def local_topic(tmp_path):
    log = open_log(str(tmp_path / "store"), fsync=False)
    log.create_topic("t")
    return log, tmp_path / "store"


def test_a_100_byte_record_takes_less_disk_than_kafkas_110_bytes(local_topic):
    """Issue 18: Kafka 4.4 stores a 100-byte value, no key, no headers, in 110 bytes."""
    log, root = local_topic
    writer = log.partition("t", 0).claim("w")
    n = 10_000
    values = pa.array([b"x" * 100] * (n // 2), pa.binary())
    for _ in range(2):  # two gateway-flush-sized appends
        writer.append(pa.table({"value": values}))
    apparent = allocated = 0
    seen = set()
    for folder, _, files in os.walk(root):  # every file of the store, each inode once
        for name in files:
            st_ = os.stat(os.path.join(folder, name))
            if (st_.st_dev, st_.st_ino) not in seen:
                seen.add((st_.st_dev, st_.st_ino))
                apparent += st_.st_size
                allocated += st_.st_blocks * 512
    assert apparent / n < 106, apparent / n
    assert allocated / n < 110, allocated / n
    assert log.partition("t", 0).read_table(0).column("value").equals(pa.chunked_array(
        [values, values]))


# -- property: whatever the table, decode(encode(table)) is the table -------------------

def _offsets(n: int) -> st.SearchStrategy[list[int]]:
    consecutive = st.integers(0, 2**40).map(lambda b: list(range(b, b + n)))
    gapped = st.tuples(st.integers(0, 2**40), st.lists(st.integers(1, 2**33), min_size=n,
                                                       max_size=n)) \
        .map(lambda bg: list(np.cumsum([bg[0], *bg[1][1:]])) if n else [])
    return st.one_of(consecutive, gapped)


def _timestamps(n: int) -> st.SearchStrategy[list[int]]:
    base = st.integers(-2**40, 2**50)
    ms = st.tuples(base, st.sampled_from([1, 200, 60_000, 10**9, 10**11])).flatmap(
        lambda b: st.lists(st.integers(0, b[1]).map(lambda d, lo=b[0]: (lo + d) * 1000),
                           min_size=n, max_size=n))
    us = st.lists(st.integers(-2**55, 2**55), min_size=n, max_size=n)
    return st.one_of(ms, us, base.map(lambda t: [t * 1000] * n))


def _maybe_null(elements: st.SearchStrategy, n: int) -> st.SearchStrategy:
    return st.one_of(st.just([None] * n), st.lists(elements, min_size=n, max_size=n),
                     st.lists(st.one_of(st.none(), elements), min_size=n, max_size=n))


@st.composite
def tables(draw) -> pa.Table:
    n = draw(st.integers(0, 40))
    header = st.fixed_dictionaries({"key": st.text(max_size=3),
                                    "value": st.one_of(st.none(), st.binary(max_size=3))})
    table = make(n, offsets=[int(o) for o in draw(_offsets(n))], ts_us=draw(_timestamps(n)),
                 keys=draw(_maybe_null(st.binary(max_size=4), n)),
                 values=draw(_maybe_null(st.binary(max_size=8), n)),
                 headers=draw(_maybe_null(st.lists(header, max_size=2), n)))
    if n > 1 and draw(st.booleans()):  # in chunks: several record batches in the file
        cut = draw(st.integers(1, n - 1))
        table = pa.concat_tables([table.slice(0, cut), table.slice(cut)])
    return table


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables(), st.sampled_from([None, "lz4", "zstd"]))
def test_decode_gives_back_what_was_encoded(table, compression):
    """60 tables, for make test-fast; the slow test below round-trips 300."""
    round_trip(table, compression)


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables(), st.sampled_from([None, "lz4", "zstd"]))
def test_decode_gives_back_what_was_encoded_long(table, compression):
    round_trip(table, compression)


@st.composite
def producer_tables(draw) -> tuple[pa.Table, bool]:
    """What a producer hands to ``append`` (timestamps in ms, any of them null: the
    default), and whether the topic stamps LogAppendTime."""
    n = draw(st.integers(1, 30))
    cols = {"value": pa.array(draw(_maybe_null(st.binary(max_size=8), n)), pa.binary())}
    if draw(st.booleans()):
        cols["key"] = pa.array(draw(_maybe_null(st.binary(max_size=4), n)), pa.binary())
    if draw(st.booleans()):
        ms = st.one_of(st.none(), st.integers(0, 2**41))
        cols["timestamp"] = pa.array(draw(st.lists(ms, min_size=n, max_size=n)), pa.int64())
    return pa.table(cols), draw(st.booleans())


@settings(max_examples=200, deadline=None)
@given(producer_tables(), st.integers(0, 2**40), st.sampled_from([None, "lz4"]))
def test_an_appends_encoding_is_the_same_file_as_the_general_one(produced, base, compression):
    """``encode_append`` skips building offsets and a shared timestamp; the bytes are
    those of ``encode_chunks`` over the full table."""
    table, log_append_time = produced
    records = segment.normalize(table, default_ts_ms=NOW_MS, log_append_time=log_append_time)
    fast = segment.encode_append(records, base, compression=compression)
    general = segment.encode_chunks(segment.with_offsets(records, base), compression=compression)
    assert b"".join(map(bytes, fast.chunks)) == b"".join(map(bytes, general.chunks))
    assert fast.size == general.size

"""The produce answer the gateway encodes by hand is byte for byte what json.dumps writes."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from ingest_gateway.http.produce import v2_offsets_json
from ingest_gateway.server.batches import PartResult


def reference(positions, results) -> bytes:
    base = {r.partition: r.base_offset for r in results}
    doc = {"key_schema_id": None, "value_schema_id": None,
           "offsets": [{"partition": p, "offset": None if base[p] is None else base[p] + row,
                        "error_code": None, "error": None} for p, row in positions]}
    return json.dumps(doc, separators=(",", ":")).encode()


@st.composite
def requests(draw):
    """Record positions of one request over 1-4 partitions, and each partition's base."""
    targets = draw(st.lists(st.integers(0, 3), min_size=1, max_size=60))
    acks0 = draw(st.booleans())
    rows: dict[int, int] = {}
    positions = []
    for p in targets:
        positions.append((p, rows.get(p, 0)))
        rows[p] = rows.get(p, 0) + 1
    results = [PartResult(p, n, None if acks0 else draw(st.integers(0, 2**62)))
               for p, n in rows.items()]
    return positions, results


@given(requests())
def test_hand_encoded_answer_equals_json_dumps(request):
    positions, results = request
    assert v2_offsets_json(positions, results) == reference(positions, results)


def test_one_partition_offsets_are_consecutive_from_the_base():
    body = json.loads(v2_offsets_json([(2, 0), (2, 1), (2, 2)], [PartResult(2, 3, 40)]))
    assert [o["offset"] for o in body["offsets"]] == [40, 41, 42]
    assert {o["partition"] for o in body["offsets"]} == {2}

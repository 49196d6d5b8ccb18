"""Hostile Kafka requests for the listener's fuzzers, seeded so a failure reruns.

Every case is a valid request header for one (API, version) the listener offers,
followed by a body that is random bytes, a valid body cut short, or a valid body
mutated (bytes flipped, a length field overwritten with a huge one, a five-byte
varint of ~3.5 billion spliced in: the shape that made kio abort). Valid bodies
come from hypothesis's strategies for kio's classes (kio registers them), drawn
deterministically.

``CRASHES``: the request bodies that killed a gateway before ``kafka.bounds``, one
file per case in ``fuzz_crashes/`` named ``<api key>-v<version>-<what>.bin``;
every fuzzer sends them first.
"""

from __future__ import annotations

import io
import pathlib
import random
import struct
from collections.abc import Iterator

CRASHES = pathlib.Path(__file__).with_name("fuzz_crashes")

#: byte strings spliced into mutated bodies: huge lengths in each encoding Kafka uses
_HOSTILE = (b"\x8d\xe3\xda\x97\x0d", b"\xff\xff\xff\xff\x0f", b"\x7f\xff\xff\xff",
            b"\xff\xff\xff\xfe", b"\x7f\xff", b"\x80\x00\x00\x00", b"\xff\xff\xff\xff\xff\x01")


def offered() -> dict[int, tuple[int, int]]:
    """(API key -> version range) the listener offers with SASL on: every API it serves
    (``listener.offered``, the table ApiVersions answers)."""
    from ingest_gateway.kafka.listener import offered as listener_offered

    return listener_offered(sasl=True)


def pairs() -> list[tuple[int, int]]:
    return [(key, v) for key, (low, high) in sorted(offered().items())
            for v in range(low, high + 1)]


def header(api_key: int, version: int, correlation_id: int = 1) -> bytes:
    """A request header (v1, or v2 with an empty tagged-field section when flexible)."""
    from kio.index import load_request_schema

    head = struct.pack(">hhih", api_key, version, correlation_id, 4) + b"fuzz"
    return head + (b"\0" if load_request_schema(api_key, version).__flexible__ else b"")


def framed(api_key: int, version: int, body: bytes) -> bytes:
    payload = header(api_key, version) + body
    return struct.pack(">i", len(payload)) + payload


def valid_bodies(api_key: int, version: int, count: int) -> list[bytes]:
    """``count`` valid encodings of the request, drawn deterministically."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import strategies as st
    from kio.index import load_request_schema
    from kio.serial import entity_writer
    from kio.static.primitive import Records

    st.register_type_strategy(Records, st.binary(max_size=64))
    cls = load_request_schema(api_key, version)
    out: list[bytes] = []

    @settings(max_examples=count, derandomize=True, phases=[Phase.generate],
              database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.from_type(cls))
    def draw(request):
        buf = io.BytesIO()
        entity_writer(cls)(buf, request)
        out.append(buf.getvalue())

    draw()
    return out


def mutate(rnd: random.Random, body: bytes) -> bytes:
    """One hostile variant of a valid body."""
    kind = rnd.randrange(4)
    if kind == 0 or not body:  # random bytes
        return rnd.randbytes(rnd.randint(0, 48))
    if kind == 1:  # cut short
        return body[:rnd.randrange(len(body))]
    buf = bytearray(body)
    if kind == 2:  # bytes flipped
        for _ in range(rnd.randint(1, 4)):
            buf[rnd.randrange(len(buf))] = rnd.randrange(256)
        return bytes(buf)
    at = rnd.randrange(len(buf) + 1)  # a huge length spliced in or written over
    hostile = rnd.choice(_HOSTILE)
    if rnd.random() < 0.5:
        return bytes(buf[:at] + hostile + buf[at:])
    return bytes(buf[:at] + hostile + buf[at + len(hostile):])


def crashes() -> list[tuple[int, int, bytes]]:
    """(api key, version, body) of every kept crash."""
    out = []
    for path in sorted(CRASHES.glob("*.bin")):
        key, version = path.stem.split("-")[:2]
        out.append((int(key), int(version.lstrip("v")), path.read_bytes()))
    return out


def cases(seed: int, count: int, bodies_per_pair: int = 3
          ) -> Iterator[tuple[int, int, bytes]]:
    """The kept crashes, then ``count`` hostile (api key, version, body), cycling over
    every offered (API, version) so each gets its share."""
    yield from crashes()
    rnd = random.Random(seed)
    every = pairs()
    valid = {pair: valid_bodies(*pair, bodies_per_pair) for pair in every}
    for i in range(count):
        pair = every[i % len(every)]
        yield (*pair, mutate(rnd, rnd.choice(valid[pair])))

"""A stored PROTOBUF schema read as descriptors, and Confluent's message indexes: what
the gateway (REST Proxy, the compatibility check) and the Spark source both need of the
registry's Protobuf schemas (``log_layout/schema_registry.py`` stores their text).

A schema's text (and the texts its references reach, written under their reference
names) is compiled by ``protoc`` as ``grpcio-tools`` ships it in its wheel, in process
(no network, no binary to install), to a ``FileDescriptorSet``, and built into a
descriptor pool of its own. A schema registered as a base64 ``FileDescriptorProto`` (as
confluent-kafka's Python ``ProtobufSerializer`` registers it) is read as such, and the
well-known ``google/protobuf/*.proto`` files it imports without a reference
(``skip.known.types``) come from the protobuf runtime, as Confluent's registry knows them.

**Message indexes**, after the wire format's magic byte and id: which message of the
file, then which nested one; a zigzag varint count, then each index as a zigzag varint,
``[0]`` (the first message) written as the single byte ``0``.

Bounds: text nested deeper than :data:`MAX_DEPTH` braces is refused before ``protoc``
(its parser recurses); compiling is serialized (``protoc``'s main is not known to be
reentrant); more than :data:`MAX_INDEXES` indexes is refused. ``protoc`` writes its
errors to the process's standard error: they are caught there and the first one is the
:class:`InvalidProto`'s reason, so a hostile schema cannot flood a gateway's log (one
schema with the reserved field numbers printed ~1,000 lines).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import importlib
import os
import sys
import tempfile
import threading
from collections.abc import Iterator
from typing import Any

#: deepest ``{`` nesting of a .proto text accepted (far past real schemas)
MAX_DEPTH = 64
#: message indexes a record may carry (more is hostile)
MAX_INDEXES = 64
#: the file name a schema's own text is compiled under
MAIN_FILE = "sparklog_schema.proto"
_PROTOC = threading.Lock()


class InvalidProto(ValueError):
    """A schema that does not compile, or message indexes that do not read (the message
    says why)."""


def as_descriptor(text: str) -> Any:
    """The FileDescriptorProto of a base64-encoded schema, or None for .proto text."""
    from google.protobuf import descriptor_pb2
    from google.protobuf.message import DecodeError

    stripped = text.strip()
    if not stripped or any(c.isspace() for c in stripped) or "{" in stripped:
        return None
    try:
        return descriptor_pb2.FileDescriptorProto.FromString(
            base64.b64decode(stripped, validate=True))
    except (binascii.Error, ValueError, DecodeError):
        return None


def compile_file(text: str, referenced: list[tuple[str, str]]) -> Any:
    """The FileDescriptor of a schema's ``text`` (.proto text or base64 descriptor), in a
    pool of its own; ``referenced``: (import name, text) of every schema its references
    reach. Raises InvalidProto."""
    from google.protobuf import descriptor_pool

    pool = descriptor_pool.DescriptorPool()
    given = as_descriptor(text)
    texts = [(name, t) for name, t in referenced if as_descriptor(t) is None]
    try:
        if given is None:
            for f in _protoc([*texts, (MAIN_FILE, text)], [MAIN_FILE]).file:
                _add(pool, f)
            file = pool.FindFileByName(MAIN_FILE)
        else:
            if texts:
                for f in _protoc(texts, [name for name, _ in texts]).file:
                    _add(pool, f)
            for _name, t in referenced:
                if (d := as_descriptor(t)) is not None:
                    _add_well_known(pool, d)
                    _add(pool, d)
            _add_well_known(pool, given)
            _add(pool, given)
            file = pool.FindFileByName(given.name)
    except InvalidProto:
        raise
    except Exception as e:  # noqa: BLE001 - descriptor_pool raises TypeError and kin
        raise InvalidProto(f"the descriptors do not build: {str(e)[:200]}") from None
    if not file.message_types_by_name:
        raise InvalidProto("the schema defines no message")
    return file


def message_indexes(data: bytes | memoryview) -> tuple[list[int], int]:
    """(message indexes, where the message starts) of what follows the wire format's
    5-byte header. Raises InvalidProto."""
    count, i = _zigzag(data, 0)
    if count == 0:
        return [0], i
    if not 0 < count <= MAX_INDEXES:
        raise InvalidProto(f"{count} message indexes (at most {MAX_INDEXES})")
    indexes = []
    for _ in range(count):
        index, i = _zigzag(data, i)
        indexes.append(index)
    return indexes, i


def message_at(file: Any, indexes: list[int]) -> Any:
    """The descriptor of the message ``indexes`` name in ``file`` (the first index among
    its top-level messages, each next one among the previous one's nested messages).
    Raises InvalidProto for an index past the end or negative (Python's ``[-1]`` would
    quietly name the last message)."""
    found = None
    for depth, i in enumerate(indexes):
        among = file.message_types_by_name.values() if depth == 0 else found.nested_types
        among = list(among)
        if not 0 <= i < len(among):
            raise InvalidProto(f"message indexes {indexes[:8]} name no message (index {i} "
                               f"of {len(among)} at depth {depth})")
        found = among[i]
    if found is None:
        raise InvalidProto("no message indexes")
    return found


def _zigzag(data: bytes | memoryview, i: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if i >= len(data) or shift > 63:
            raise InvalidProto("truncated message indexes")
        b = data[i]
        i += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1), i
        shift += 7


def _depth_ok(text: str) -> None:
    depth = deepest = 0
    for ch in text:
        if ch == "{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch == "}":
            depth -= 1
    if deepest > MAX_DEPTH:
        raise InvalidProto(f"nested deeper than {MAX_DEPTH} levels")


def _protoc(texts: list[tuple[str, str]], compile_names: list[str]) -> Any:
    """The FileDescriptorSet of ``compile_names``, every (name, text) written beside
    them. Raises InvalidProto."""
    import grpc_tools
    from google.protobuf import descriptor_pb2
    from grpc_tools import protoc

    for _name, text in texts:
        _depth_ok(text)
    well_known = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    with tempfile.TemporaryDirectory(prefix="sparklog-proto-") as d:
        for name, text in texts:
            path = os.path.normpath(os.path.join(d, name))
            if not path.startswith(d + os.sep) or not name.endswith(".proto"):
                raise InvalidProto(f"a reference's name must be a relative .proto path, "
                                   f"not {name[:80]!r}")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        out = os.path.join(d, "out.pb")
        # protoc names a file by its path under d, or by its import name
        names = (d + os.sep, *(name for name, _ in texts), "google/protobuf/")
        with _PROTOC, _protoc_errors(names) as said:
            rc = protoc.main(["protoc", f"-I{d}", f"-I{well_known}",
                              f"--descriptor_set_out={out}", "--include_imports",
                              *compile_names])
        if rc != 0 or not os.path.exists(out):
            why = f": {said[0].replace(d + os.sep, '')[:300]}" if said else \
                " (is it valid proto2/proto3, with every import given as a reference?)"
            raise InvalidProto(f"protoc could not compile the schema{why}")
        with open(out, "rb") as f:
            return descriptor_pb2.FileDescriptorSet.FromString(f.read())


@contextlib.contextmanager
def _protoc_errors(names: tuple[str, ...]) -> Iterator[list[str]]:
    """Around ``protoc``'s run (in process: its C++ writes to file descriptor 2): its
    error lines (those naming one of ``names``) into the yielded list; whatever else
    reached standard error meanwhile (another thread's log) is written on afterwards.
    Catches nothing when there is no descriptor 2 to redirect."""
    said: list[str] = []
    try:
        sys.stderr.flush()
        real = os.dup(2)
    except (OSError, ValueError):
        yield said
        return
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        try:
            yield said
        finally:
            os.dup2(real, 2)
            os.close(real)
            caught.seek(0)
            other = []
            for line in caught.read().decode("utf-8", "replace").splitlines():
                (said if line.startswith(names) else other).append(line)
            if other:
                os.write(2, ("\n".join(other) + "\n").encode())


def _add(pool: Any, file_proto: Any) -> None:
    try:
        pool.FindFileByName(file_proto.name)
    except KeyError:
        pool.Add(file_proto)


def _add_well_known(pool: Any, file_proto: Any) -> None:
    """Add the ``google/protobuf/*.proto`` files ``file_proto`` imports, from the
    runtime's own pool (importing their ``_pb2`` modules puts them there)."""
    from google.protobuf import descriptor_pb2, descriptor_pool

    for dep in file_proto.dependency:
        stem = dep[len("google/protobuf/"):-len(".proto")]
        if not dep.startswith("google/protobuf/") or not dep.endswith(".proto") \
                or not stem.replace("_", "").replace("/", "").isalnum():
            continue
        try:
            pool.FindFileByName(dep)
            continue
        except KeyError:
            pass
        try:
            importlib.import_module("google.protobuf." + stem.replace("/", ".") + "_pb2")
            known = descriptor_pool.Default().FindFileByName(dep)
        except (ImportError, KeyError):
            continue  # not a well-known file: building the pool names what is missing
        proto = descriptor_pb2.FileDescriptorProto()
        known.CopyToProto(proto)
        _add_well_known(pool, proto)
        _add(pool, proto)

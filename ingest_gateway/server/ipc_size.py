"""How much memory an Arrow IPC stream will take once read, found before reading it.

An IPC body's buffers may be compressed (LZ4 frame or ZSTD, per buffer): a few
hundred kilobytes can expand to gigabytes, and a column of type ``null`` has no
buffers at all, so its declared length is free to send and costly to
materialize (the gateway casts ``value``/``key`` to binary: 4 bytes of offsets
per row). :func:`expanded_size` walks the stream's messages without touching
their bodies beyond 8 bytes per buffer and adds up

* each buffer's uncompressed length: with body compression, the first 8 bytes
  of a buffer are its uncompressed length (little-endian int64; ``-1`` = stored
  as is, the length is the buffer's minus 8); otherwise the buffer's length;
* ``PER_VALUE`` bytes per value of every field node (a top-level column or a
  nested child), the least a materialized value costs.

The metadata is the Arrow ``Message`` flatbuffer (``format/Message.fbs``), read
here with a dozen lines of flatbuffer decoding; every read is bounds-checked,
and a message pyarrow cannot frame is left for the reader to refuse.
"""

from __future__ import annotations

import struct

import pyarrow as pa

#: bytes a value of any field node costs at least once read (an offset or a timestamp)
PER_VALUE = 8

_U16 = struct.Struct("<H")
_I32 = struct.Struct("<i")
_U32 = struct.Struct("<I")
_I64 = struct.Struct("<q")
_FIELD = struct.Struct("<qq")  # FieldNode(length, null_count) and Buffer(offset, length)

# Message.fbs: MessageHeader union members, and field slots of the tables used
_DICTIONARY_BATCH, _RECORD_BATCH = 2, 3
_MESSAGE_HEADER_TYPE, _MESSAGE_HEADER = 1, 2
_BATCH_NODES, _BATCH_BUFFERS, _BATCH_COMPRESSION = 1, 2, 3
_DICTIONARY_DATA = 1


class MalformedIpc(ValueError):
    """The IPC metadata does not decode (the caller answers it as a bad request)."""


class _Table:
    """A flatbuffer table in ``buf`` at ``pos``: its fields found through the vtable."""

    __slots__ = ("buf", "pos", "vtable", "vtable_len")

    def __init__(self, buf: memoryview, pos: int):
        self.buf, self.pos = buf, pos
        self.vtable = pos - _I32.unpack_from(buf, pos)[0]
        self.vtable_len = _U16.unpack_from(buf, self.vtable)[0]

    def _field(self, slot: int) -> int:
        """Absolute position of field ``slot``, 0 when absent."""
        at = 4 + 2 * slot
        if at + 2 > self.vtable_len:
            return 0
        off = _U16.unpack_from(self.buf, self.vtable + at)[0]
        return self.pos + off if off else 0

    def u8(self, slot: int) -> int:
        at = self._field(slot)
        return self.buf[at] if at else 0

    def table(self, slot: int) -> "_Table | None":
        at = self._field(slot)
        return _Table(self.buf, at + _U32.unpack_from(self.buf, at)[0]) if at else None

    def structs(self, slot: int) -> list[tuple[int, int]]:
        """A vector of 16-byte structs (FieldNode, Buffer) as (first, second) pairs."""
        at = self._field(slot)
        if not at:
            return []
        vec = at + _U32.unpack_from(self.buf, at)[0]
        n = _U32.unpack_from(self.buf, vec)[0]
        if vec + 4 + 16 * n > len(self.buf):
            raise MalformedIpc(f"a vector of {n} entries runs past the metadata")
        return list(_FIELD.iter_unpack(self.buf[vec + 4:vec + 4 + 16 * n]))


def _batch_size(batch: _Table, body: pa.Buffer) -> int:
    nodes = batch.structs(_BATCH_NODES)
    total = PER_VALUE * sum(max(length, 0) for length, _nulls in nodes)
    buffers = batch.structs(_BATCH_BUFFERS)
    if batch.table(_BATCH_COMPRESSION) is None:
        return total + sum(max(length, 0) for _offset, length in buffers)
    view = memoryview(body if body is not None else b"")
    for offset, length in buffers:
        if length <= 0:
            continue
        if length < 8 or offset < 0 or offset + 8 > len(view):
            raise MalformedIpc(f"a compressed buffer at {offset} of {length} bytes has no "
                               "length prefix")
        declared = _I64.unpack_from(view, offset)[0]
        if declared < -1:
            raise MalformedIpc(f"a compressed buffer declares {declared} bytes")
        total += length - 8 if declared == -1 else declared
    return total


def expanded_size(buf: pa.Buffer) -> int:
    """Bytes the stream's record and dictionary batches take once read (see the module
    docstring). Raises MalformedIpc, or pyarrow's errors for a stream it cannot frame."""
    reader = pa.ipc.MessageReader.open_stream(buf)
    total = 0
    while True:
        try:
            message = reader.read_next_message()
        except StopIteration:
            return total
        meta = memoryview(message.metadata)
        try:
            root = _Table(meta, _U32.unpack_from(meta, 0)[0])
            kind = root.u8(_MESSAGE_HEADER_TYPE)
            if kind not in (_RECORD_BATCH, _DICTIONARY_BATCH):
                continue
            header = root.table(_MESSAGE_HEADER)
            if header is not None and kind == _DICTIONARY_BATCH:
                header = header.table(_DICTIONARY_DATA)
            if header is not None:
                total += _batch_size(header, message.body)
        except (struct.error, IndexError) as e:
            raise MalformedIpc(f"the IPC message metadata does not decode: {e}") from None

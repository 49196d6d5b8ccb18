"""A bound on what one Avro record can make fastavro do: a record's array blocks are
checked against the bytes left before fastavro reads it.

An Avro array is written in blocks, each a count then its items. An item of a type that
encodes in no bytes (``null``, a record of nulls, a fixed of size 0) costs fastavro a
loop turn but no input, so a 10-byte record claiming 2**62 nulls holds a thread for
minutes. Only writer schemas with such an array need the check (:func:`needs_check`,
once per schema); for them :func:`check` walks the record's bytes (Python, no values
built) and refuses:

* a block of items of ``w`` bytes at least whose count is more than the bytes left over
  ``w`` could encode (the block cannot be there);
* more than :data:`MAX_EMPTY_ITEMS` zero-byte items in one record in all (they take no
  bytes, so the bytes bound nothing).

Maps need no check: each entry has its key, a string of one byte at least.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: zero-byte array items one record may hold in all (a million nulls decode in well
#: under a second; more is not a record anyone writes)
MAX_EMPTY_ITEMS = 1_000_000
_FIXED_WIDTH = {"null": 0, "boolean": 1, "float": 4, "double": 8}


class Unbounded(ValueError):
    """A record whose blocks claim more items than its bytes hold, or too many empty
    items; the message says which."""


def _resolve(s: Any, named: Mapping[str, Any]) -> Any:
    while True:
        if isinstance(s, str) and s in named:
            s = named[s]
        elif isinstance(s, dict) and not isinstance(s.get("type"), str):
            s = s["type"]
        elif isinstance(s, dict) and s["type"] not in ("record", "enum", "fixed", "array",
                                                       "map"):
            s = s["type"]
        else:
            return s


def min_width(s: Any, named: Mapping[str, Any], seen: frozenset = frozenset()) -> int:
    """The fewest bytes a value of schema ``s`` encodes in."""
    s = _resolve(s, named)
    if isinstance(s, str):
        return _FIXED_WIDTH.get(s, 1)  # int, long, bytes, string: a varint at least
    if isinstance(s, list):
        return 1
    kind = s["type"]
    if kind == "fixed":
        return int(s["size"])
    if kind == "record":
        if s["name"] in seen:  # a record inside itself is behind a union or array
            return 1
        return sum(min_width(f["type"], named, seen | {s["name"]}) for f in s["fields"])
    return 1  # enum, array, map: a varint at least


def needs_check(s: Any, named: Mapping[str, Any], seen: frozenset = frozenset()) -> bool:
    """Whether a schema has an array of items that encode in no bytes."""
    s = _resolve(s, named)
    if isinstance(s, list):
        return any(needs_check(b, named, seen) for b in s)
    if isinstance(s, str):
        return False
    kind = s["type"]
    if kind == "array":
        return min_width(s["items"], named) == 0 or needs_check(s["items"], named, seen)
    if kind == "map":
        return needs_check(s["values"], named, seen)
    if kind == "record" and s["name"] not in seen:
        return any(needs_check(f["type"], named, seen | {s["name"]}) for f in s["fields"])
    return False


class _Walk:
    def __init__(self, body: bytes, named: Mapping[str, Any]):
        self.body, self.pos, self.named, self.empty = body, 0, named, 0

    def _skip(self, n: int) -> None:
        if n < 0 or self.pos + n > len(self.body):
            raise Unbounded(f"{n} bytes claimed at byte {self.pos}, {len(self.body) - self.pos}"
                            " left")
        self.pos += n

    def long(self) -> int:
        shift = result = 0
        while True:
            if self.pos >= len(self.body) or shift > 63:
                raise Unbounded(f"a varint at byte {self.pos} runs past the record")
            b = self.body[self.pos]
            self.pos += 1
            result |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return (result >> 1) ^ -(result & 1)

    def value(self, s: Any, depth: int = 0) -> None:
        if depth > 200:
            raise Unbounded("nested deeper than 200 levels")
        s = _resolve(s, self.named)
        if isinstance(s, list):
            index = self.long()
            if not 0 <= index < len(s):
                raise Unbounded(f"union index {index} of {len(s)} branches")
            return self.value(s[index], depth + 1)
        kind = s if isinstance(s, str) else s["type"]
        if kind in _FIXED_WIDTH:
            return self._skip(_FIXED_WIDTH[kind])
        if kind in ("int", "long", "enum"):
            self.long()
        elif kind in ("bytes", "string"):
            self._skip(self.long())
        elif kind == "fixed":
            self._skip(int(s["size"]))
        elif kind == "record":
            for f in s["fields"]:
                self.value(f["type"], depth + 1)
        elif kind in ("array", "map"):
            self._blocks(s, depth)

    def _blocks(self, s: dict, depth: int) -> None:
        item = s["items"] if s["type"] == "array" else s["values"]
        width = min_width(item, self.named) + (1 if s["type"] == "map" else 0)
        while True:
            count = self.long()
            if count == 0:
                return
            if count < 0:
                count = -count
                self.long()  # the block's size in bytes: not needed to walk it
            if width == 0:
                self.empty += count
                if self.empty > MAX_EMPTY_ITEMS:
                    raise Unbounded(f"more than {MAX_EMPTY_ITEMS:,} empty array items")
                continue
            left = len(self.body) - self.pos
            if count > left // width:
                raise Unbounded(f"a block of {count:,} items at byte {self.pos}, where "
                                f"{left} bytes are left")
            for _ in range(count):
                if s["type"] == "map":
                    self._skip(self.long())
                self.value(item, depth + 1)


def check(body: bytes, schema: Any, named: Mapping[str, Any]) -> None:
    """Walk an Avro record's bytes (``schema``: its writer's, parsed). Raises Unbounded
    (module docstring) or on bytes that run past the record."""
    _Walk(body, named).value(schema)

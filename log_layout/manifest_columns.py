"""The columnar JSON of a manifest's segments, and the checked reading of its numbers.

(The manifest format is ``manifest``'s docstring.) A manifest stores its segments as
columns, one JSON array per field, so encoding is a join per column and parsing a
check per column; these are the columns, their text, and the checks every number read
from a manifest passes (a string where a count belongs is refused at parse, not met
later deep inside a read).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

from log_layout import paths

NO_PRODUCER = -1  # the producer_id of a segment that is not transactional
SEGMENT_FIELDS = ("file", "base_offset", "last_offset", "count", "bytes", "min_ts", "max_ts",
                   "crc32")
COLUMN_OPEN = tuple(("," if i else "") + f'"{f}":[' for i, f in enumerate(SEGMENT_FIELDS))
TXN_FIELDS = ("producer_id", "control")
HOT_FIELDS = (*TXN_FIELDS, "position")
segment_row = operator.attrgetter(*SEGMENT_FIELDS)


def columns_text(segments: Sequence[Any]) -> tuple[str, ...]:
    """Each segment column as the JSON text between its brackets (zip transposes at C speed)."""
    if not segments:
        return ("",) * len(SEGMENT_FIELDS)
    files, *numbers = zip(*map(segment_row, segments))
    # Segment files are [A-Za-z0-9._-/] only (paths.is_segment_file, checked on every
    # parse): nothing to escape.
    return ('"' + '","'.join(files) + '"',
            *(",".join(map(str, map(int, col))) for col in numbers))


def with_txn_columns(segments: tuple[Any, ...], producer_ids: list[int],
                      control: list[int]) -> tuple[Any, ...]:
    """``segments`` with their transactional columns set where they differ from the
    defaults (format 3 and 4)."""
    for info, pid, ctl in zip(segments, producer_ids, control):
        if pid != NO_PRODUCER or ctl:
            if ctl not in (0, 1):
                raise ValueError(f"control must be 0 or 1, found {ctl!r}")
            info.__dict__.update(producer_id=pid, control=bool(ctl))
    return segments


MAX_BYTES = 1 << 48


def with_positions(segments: tuple[Any, ...],
                    positions: list[int]) -> tuple[Any, ...]:
    """``segments`` with their byte positions set (format 5 and 6); only a hot object's
    segments may start past 0, and no range may reach past 2**48 bytes (a read would
    ask for it)."""
    for info, pos in zip(segments, positions):
        if not 0 <= info.bytes < MAX_BYTES or not -MAX_BYTES < pos < MAX_BYTES:
            raise ValueError(f"segment {info.file!r} spans bytes {pos}+{info.bytes}")
        if pos:
            if pos < 0 or not paths.is_hot_file(info.file):
                raise ValueError(f"segment {info.file!r} cannot start at byte {pos}")
            info.__dict__["position"] = pos
    return segments


def aborted_entry(entry: Any) -> tuple[int, int, int]:
    if type(entry) is not list or len(entry) != 3:
        raise ValueError(f"an aborted entry is [producer_id, first, last], not {entry!r}")
    return tuple(map(checked_int, entry))  # type: ignore[return-value]


def ints(values: Any) -> list[int]:
    """A JSON list of integers, checked in bulk (bool is not an int here)."""
    if type(values) is not list or not set(map(type, values)) <= {int}:
        raise ValueError(f"expected a list of integers, found {str(values)[:80]}")
    return values


def checked_int(value: Any) -> int:
    """An integer from JSON; anything else (str, float, bool, None) is corrupt."""
    if type(value) is not int:
        raise ValueError(f"expected an integer, found {value!r}")
    return value

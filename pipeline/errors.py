"""Typed errors of the Spark side (the ``sparklog`` data source and topics as tables).

Each carries its facts as attributes and reads as a sentence with the numbers
in it. They cross the Python-worker boundary as text inside Spark's own
exception, so the message must stand on its own.
"""

from __future__ import annotations

from conf.errors import SparklogError


class InvalidSourceOption(SparklogError, ValueError):
    """An option of the ``sparklog`` data source is unknown, missing or malformed."""

    code = "invalid_source_option"

    def __init__(self, option: str, value: object, reason: str):
        self.option, self.value, self.reason = option, value, reason
        shown = "" if value is None else f" {value!r}"
        super().__init__(f"sparklog source option {option!r}{shown}: {reason}")


class DataLoss(SparklogError):
    """Records a query needs were deleted by retention (``failOnDataLoss=true``).

    ``start`` is the first offset the query needed, ``log_start`` the first
    one the partition still holds: offsets ``start..log_start - 1`` are lost.
    Offsets that compaction removed are gaps, not data loss.
    """

    code = "data_loss"

    def __init__(self, topic: str, partition: int, start: int, log_start: int):
        self.topic, self.partition, self.start, self.log_start = topic, partition, start, log_start
        super().__init__(
            f"data loss in {topic}-{partition}: offsets {start} to {log_start - 1} were "
            f"deleted by retention before they were read (the log now starts at {log_start}). "
            f"Set failOnDataLoss=false to skip to the log start instead.")


class PartitionsRemoved(SparklogError):
    """A topic or partition a query was reading no longer exists."""

    code = "partitions_removed"

    def __init__(self, missing: list[str]):
        self.missing = missing
        super().__init__(f"topic partitions {', '.join(missing)} were being read but no longer "
                         f"exist (topic deleted?). Set failOnDataLoss=false to carry on without them.")


class NoOffsetForTimestamp(SparklogError):
    """No record at or after the requested starting timestamp (strategy ``error``)."""

    code = "no_offset_for_timestamp"

    def __init__(self, topic: str, partition: int, timestamp_ms: int):
        self.topic, self.partition, self.timestamp_ms = topic, partition, timestamp_ms
        super().__init__(f"{topic}-{partition} has no record with a timestamp at or after "
                         f"{timestamp_ms} ms; set startingOffsetsByTimestampStrategy=latest to "
                         f"start at the high watermark instead")


class TableError(SparklogError):
    """A topic cannot be materialised as asked (bad table name, value format, schema)."""

    code = "table_error"

    def __init__(self, table: str, reason: str):
        self.table, self.reason = table, reason
        super().__init__(f"table {table!r}: {reason}")

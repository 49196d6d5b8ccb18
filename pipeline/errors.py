"""Typed errors of the Spark side (the ``sparklog`` data source and topics as tables).

Each carries its facts as attributes and reads as a sentence with the numbers
in it. They cross the Python-worker boundary as text inside Spark's own
exception, so the message must stand on its own.
"""

from __future__ import annotations

import re

from conf.errors import SparklogError

#: a line of a Python traceback inside a Spark error naming one of sparklog's errors
_OURS = re.compile(r"^(?:pipeline|log_layout|conf|ingest_gateway|compaction|retention|jobs)"
                   r"\.[\w.]+\.(\w+): (.+)$", re.MULTILINE)
_SQLSTATE = re.compile(r"\s*SQLSTATE: \w+\s*$")


def spark_failure_message(error: BaseException) -> str | None:
    """What went wrong, in one sentence, if ``error`` is a Spark failure (PySpark's or
    py4j's exception); None for any other error.

    A sparklog error raised in a Python worker (the ``sparklog`` source, a UDF) reaches
    the driver as text inside Spark's (``[PYTHON_DATA_SOURCE_ERROR] ... Traceback ...``):
    its own message is the last such line. Otherwise Spark's first line, whose
    ``[ERROR_CLASS]`` names the failure, without the SQLSTATE; for a Java exception
    that py4j relays, the exception's own line and its first cause (py4j's first line
    says only "An error occurred while calling o123.save.", and Delta's "Cannot create
    <path>" leaves HDFS's "Permission denied: user=..." to its cause).
    """
    if not type(error).__module__.startswith(("pyspark", "py4j")):
        return None
    text = str(error)
    ours = _OURS.findall(text)
    if ours:
        return ours[-1][1].strip()
    lines = [line for line in text.splitlines() if line.strip()]
    first = lines[0] if lines else type(error).__name__
    if first.startswith("An error occurred while calling") and len(lines) > 1:
        first = lines[1].strip().removeprefix(": ")
        cause = next((line for line in lines if line.startswith("Caused by: ")), None)
        if cause:
            first = f"{first} (caused by {cause.removeprefix('Caused by: ').strip()})"
    return _SQLSTATE.sub("", first).strip()


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


class InvalidSinkOption(SparklogError, ValueError):
    """An option of the ``sparklog`` sink (``df.write`` / ``writeStream``) is unknown,
    missing or malformed, or the save mode is not ``append``."""

    code = "invalid_sink_option"

    def __init__(self, option: str, value: object, reason: str):
        self.option, self.value, self.reason = option, value, reason
        shown = "" if value is None else f" {value!r}"
        super().__init__(f"sparklog sink option {option!r}{shown}: {reason}")


class InvalidSinkColumn(SparklogError, ValueError):
    """A column the ``sparklog`` sink writes is missing, of the wrong type, or holds a
    value it cannot write (a null topic, a partition out of range)."""

    code = "invalid_sink_column"

    def __init__(self, column: str, reason: str):
        self.column, self.reason = column, reason
        super().__init__(f"sparklog sink column {column!r}: {reason}")


class UnusableSchema(SparklogError, ValueError):
    """A registry subject cannot give the column type asked for: no such subject or
    version, another schema type, or a construct with no Spark type (named by path)."""

    code = "unusable_schema"

    def __init__(self, subject: str, reason: str):
        self.subject, self.reason = subject, reason
        super().__init__(f"schema of subject {subject!r}: {reason}")


class UndecodableRecord(SparklogError, ValueError):
    """A record's key or value cannot be decoded by the registry (``mode=FAILFAST``): no
    magic byte, an id the registry does not hold, or bytes its schema does not read."""

    code = "undecodable_record"

    def __init__(self, topic: str, partition: int, offset: int, column: str, reason: str):
        self.topic, self.partition, self.offset = topic, partition, offset
        self.column, self.reason = column, reason
        super().__init__(f"{topic}-{partition} offset {offset}: the {column} cannot be decoded: "
                         f"{reason} (mode=PERMISSIVE reads it as null)")

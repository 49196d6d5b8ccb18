"""Options of the ``sparklog`` data source, with Spark's Kafka-source names and meanings.

A job written for ``format("kafka")`` runs with ``format("sparklog")`` and the
same options. :func:`parse` turns the (case-insensitive) option map into a
frozen :class:`SourceOptions` and raises :class:`~pipeline.errors.InvalidSourceOption`
for anything unknown or malformed, naming the option, as the Kafka source does.

Which topics (exactly one):
    ``subscribe``          comma-separated topic names
    ``subscribePattern``   a regular expression a whole topic name must match
    ``assign``             JSON ``{"topicA": [0, 1], "topicB": [2]}``

Where to start and stop (offsets per partition; JSON uses -2 = earliest, -1 = latest):
    ``startingOffsets``    ``earliest`` | ``latest`` | JSON ``{"t": {"0": 23, "1": -2}}``
                           (default: ``earliest`` for batch, ``latest`` for streaming)
    ``endingOffsets``      ``latest`` | JSON (batch only; default ``latest``)
    ``startingTimestamp``  ms: every partition starts at its first record at or after it
    ``startingOffsetsByTimestamp``  JSON ``{"t": {"0": 1700000000000}}``
    ``startingOffsetsByTimestampStrategy``  ``error`` (default) | ``latest`` when no
                           record is that new
    ``endingTimestamp`` / ``endingOffsetsByTimestamp``  batch only; no record that
                           new = the high watermark
    Precedence, as in Kafka: startingTimestamp > startingOffsetsByTimestamp > startingOffsets.

Streaming admission control:
    ``maxOffsetsPerTrigger``   at most this many offsets per micro-batch, shared
                               across partitions in proportion to their backlog
    ``minOffsetsPerTrigger``   wait for this many new offsets ...
    ``maxTriggerDelay``        ... but no longer than this (``15m`` default; ``10s``, ``500ms``;
                               a bare number is milliseconds)

Splitting and behaviour:
    ``minPartitions``          at least this many Spark partitions (large ranges split)
    ``maxRecordsPerPartition`` at most this many offsets per Spark partition
    ``failOnDataLoss``         ``true`` (default): fail when retention deleted offsets
                               the query needs; ``false``: skip to the log start, warn
    ``includeHeaders``         add the ``headers`` column (default ``false``)
    ``kafka.isolation.level``  ``read_uncommitted`` (default, Kafka's) | ``read_committed``:
    (or ``isolation.level``)   read_committed reads below each partition's last stable
                               offset only ("latest" and a stream's latest offset are the
                               LSO, so an open transaction is read after it commits) and
                               never returns an aborted transaction's records; offsets
                               keep their gaps (markers, aborted records)

Decoding by the Schema Registry in the same store (sparklog's; :mod:`pipeline.registry_decode`):
    ``valueFormat``            ``avro`` | ``jsonschema`` | ``protobuf``: ``value`` becomes the typed value
    ``keyFormat``              (Confluent's wire format), and ``valueSchemaId`` / ``keySchemaId``
                               (int) the writer schema's id each record carried
    ``valueSubject``           the reader schema's subject (default ``<topic>-value`` /
    ``keySubject``             ``<topic>-key``: one topic, or name the subject)
    ``valueSchemaVersion``     ``latest`` (default, taken when the DataFrame is made) or a
    ``keySchemaVersion``       version number
    ``valueProtobufMessage``   with ``protobuf``: the column's message by its full name
    ``keyProtobufMessage``     (``package.Message``, a nested one ``package.Outer.Inner``;
                               default: the file's first message), as ``from_protobuf``'s
                               ``messageName``; a record written as another message is
                               undecodable (``mode``). A name the reader schema lacks is
                               refused at ``load()``, listing the file's messages
    ``mode``                   ``FAILFAST`` (default: an undecodable record fails the query,
                               naming its offset) | ``PERMISSIVE`` (it reads as null), as
                               ``from_avro``'s

The store (sparklog's own options):
    ``store``                  fsspec URL of the log (default: setting ``store.url``)
    ``storageOptions``         JSON of fsspec storage options (e.g. s3fs ``key``, ``secret``,
                               ``client_kwargs``)
    ``store.s3.endpoint.url``, ``store.s3.key``, ``store.s3.secret``  shortcuts for S3
                               (the endpoint defaults to setting ``store.s3.endpoint.url``)

Accepted and ignored, so Kafka jobs run unchanged: every other ``kafka.*`` option
(``kafka.bootstrap.servers`` ...), ``groupIdPrefix``, ``fetchOffset.numRetries``,
``fetchOffset.retryIntervalMs``, ``kafkaConsumer.pollTimeoutMs``.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from typing import Any

from conf import durations
from conf.errors import ConfigError
from pipeline.errors import InvalidSourceOption

EARLIEST, LATEST = -2, -1
READ_UNCOMMITTED, READ_COMMITTED = "read_uncommitted", "read_committed"  # Kafka's names

_KNOWN = {
    "store", "storageoptions", "store.s3.endpoint.url", "store.s3.key", "store.s3.secret",
    "subscribe", "subscribepattern", "assign",
    "startingoffsets", "endingoffsets", "startingtimestamp", "startingoffsetsbytimestamp",
    "startingoffsetsbytimestampstrategy", "endingtimestamp", "endingoffsetsbytimestamp",
    "maxoffsetspertrigger", "minoffsetspertrigger", "maxtriggerdelay",
    "minpartitions", "maxrecordsperpartition", "failondataloss", "includeheaders",
    "isolation.level", "kafka.isolation.level",
    "valueformat", "keyformat", "valuesubject", "keysubject", "valueschemaversion",
    "keyschemaversion", "valueprotobufmessage", "keyprotobufmessage", "mode",
}
DECODE_FORMATS = ("avro", "jsonschema", "protobuf")
FAILFAST, PERMISSIVE = "FAILFAST", "PERMISSIVE"
_IGNORED = {"groupidprefix", "fetchoffset.numretries", "fetchoffset.retryintervalms",
            "kafkaconsumer.polltimeoutms"}
_STREAM_ONLY = ("maxoffsetspertrigger", "minoffsetspertrigger", "maxtriggerdelay")
_BATCH_ONLY = ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp")

#: an offset spec: "earliest", "latest", or {topic: {partition: offset or -2/-1}}
OffsetSpec = str | dict[str, dict[int, int]]


@dataclasses.dataclass(frozen=True)
class SourceOptions:
    """The parsed options (see the module docstring for each one's meaning)."""

    store_url: str
    storage_options: dict[str, Any] | None
    subscribe: tuple[str, ...] | None
    subscribe_pattern: str | None
    assign: dict[str, tuple[int, ...]] | None
    starting_offsets: OffsetSpec | None
    ending_offsets: OffsetSpec
    starting_timestamp: int | None
    starting_by_timestamp: dict[str, dict[int, int]] | None
    timestamp_strategy: str
    ending_timestamp: int | None
    ending_by_timestamp: dict[str, dict[int, int]] | None
    max_offsets_per_trigger: int | None
    min_offsets_per_trigger: int | None
    max_trigger_delay_ms: int
    min_partitions: int | None
    max_records_per_partition: int | None
    fail_on_data_loss: bool
    include_headers: bool
    isolation_level: str  # READ_UNCOMMITTED | READ_COMMITTED
    given: frozenset[str]  # option names the user set (lower case)
    #: (column, format, subject or None for the topic's, version "latest" or a number,
    #: Protobuf message's full name or None for the file's first)
    decode: tuple[tuple[str, str, str | None, str | int, str | None], ...] = ()
    mode: str = FAILFAST

    def subject_topic(self) -> str:
        """The one topic whose ``-key`` / ``-value`` subjects are the default ones.
        Raises InvalidSourceOption when the query reads several or a pattern."""
        topics = self.subscribe or tuple(self.assign or ())
        if len(topics) != 1:
            raise InvalidSourceOption(
                "valueSubject", None, "decoding several topics, or a pattern, needs the "
                "subject named (valueSubject / keySubject): each topic has its own")
        return topics[0]

    def check_batch(self) -> None:
        """Reject what a batch query cannot mean (Kafka's rules)."""
        for name in _STREAM_ONLY:
            if name in self.given:
                raise InvalidSourceOption(name, None, "is only valid for streaming queries")
        if self.starting_offsets == "latest":
            raise InvalidSourceOption("startingOffsets", "latest",
                                      "a batch query cannot start at latest")
        if isinstance(self.starting_offsets, dict):
            _reject_value(self.starting_offsets, LATEST, "startingOffsets",
                          "-1 (latest) is not allowed as a starting offset of a batch query")
        if self.ending_offsets == "earliest":
            raise InvalidSourceOption("endingOffsets", "earliest",
                                      "a batch query cannot end at earliest")
        if isinstance(self.ending_offsets, dict):
            _reject_value(self.ending_offsets, EARLIEST, "endingOffsets",
                          "-2 (earliest) is not allowed as an ending offset")

    def check_stream(self) -> None:
        for name in _BATCH_ONLY:
            if name in self.given:
                raise InvalidSourceOption(name, None, "is not valid for streaming queries "
                                          "(a stream has no end)")

    @property
    def read_committed(self) -> bool:
        return self.isolation_level == READ_COMMITTED

    @property
    def store_description(self) -> dict[str, Any]:
        return {"url": self.store_url, "storage_options": self.storage_options}


def _reject_value(spec: dict[str, dict[int, int]], bad: int, option: str, reason: str) -> None:
    for topic, parts in spec.items():
        for p, off in parts.items():
            if off == bad:
                raise InvalidSourceOption(option, f"{topic}-{p}: {off}", reason)


def _bool(name: str, raw: str) -> bool:
    text = str(raw).strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise InvalidSourceOption(name, raw, "must be true or false")


def _int(name: str, raw: str, minimum: int) -> int:
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise InvalidSourceOption(name, raw, "must be an integer") from None
    if value < minimum:
        raise InvalidSourceOption(name, raw, f"must be at least {minimum}")
    return value


def parse_duration_ms(name: str, raw: str) -> int:
    """Option ``name``'s duration in ms (``conf.durations``: ``500ms``, ``10s``, ``15m``,
    ``1h``, ``2d``; a bare number is milliseconds, as in Spark's time strings).
    Raises InvalidSourceOption."""
    try:
        return durations.parse_duration_ms(str(raw), key=name)
    except ConfigError as e:
        raise InvalidSourceOption(name, raw, e.reason) from None


def _json(name: str, raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError as e:
        raise InvalidSourceOption(name, raw, f"is not valid JSON ({e})") from None


def _partition_map(name: str, raw: str, *, minimum: int) -> dict[str, dict[int, int]]:
    """``{"topic": {"0": 23}}`` -> {topic: {0: 23}}, every value an integer >= minimum."""
    doc = _json(name, raw)
    if not isinstance(doc, dict) or not doc:
        raise InvalidSourceOption(name, raw, 'must be a JSON object like {"topic": {"0": 23}}')
    out: dict[str, dict[int, int]] = {}
    for topic, parts in doc.items():
        if not isinstance(parts, dict):
            raise InvalidSourceOption(name, raw, f"topic {topic!r} must map partitions to numbers")
        out[topic] = {}
        for p, value in parts.items():
            try:
                partition = int(p)
            except ValueError:
                raise InvalidSourceOption(name, raw, f"partition {p!r} of {topic!r} is not a "
                                          f"number") from None
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise InvalidSourceOption(name, raw, f"{topic}-{p}: {value!r} must be an integer "
                                          f">= {minimum}")
            out[topic][partition] = value
    return out


def _isolation(opts: Mapping[str, str]) -> str:
    """``kafka.isolation.level`` or ``isolation.level`` (both given: they must agree)."""
    levels = {}
    for key, name in (("kafka.isolation.level", "kafka.isolation.level"),
                      ("isolation.level", "isolation.level")):
        if key in opts:
            level = str(opts[key]).strip().lower()
            if level not in (READ_UNCOMMITTED, READ_COMMITTED):
                raise InvalidSourceOption(name, opts[key],
                                          "must be read_uncommitted or read_committed")
            levels[name] = level
    if len(set(levels.values())) > 1:
        raise InvalidSourceOption("isolation.level", levels["isolation.level"],
                                  f"disagrees with kafka.isolation.level "
                                  f"({levels['kafka.isolation.level']})")
    return next(iter(levels.values()), READ_UNCOMMITTED)


def _offsets(name: str, raw: str | None) -> OffsetSpec | None:
    if raw is None:
        return None
    text = str(raw).strip()
    if text.lower() in ("earliest", "latest"):
        return text.lower()
    return _partition_map(name, text, minimum=-2)


def _assign(raw: str) -> dict[str, tuple[int, ...]]:
    doc = _json("assign", raw)
    if not isinstance(doc, dict) or not doc:
        raise InvalidSourceOption("assign", raw, 'must be a JSON object like {"topic": [0, 1]}')
    out = {}
    for topic, parts in doc.items():
        if not isinstance(parts, list) or not parts or any(
                isinstance(p, bool) or not isinstance(p, int) or p < 0 for p in parts):
            raise InvalidSourceOption("assign", raw, f"topic {topic!r} must map to a non-empty "
                                      f"list of partition numbers")
        out[topic] = tuple(sorted(set(parts)))
    return out


def parse_store(opts: Mapping[str, str]) -> tuple[str, dict[str, Any] | None]:
    """The store's URL and fsspec options from the (lower-cased) options ``store``,
    ``storageOptions`` and ``store.s3.*`` (shared by the source and the sink)."""
    import conf

    settings = None
    url = opts.get("store")
    if url is None or not str(url).strip():
        settings = conf.load()
        url = settings.store.url
    storage: dict[str, Any] = {}
    if "storageoptions" in opts:
        doc = _json("storageOptions", opts["storageoptions"])
        if not isinstance(doc, dict):
            raise InvalidSourceOption("storageOptions", opts["storageoptions"],
                                      "must be a JSON object of fsspec storage options")
        storage.update(doc)
    if str(url).startswith(("s3://", "s3a://")):
        endpoint = opts.get("store.s3.endpoint.url")
        if endpoint is None:
            settings = settings or conf.load()
            endpoint = settings.store.s3_endpoint_url or None
        if endpoint:
            storage.setdefault("client_kwargs", {}).setdefault("endpoint_url", endpoint)
        if "store.s3.key" in opts:
            storage["key"] = opts["store.s3.key"]
        if "store.s3.secret" in opts:
            storage["secret"] = opts["store.s3.secret"]
    return str(url), storage or None


def _decode(opts: Mapping[str, str]
            ) -> tuple[tuple[str, str, str | None, str | int, str | None], ...]:
    """The ``keyFormat`` / ``valueFormat`` options and their subjects, versions and
    Protobuf messages."""
    out = []
    for column in ("key", "value"):
        name = f"{column}format"
        if name not in opts:
            for extra, shown in (("subject", "Subject"), ("schemaversion", "SchemaVersion"),
                                 ("protobufmessage", "ProtobufMessage")):
                if f"{column}{extra}" in opts:
                    raise InvalidSourceOption(f"{column}{shown}", opts[f"{column}{extra}"],
                                              f"needs {column}Format")
            continue
        fmt = str(opts[name]).strip().lower()
        if fmt not in DECODE_FORMATS:
            raise InvalidSourceOption(f"{column}Format", opts[name], "must be avro, "
                                      "jsonschema or protobuf")
        subject = str(opts.get(f"{column}subject", "")).strip() or None
        raw = str(opts.get(f"{column}schemaversion", "latest")).strip().lower()
        version: str | int = raw if raw == "latest" else \
            _int(f"{column}SchemaVersion", raw, 1)
        out.append((column, fmt, subject, version, _message(opts, column, fmt)))
    return tuple(out)


def _message(opts: Mapping[str, str], column: str, fmt: str) -> str | None:
    """``keyProtobufMessage`` / ``valueProtobufMessage``: a full name (checked against
    the reader schema later, in ``plan_column``), only with ``protobuf``."""
    raw = opts.get(f"{column}protobufmessage")
    if raw is None:
        return None
    option = f"{column}ProtobufMessage"
    if fmt != "protobuf":
        raise InvalidSourceOption(option, raw, f"needs {column}Format=protobuf, not {fmt}")
    name = str(raw).strip().lstrip(".")  # ".pkg.M", protoc's spelling of a full name
    if not name or not all(part.isidentifier() for part in name.split(".")):
        raise InvalidSourceOption(option, raw, "must be a message's full name, e.g. "
                                  "package.Message or package.Outer.Inner")
    return name


def parse(options: Mapping[str, str]) -> SourceOptions:
    """Parse the data source's options; raises InvalidSourceOption naming the bad one."""
    opts = {str(k).lower(): v for k, v in options.items()}
    for name in opts:
        if name not in _KNOWN and name not in _IGNORED and not name.startswith("kafka."):
            raise InvalidSourceOption(name, None, "is not an option of the sparklog source "
                                      "(see pipeline/options.py for the list)")
    chosen = [n for n in ("subscribe", "subscribepattern", "assign") if n in opts]
    if len(chosen) != 1:
        raise InvalidSourceOption(
            "subscribe", None, "exactly one of subscribe, subscribePattern or assign is required"
            + (f" (got {', '.join(chosen)})" if chosen else ""))

    subscribe = pattern = assign = None
    if "subscribe" in opts:
        subscribe = tuple(t.strip() for t in str(opts["subscribe"]).split(",") if t.strip())
        if not subscribe:
            raise InvalidSourceOption("subscribe", opts["subscribe"], "names no topic")
    elif "subscribepattern" in opts:
        pattern = str(opts["subscribepattern"])
        try:
            re.compile(pattern)
        except re.error as e:
            raise InvalidSourceOption("subscribePattern", pattern, f"is not a valid regular "
                                      f"expression ({e})") from None
    else:
        assign = _assign(opts["assign"])

    strategy = str(opts.get("startingoffsetsbytimestampstrategy", "error")).strip().lower()
    if strategy not in ("error", "latest"):
        raise InvalidSourceOption("startingOffsetsByTimestampStrategy", strategy,
                                  "must be error or latest")
    ending = _offsets("endingOffsets", opts.get("endingoffsets")) or "latest"
    max_trigger = _int("maxOffsetsPerTrigger", opts["maxoffsetspertrigger"], 1) \
        if "maxoffsetspertrigger" in opts else None
    min_trigger = _int("minOffsetsPerTrigger", opts["minoffsetspertrigger"], 1) \
        if "minoffsetspertrigger" in opts else None
    if max_trigger is not None and min_trigger is not None and min_trigger > max_trigger:
        raise InvalidSourceOption("minOffsetsPerTrigger", min_trigger,
                                  f"is larger than maxOffsetsPerTrigger ({max_trigger})")
    url, storage = parse_store(opts)
    return SourceOptions(
        store_url=url, storage_options=storage,
        subscribe=subscribe, subscribe_pattern=pattern, assign=assign,
        starting_offsets=_offsets("startingOffsets", opts.get("startingoffsets")),
        ending_offsets=ending,
        starting_timestamp=_int("startingTimestamp", opts["startingtimestamp"], 0)
        if "startingtimestamp" in opts else None,
        starting_by_timestamp=_partition_map("startingOffsetsByTimestamp",
                                             opts["startingoffsetsbytimestamp"], minimum=0)
        if "startingoffsetsbytimestamp" in opts else None,
        timestamp_strategy=strategy,
        ending_timestamp=_int("endingTimestamp", opts["endingtimestamp"], 0)
        if "endingtimestamp" in opts else None,
        ending_by_timestamp=_partition_map("endingOffsetsByTimestamp",
                                           opts["endingoffsetsbytimestamp"], minimum=0)
        if "endingoffsetsbytimestamp" in opts else None,
        max_offsets_per_trigger=max_trigger,
        min_offsets_per_trigger=min_trigger,
        max_trigger_delay_ms=parse_duration_ms("maxTriggerDelay",
                                               opts.get("maxtriggerdelay", "15m")),
        min_partitions=_int("minPartitions", opts["minpartitions"], 1)
        if "minpartitions" in opts else None,
        max_records_per_partition=_int("maxRecordsPerPartition", opts["maxrecordsperpartition"], 1)
        if "maxrecordsperpartition" in opts else None,
        fail_on_data_loss=_bool("failOnDataLoss", opts.get("failondataloss", "true")),
        include_headers=_bool("includeHeaders", opts.get("includeheaders", "false")),
        isolation_level=_isolation(opts),
        given=frozenset(opts),
        decode=_decode(opts),
        mode=_mode(opts.get("mode", FAILFAST)),
    )


def _mode(raw: str) -> str:
    mode = str(raw).strip().upper()
    if mode not in (FAILFAST, PERMISSIVE):
        raise InvalidSourceOption("mode", raw, "must be FAILFAST or PERMISSIVE")
    return mode

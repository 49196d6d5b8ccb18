"""THE on-disk format of sparklog: paths, segments, manifests, the commit protocol.

Nothing outside this package builds a storage path or opens a segment. Start
with :func:`open_log`::

    log = open_log("file:///var/lib/sparklog")          # or s3://bucket/prefix, memory://x
    log.create_topic("clicks", {"partitions": 4, "retention.ms": 3_600_000})
    writer = log.partition("clicks", 0).claim("gateway-1")
    writer.append(pa.table({"key": [b"k"], "value": [b"v"]}))
    for batch in log.partition("clicks", 0).read(0): ...

A process opens its store from the settings with :func:`open_log_from_settings`,
or once per process with :func:`shared_log` (see ``opening``).

The format itself is specified in the docstrings of ``paths`` (layout),
``segment`` (record files), ``manifest`` (partition snapshots) and
``commit`` (the commit protocol and crash recovery). A partition's code is one
module per job behind ``partition.PartitionLog``: ``versions``, ``commit``,
``segment_commit``, ``reader``, ``writer``, ``vacuum``. Storage is ``store``
(the interface and its atomicity contract) with ``local_store`` and
``fsspec_store``; ``topics`` holds :class:`Log`, ``group_offsets`` and
``maintenance_history`` the store's small documents, ``maintenance`` the
skeleton every maintenance step runs. Transactions (Kafka's KIP-98): the
transaction log and its coordinator are ``transactions``, what a transactional
append and a control marker change in a partition ``txn_writes``, the manifest
fields and the read_committed rules ``manifest``.
"""

from log_layout.errors import *  # noqa: F401,F403  (the typed errors are part of the API)
from log_layout.errors import __all__ as _errors
from log_layout.idempotence import check_sequence
from log_layout.manifest import Manifest, ProducerBatch, SegmentInfo
from log_layout.opening import (open_log, open_log_from_settings, open_store, shared_log,
                                storage_options_for)
from log_layout.partition import (AppendResult, PartitionLog, PartitionWriter, UnreferencedFile,
                                  VacuumReport, wall_clock_ms)
from log_layout.segment import SCHEMA as SEGMENT_SCHEMA
from log_layout.store import FileInfo, Store
from log_layout.topics import Log, TopicInfo

__all__ = [*_errors, "Manifest", "ProducerBatch", "SegmentInfo", "check_sequence",
           "AppendResult", "PartitionLog", "PartitionWriter", "UnreferencedFile",
           "VacuumReport", "wall_clock_ms", "SEGMENT_SCHEMA", "FileInfo", "Store", "open_store",
           "Log", "TopicInfo", "open_log", "open_log_from_settings", "shared_log",
           "storage_options_for"]

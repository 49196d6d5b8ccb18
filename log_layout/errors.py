"""Typed errors of the log. Each carries its facts as attributes and reads as a
sentence with the numbers in it; ``code`` is the machine-readable name the
gateway puts in its error responses."""

from __future__ import annotations

from conf.errors import ConfigError, SparklogError
from conf.topic import InvalidTopicName

__all__ = [
    "SparklogError", "ConfigError", "InvalidTopicName", "StoreError", "UnknownTopic",
    "TopicExists", "UnknownPartition", "OffsetOutOfRange", "Fenced", "TopicRecreated",
    "CorruptSegment",
    "MissingSegment", "CorruptManifest", "MaintenanceConflict", "InvalidMaintenance",
    "InvalidRecords",
    "RecordTooLarge", "InvalidProducerEpoch", "OutOfOrderSequence",
    "InvalidAcl", "CorruptDocument", "OutcomeUnknown", "ProducerFenced", "InvalidTxnState",
    "LogEndMoved",
]


class StoreError(SparklogError):
    """The store URL is unusable (unknown scheme, missing filesystem package)."""

    code = "store_error"

    def __init__(self, url: str, reason: str):
        self.url, self.reason = url, reason
        super().__init__(f"store {url!r}: {reason}")


class UnknownTopic(SparklogError, LookupError):
    code = "unknown_topic"

    def __init__(self, topic: str):
        self.topic = topic
        super().__init__(f"topic {topic!r} does not exist")


class TopicExists(SparklogError):
    code = "topic_exists"

    def __init__(self, topic: str):
        self.topic = topic
        super().__init__(f"topic {topic!r} already exists")


class UnknownPartition(SparklogError, LookupError):
    code = "unknown_partition"

    def __init__(self, topic: str, partition: object, partitions: int):
        self.topic, self.partition, self.partitions = topic, partition, partitions
        super().__init__(f"topic {topic!r} has partitions 0..{partitions - 1}, "
                         f"not {partition!r}")


class OffsetOutOfRange(SparklogError, IndexError):
    """An offset outside ``[log_start, log_end]`` of a partition."""

    code = "offset_out_of_range"

    def __init__(self, topic: str, partition: int, offset: int, log_start: int, log_end: int):
        self.topic, self.partition, self.offset = topic, partition, offset
        self.log_start, self.log_end = log_start, log_end
        super().__init__(f"offset {offset} is out of range for {topic}-{partition}: "
                         f"the log holds offsets {log_start} to {log_end} "
                         f"(log start offset {log_start}, high watermark {log_end})")


class Fenced(SparklogError):
    """A writer lost its partition to a writer with a higher leader epoch."""

    code = "fenced_leader_epoch"

    def __init__(self, topic: str, partition: int, epoch: int, current_epoch: int):
        self.topic, self.partition = topic, partition
        self.epoch, self.current_epoch = epoch, current_epoch
        super().__init__(f"writer of {topic}-{partition} with leader epoch {epoch} is fenced: "
                         f"the partition's leader epoch is now {current_epoch}")


class LogEndMoved(SparklogError):
    """A conditional append found the partition's log end no longer where its writer read
    it: another append committed first (``PartitionWriter.append(if_next_offset=...)``)."""

    code = "log_end_moved"

    def __init__(self, topic: str, partition: int, expected: int, current: int):
        self.topic, self.partition = topic, partition
        self.expected, self.current = expected, current
        super().__init__(f"append to {topic}-{partition} was conditional on the log end "
                         f"{expected}, but it is now {current}")


class TopicRecreated(Fenced):
    """A writer's topic was deleted and created again: it may not write the new one."""

    code = "topic_recreated"

    def __init__(self, topic: str, partition: int, topic_id: str, current_id: str):
        SparklogError.__init__(
            self, f"writer of {topic}-{partition} belongs to topic id {topic_id or '(none)'}, "
                  f"but the topic was deleted and created again (id {current_id})")
        self.topic, self.partition = topic, partition
        self.epoch = self.current_epoch = -1
        self.topic_id, self.current_id = topic_id, current_id


class CorruptSegment(SparklogError):
    code = "corrupt_segment"

    def __init__(self, path: str, reason: str):
        self.path, self.reason = path, reason
        super().__init__(f"segment {path} is corrupt: {reason}")


class MissingSegment(CorruptSegment):
    """A manifest names a segment file the store does not have."""

    code = "missing_segment"

    def __init__(self, path: str, version: int):
        self.version = version
        super().__init__(path, f"manifest version {version} names it but the file is missing")


class CorruptManifest(SparklogError):
    code = "corrupt_manifest"

    def __init__(self, path: str, reason: str):
        self.path, self.reason = path, reason
        super().__init__(f"manifest {path} is corrupt: {reason}")


class MaintenanceConflict(SparklogError):
    """A maintenance commit gave up: another job already changed its segments."""

    code = "maintenance_conflict"

    def __init__(self, topic: str, partition: int, reason: str):
        self.topic, self.partition, self.reason = topic, partition, reason
        super().__init__(f"maintenance of {topic}-{partition} gave up: {reason}")


class InvalidMaintenance(SparklogError, ValueError):
    """A maintenance commit asked for something the log cannot do (a caller's bug)."""

    code = "invalid_maintenance"

    def __init__(self, topic: str, partition: int, reason: str):
        self.topic, self.partition, self.reason = topic, partition, reason
        super().__init__(f"maintenance of {topic}-{partition} refused: {reason}")


class InvalidRecords(SparklogError, ValueError):
    """Records handed to ``append`` do not fit the segment schema."""

    code = "invalid_records"

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(f"invalid records: {reason}")


class RecordTooLarge(SparklogError, ValueError):
    code = "record_too_large"

    def __init__(self, topic: str, size: int, limit: int):
        self.topic, self.size, self.limit = topic, size, limit
        super().__init__(f"a record of {size} bytes exceeds max.message.bytes={limit} "
                         f"of topic {topic!r}")


class InvalidProducerEpoch(SparklogError):
    code = "invalid_producer_epoch"

    def __init__(self, producer_id: int, epoch: int, current_epoch: int):
        self.producer_id, self.epoch, self.current_epoch = producer_id, epoch, current_epoch
        super().__init__(f"producer {producer_id} with epoch {epoch} is stale: "
                         f"the current epoch is {current_epoch}")


class OutOfOrderSequence(SparklogError):
    code = "out_of_order_sequence"

    def __init__(self, producer_id: int, partition: int, expected: int, got: int):
        self.producer_id, self.partition = producer_id, partition
        self.expected, self.got = expected, got
        super().__init__(f"producer {producer_id} sent sequence {got} to partition "
                         f"{partition}, expected {expected}")


class InvalidAcl(ConfigError):
    """An ACL binding or filter with a field that is not one Kafka's ACL model allows
    (``field`` names it: resource_type, name, pattern_type, principal, host, operation,
    permission)."""

    code = "invalid_acl"

    def __init__(self, field: str, value: object, reason: str):
        self.key = self.field = field  # ``key``: what a ConfigError names
        self.value, self.reason = value, reason
        SparklogError.__init__(self, f"invalid ACL {field} {value!r}: {reason}")


class CorruptDocument(SparklogError):
    """A small document of the store (ACLs, quotas) that cannot be parsed."""

    code = "corrupt_document"

    def __init__(self, path: str, reason: str):
        self.path, self.reason = path, reason
        super().__init__(f"document {path} is corrupt: {reason}")


class OutcomeUnknown(SparklogError, OSError):
    """A writer of a versioned document (``versioned_doc``) created its version but
    cannot tell whether the document holds it: the newest version names fewer
    versions below it than lie between. Like a store failure mid-write (hence an
    OSError), the change may or may not have taken effect."""

    code = "outcome_unknown"

    def __init__(self, folder: str, number: int, newest: int, named: int):
        self.folder, self.number, self.newest, self.named = folder, number, newest, named
        super().__init__(
            f"version {number} of {folder} was created, but whether the document holds "
            f"it is unknown: the newest, {newest}, names only the {named} versions down "
            f"from it")


class ProducerFenced(InvalidProducerEpoch):
    """A transactional producer whose epoch (or producer id) is no longer its
    transactional id's: a newer ``init_transactions`` or the timeout aborter fenced it
    (Kafka's PRODUCER_FENCED / INVALID_PRODUCER_EPOCH). It must stop; a new producer
    calls ``init_transactions`` again."""

    code = "producer_fenced"

    def __init__(self, transactional_id: str, producer_id: int, epoch: int,
                 current_producer_id: int, current_epoch: int):
        SparklogError.__init__(
            self, f"transactional id {transactional_id!r}: producer {producer_id} with "
                  f"epoch {epoch} is fenced: the current producer is {current_producer_id} "
                  f"with epoch {current_epoch}")
        self.transactional_id = transactional_id
        self.producer_id, self.epoch = producer_id, epoch
        self.current_producer_id, self.current_epoch = current_producer_id, current_epoch


class InvalidTxnState(SparklogError):
    """A transaction operation that its transaction's state does not allow (Kafka's
    INVALID_TXN_STATE): e.g. adding partitions while a commit is being completed."""

    code = "invalid_txn_state"

    def __init__(self, transactional_id: str, state: str, operation: str):
        self.transactional_id, self.state, self.operation = transactional_id, state, operation
        super().__init__(f"transactional id {transactional_id!r} is in state {state}: "
                         f"cannot {operation}")

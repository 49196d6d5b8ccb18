"""Transactions over Kafka's protocol (KIP-98): FindCoordinator for transactional ids,
InitProducerId with a ``transactional_id``, AddPartitionsToTxn, AddOffsetsToTxn,
TxnOffsetCommit and EndTxn, over the coordinator the HTTP routes use
(``server.transaction_service``; ``http.v3_transactions``). Transactional Produce is
``txn_produce``.

**The coordinator is the store.** Every transition of a transactional id is one
exclusive create of its document's next version, so any gateway may serve any id:
FindCoordinator with key type 1 answers this gateway, standalone or as a slot of the
broker application (unlike groups, which one slot coordinates).

**Mapping onto the coordinator.** AddOffsetsToTxn begins the transaction and names the
group (``add_offsets`` with no offsets yet); TxnOffsetCommit adds the offsets, pending
until the commit, exactly as ``POST /v3/transactions/{id}/offsets``. EndTxn ends it as
``:commit``/``:abort`` do: the committed offsets go through this gateway's group
coordinator (``server.groups.txn_offsets``), and read_committed long-polls of its
partitions are woken. Kafka's broker-to-broker AddPartitionsToTxn (v4+, batched,
``verify_only``) is not offered: clients use v0-v3. TxnOffsetCommit v3+ checks the
member id, generation (a KIP-848 member's epoch) and instance id it carries against the
group (KIP-447, ``txn_offsets.check_txn_committer``: UNKNOWN_MEMBER_ID,
ILLEGAL_GENERATION, FENCED_INSTANCE_ID), so a producer whose consumer lost its
partitions in a rebalance cannot commit their offsets.

**Transactions v2** (KIP-890): ApiVersions finalizes ``transaction.version`` 2
(``broker.FEATURES``); EndTxn v5 ends the transaction at the next epoch and answers
the producer id and epoch to go on with (``transactions.end_transaction(bump=True)``,
whose strict markers close the late-marker window); Produce v12 adds its partitions
(``txn_produce``); TxnOffsetCommit without AddOffsetsToTxn begins the transaction.

**Error codes** (Kafka's, per API version): an older producer epoch or id is
``PRODUCER_FENCED`` (90) where the version knows it (InitProducerId v4, the others v2,
TxnOffsetCommit v3; older: ``INVALID_PRODUCER_EPOCH``, 47); a call before
InitProducerId ``INVALID_PRODUCER_ID_MAPPING`` (49, Kafka's answer for an id without a
transaction); a transaction being completed (Prepare*) ``CONCURRENT_TRANSACTIONS``
(51, retriable); any other state that does not allow the call ``INVALID_TXN_STATE``
(48); a timeout outside 1..``coordinator.MAX_TIMEOUT_MS``
``INVALID_TRANSACTION_TIMEOUT`` (50); a transactional id that breaks the topic-name
rules sparklog keeps them to ``INVALID_REQUEST``; the store failing (StoreError,
OSError) ``COORDINATOR_NOT_AVAILABLE`` (15, retriable: the client asks again).

**ACLs** (Kafka's, per partition): AddPartitionsToTxn needs Write on the
TransactionalId (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED on every partition) and on
each topic (else TOPIC_AUTHORIZATION_FAILED on its partitions and
OPERATION_NOT_ATTEMPTED on the others: nothing is added); TxnOffsetCommit Write on the
TransactionalId, then Read on the group (GROUP_AUTHORIZATION_FAILED on every
partition), then Read on each topic (TOPIC_AUTHORIZATION_FAILED on its partitions, the
other topics' offsets added).
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from kio.schema.errors import ErrorCode

from conf.topic import InvalidTopicName, validate_topic_name
from ingest_gateway.protocol.groups import validate_group_id
from ingest_gateway.errors import FlushFailed, InvalidGroupId
from ingest_gateway.kafka import admin_topics
from ingest_gateway.kafka import codes, groups
from ingest_gateway.kafka import security as sec
from ingest_gateway.kafka.groups_protocol import INVALID_GROUP_ID
from ingest_gateway.kafka.context import ZERO, KafkaContext
from ingest_gateway.kafka.wire import Header, error, make, response_module
from ingest_gateway.server.groups.txn_offsets import check_txn_committer
from ingest_gateway.server import transaction_service as coordinator
from ingest_gateway.server.transaction_service import (PREPARED, InvalidProducerEpoch,
                                                       InvalidTxnState, StoreError,
                                                       end_transaction)

logger = logging.getLogger("sparklog.gateway.kafka")

API_FIND_COORDINATOR, API_INIT_PRODUCER_ID = 10, 22
API_ADD_PARTITIONS, API_ADD_OFFSETS, API_END_TXN, API_TXN_OFFSET_COMMIT = 24, 25, 26, 28

COORDINATOR_NOT_AVAILABLE = ErrorCode.coordinator_not_available
INVALID_TXN_STATE = ErrorCode.invalid_txn_state
INVALID_PRODUCER_ID_MAPPING = ErrorCode.invalid_producer_id_mapping
INVALID_TRANSACTION_TIMEOUT = ErrorCode.invalid_transaction_timeout
CONCURRENT_TRANSACTIONS = ErrorCode.concurrent_transactions
OPERATION_NOT_ATTEMPTED = ErrorCode.operation_not_attempted
KEY_TYPE_TRANSACTION = 1
#: the EndTxn version of transactions v2 clients (KIP-890: the epoch bumped at each end)
TV2_END_TXN = 5
#: Kafka's transaction.version feature: ApiVersions finalizes level 2 (transactions v2)
TRANSACTION_VERSION = "transaction.version"
TRANSACTION_VERSION_LEVEL = 2

#: api key -> (min, max) version offered (AddPartitionsToTxn v4+ is broker-to-broker)
OFFERED: dict[int, tuple[int, int]] = {
    API_ADD_PARTITIONS: (0, 3),
    API_ADD_OFFSETS: (0, 4),
    API_END_TXN: (0, 5),
    API_TXN_OFFSET_COMMIT: (0, 4),
}
#: the first version of each API whose clients know PRODUCER_FENCED (KIP-588)
_FENCED_FROM = {API_INIT_PRODUCER_ID: 4, API_ADD_PARTITIONS: 2, API_ADD_OFFSETS: 2,
                API_END_TXN: 2, API_TXN_OFFSET_COMMIT: 3, 0: 1 << 15}


def code_of(e: BaseException, head: Header) -> int:
    """Kafka's code for a coordinator call's failure at this API version (module doc)."""
    if isinstance(e, InvalidProducerEpoch):  # ProducerFenced is one
        fenced = head.api_version >= _FENCED_FROM.get(head.api_key, 1 << 15)
        return codes.PRODUCER_FENCED if fenced else codes.INVALID_PRODUCER_EPOCH
    if isinstance(e, InvalidTxnState):
        if e.state == "Unknown":
            return INVALID_PRODUCER_ID_MAPPING
        return CONCURRENT_TRANSACTIONS if e.state in PREPARED \
            else INVALID_TXN_STATE
    if isinstance(e, InvalidTopicName):
        return codes.INVALID_REQUEST
    if isinstance(e, (StoreError, FlushFailed, OSError)):  # the store failing: retriable
        return COORDINATOR_NOT_AVAILABLE
    code = codes.code_of(e)
    if code == codes.UNKNOWN_SERVER_ERROR:
        logger.error("Kafka transaction call (api key %d) failed", head.api_key, exc_info=e)
    return code


async def _run(ctx: KafkaContext, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """``fn`` on the batcher's pool: every coordinator call reads and writes the store."""
    return await ctx.batcher.run_blocking(functools.partial(fn, *args, **kwargs))


async def find_coordinator(ctx: KafkaContext, head: Header, req: Any) -> Any:
    """Key type 1 (transactional ids): this gateway (module doc); groups: ``groups``'."""
    if getattr(req, "key_type", 0) != KEY_TYPE_TRANSACTION:
        return await groups.find_coordinator(ctx, head, req)
    mod = response_module(API_FIND_COORDINATOR, head.api_version)
    keys = list(req.coordinator_keys) if hasattr(req, "coordinator_keys") else [req.key]
    found = []
    for key in keys:
        try:
            validate_topic_name(key)
            found.append((key, ctx.node_id, ctx.host, ctx.port, codes.NONE, None))
        except InvalidTopicName as e:
            found.append((key, -1, "", -1, codes.INVALID_REQUEST, str(e)))
    return groups.coordinator_answer(mod, found)


async def init_producer_id(ctx: KafkaContext, head: Header, req: Any) -> Any:
    """With a ``transactional_id``: ``transaction_service.init`` (a new epoch,
    fencing the older producer, its open transaction aborted); without: an idempotent
    producer id, as ``broker.init_producer_id``."""
    tid = req.transactional_id
    if tid is None:
        return await admin_topics.init_producer_id(ctx, head, req)
    mod = response_module(API_INIT_PRODUCER_ID, head.api_version)
    pid, epoch = getattr(req, "producer_id", -1), getattr(req, "producer_epoch", -1)
    timeout_ms = int(req.transaction_timeout.total_seconds() * 1000)
    if not 0 < timeout_ms <= coordinator.MAX_TIMEOUT_MS:
        return _init_answer(mod, INVALID_TRANSACTION_TIMEOUT, -1, -1)
    try:
        validate_topic_name(tid)
        new = await coordinator.init(ctx.gateway, tid, timeout_ms, producer_id=pid,
                                     epoch=epoch)
    except Exception as e:  # noqa: BLE001 - every failure is an error code
        return _init_answer(mod, code_of(e, head), -1, -1)
    return _init_answer(mod, codes.NONE, *new)


def _init_answer(mod: Any, code: int, pid: int, epoch: int) -> Any:
    return make(mod.InitProducerIdResponse, throttle_time=ZERO, error_code=error(code),
                producer_id=pid, producer_epoch=epoch)


async def add_partitions(ctx: KafkaContext, head: Header, req: Any) -> Any:
    """AddPartitionsToTxn v0-v3: every partition added, or none (each answers the
    same code; an unknown topic or partition is refused before anything is added)."""
    mod = response_module(API_ADD_PARTITIONS, head.api_version)
    tid = req.v3_and_below_transactional_id
    pairs = [(t.name, int(p)) for t in req.v3_and_below_topics for p in t.partitions]
    denied = _add_denied(ctx, tid, [t.name for t in req.v3_and_below_topics])
    code = OPERATION_NOT_ATTEMPTED if any(denied.values()) else codes.NONE
    try:
        if code == codes.NONE:
            validate_topic_name(tid)
            await coordinator.add_partitions(ctx.gateway, tid, req.v3_and_below_producer_id,
                                             req.v3_and_below_producer_epoch, pairs)
    except Exception as e:  # noqa: BLE001 - every failure is an error code
        code = code_of(e, head)
    results = tuple(make(mod.AddPartitionsToTxnTopicResult, name=t.name, results_by_partition=tuple(
        make(mod.AddPartitionsToTxnPartitionResult, partition_index=p,
             partition_error_code=error(denied[t.name] or code)) for p in t.partitions))
        for t in req.v3_and_below_topics)
    return make(mod.AddPartitionsToTxnResponse, throttle_time=ZERO,
                results_by_topic_v3_and_below=results)


def _add_denied(ctx: KafkaContext, tid: str, topics: list[str]) -> dict[str, int]:
    """Topic -> 0 or Kafka's code of a denial for AddPartitionsToTxn (module doc)."""
    txn_code = sec.refused(ctx, "Write", "TransactionalId", tid)
    return {t: txn_code or sec.refused(ctx, "Write", "Topic", t) for t in topics}


async def add_offsets(ctx: KafkaContext, head: Header, req: Any) -> Any:
    """AddOffsetsToTxn: the group joins the transaction (offsets follow by
    TxnOffsetCommit)."""
    mod = response_module(API_ADD_OFFSETS, head.api_version)
    code = codes.NONE
    try:
        validate_topic_name(req.transactional_id)
        validate_group_id(req.group_id)
        await coordinator.add_offsets(ctx.gateway, req.transactional_id, req.producer_id,
                                      req.producer_epoch, req.group_id, {})
    except Exception as e:  # noqa: BLE001 - every failure is an error code
        code = _group_code(e, head)
    return make(mod.AddOffsetsToTxnResponse, throttle_time=ZERO, error_code=error(code))


def _group_code(e: BaseException, head: Header) -> int:
    return INVALID_GROUP_ID if isinstance(e, InvalidGroupId) else code_of(e, head)


async def txn_offset_commit(ctx: KafkaContext, head: Header, req: Any) -> Any:
    """TxnOffsetCommit: the offsets are pending in the transaction until EndTxn commits
    them (``transaction_service.add_offsets``, as the HTTP route); all or nothing (of the
    topics the principal may commit: module doc)."""
    mod = response_module(API_TXN_OFFSET_COMMIT, head.api_version)
    whole = sec.refused(ctx, "Write", "TransactionalId", req.transactional_id) \
        or sec.refused(ctx, "Read", "Group", req.group_id)
    denied = {t.name: whole or sec.refused(ctx, "Read", "Topic", t.name) for t in req.topics}
    offsets: dict[str, dict[int, int]] = {}
    for t in req.topics:
        for p in t.partitions if not denied[t.name] else ():
            offsets.setdefault(t.name, {})[p.partition_index] = p.committed_offset
    code = codes.NONE
    if not whole and (offsets or not req.topics):  # else nothing this principal may add
        code = await _add_txn_offsets(ctx, head, req, offsets)
    topics = tuple(make(mod.TxnOffsetCommitResponseTopic, name=t.name, partitions=tuple(
        make(mod.TxnOffsetCommitResponsePartition, partition_index=p.partition_index,
             error_code=error(denied[t.name] or code)) for p in t.partitions))
        for t in req.topics)
    return make(mod.TxnOffsetCommitResponse, throttle_time=ZERO, topics=topics)


async def _add_txn_offsets(ctx: KafkaContext, head: Header, req: Any,
                           offsets: dict[str, dict[int, int]]) -> int:
    """``transaction_service.add_offsets`` of a TxnOffsetCommit; its error code."""
    try:
        validate_topic_name(req.transactional_id)
        validate_group_id(req.group_id)
        for topic, parts in offsets.items():
            validate_topic_name(topic)
            if any(o < 0 for o in parts.values()):
                raise _BadOffset(topic)
        # KIP-447: the consumer's member and generation (v3+) must still be the group's
        await _run(ctx, check_txn_committer, ctx.gateway.hub().coordinator,
                   req.group_id, getattr(req, "member_id", "") or "",
                   getattr(req, "generation_id", -1),
                   getattr(req, "group_instance_id", None))
        await coordinator.add_offsets(ctx.gateway, req.transactional_id, req.producer_id,
                                      req.producer_epoch, req.group_id, offsets)
    except _BadOffset:
        return codes.INVALID_REQUEST
    except Exception as e:  # noqa: BLE001 - every failure is an error code
        return _group_code(e, head)
    return codes.NONE


class _BadOffset(ValueError):
    def __init__(self, topic: str):
        super().__init__(f"a negative offset for topic {topic!r}")


async def end_txn(ctx: KafkaContext, head: Header, req: Any) -> Any:
    """EndTxn: commit or abort, as ``POST /v3/transactions/{id}:commit|abort``; v5+
    (transactions v2, KIP-890) moves the producer to the next epoch and answers it."""
    mod = response_module(API_END_TXN, head.api_version)
    code, pid, epoch = codes.NONE, -1, -1
    try:
        validate_topic_name(req.transactional_id)
        pid, epoch = await end_transaction(
            ctx.gateway, req.transactional_id, req.producer_id, req.producer_epoch,
            bool(req.committed), bump=head.api_version >= TV2_END_TXN,
            bound_markers=True)  # Kafka's transactional producers send at acks=all
    except Exception as e:  # noqa: BLE001 - every failure is an error code
        code, pid, epoch = code_of(e, head), -1, -1
    return make(mod.EndTxnResponse, throttle_time=ZERO, error_code=error(code),
                producer_id=pid, producer_epoch=epoch)


#: the handlers the listener serves (FindCoordinator and InitProducerId replace the
#: group and admin ones: they answer those as before and add transactional ids)
HANDLERS = {
    API_FIND_COORDINATOR: find_coordinator,
    API_INIT_PRODUCER_ID: init_producer_id,
    API_ADD_PARTITIONS: add_partitions,
    API_ADD_OFFSETS: add_offsets,
    API_END_TXN: end_txn,
    API_TXN_OFFSET_COMMIT: txn_offset_commit,
}

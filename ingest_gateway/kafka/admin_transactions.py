"""ListTransactions, DescribeTransactions and DescribeProducers over the Kafka protocol:
what ``kafka-transactions.sh list``, ``describe``, ``describe-producers`` and
``find-hanging`` send.

Read only, from the one place the state lives, through ``server.transaction_admin``
(which REST v3 ``GET /v3/transactions`` reads too): the transaction log and each
partition's manifest (``sparklog transactions producers`` reads the same). Every read
runs off the event loop.

**ListTransactions** (v0-v2) answers every transactional id with its producer id and
state (Kafka's state names: the log keeps them), filtered as Kafka's
``TransactionStateManager.listTransactionStates``: by state (a name Kafka does not know
is returned in ``unknown_state_filters`` and matches nothing), by producer id, by
duration (v1, KIP-994: transactions started more than ``duration_filter`` ms ago) and
by a regular expression the whole id must match (v2, KIP-1152), matched with Google's
RE2 (linear time whatever the pattern, as Kafka's group regexes; the KIP-848
coordinator uses it too); one RE2 refuses, or over ``MAX_PATTERN_CHARS``, answers
``INVALID_REGULAR_EXPRESSION``. Ids the principal may not Describe
are left out (Kafka's ACL).

**DescribeTransactions** answers each id's state, timeout, start time, producer id and
epoch and the partitions of its transaction (those of topics the principal may
Describe); an id never used answers ``TRANSACTIONAL_ID_NOT_FOUND``, one the principal
may not Describe ``TRANSACTIONAL_ID_AUTHORIZATION_FAILED``.

**DescribeProducers** answers, per partition, the producers its manifest keeps state
for: epoch, last sequence, the time of its newest batch kept (the largest record
timestamp of the segment holding it; -1 when none is kept) and the first offset of
its open transaction (-1: none). ``coordinator_epoch`` is -1: the transaction log has
no coordinator epochs (the store's exclusive versions order its changes). Under the
broker application a partition this gateway does not lead answers
``NOT_LEADER_OR_FOLLOWER``, as Kafka (the admin client then asks the leader). ACL: Read
on the topic (else ``TOPIC_AUTHORIZATION_FAILED`` for its partitions).

**WriteTxnMarkers** (what ``kafka-transactions.sh abort`` sends, through
``Admin.abortTransaction``, to end a hanging transaction): an ABORT marker for the
producer in each partition named, at the producer's epoch there
(``server.transaction_admin.abort_partition``, as ``sparklog transactions abort``), after which
the partition's read_committed long-polls are woken. A partition where the producer has
no open transaction (ended meanwhile) answers ``NONE``: there is nothing left to abort,
as a marker written twice changes nothing; an epoch older than the producer's there
``INVALID_PRODUCER_EPOCH`` (Kafka's check). Asked for a COMMIT: ``INVALID_REQUEST``.
**Broker to broker** (Kafka's coordinator-to-leader use of the same request): another
gateway's transaction coordinator forwards a partition's COMMIT or ABORT marker to this
gateway as its leader, marked by a ``coordinator_epoch`` of -2 or less that carries
the marker's bound (``server.transaction_markers``); it is written as asked, into this
gateway's hot journal (``server.transaction_admin.write_forwarded``), and a partition
this gateway does not lead, or lost to another's claim, answers
``NOT_LEADER_OR_FOLLOWER`` (the coordinator asks the new leader). ACL for both:
ClusterAction on the cluster (Kafka's; else ``CLUSTER_AUTHORIZATION_FAILED`` for every
partition).
"""

from __future__ import annotations

import datetime
from typing import Any

import re2

from kio.schema.errors import ErrorCode

from ingest_gateway.kafka import codes
from ingest_gateway.kafka import security as sec
from ingest_gateway.kafka.context import ZERO, KafkaContext
from ingest_gateway.kafka.wire import Header, error, make, response_module
from ingest_gateway.errors import BadRequest
from ingest_gateway.server import transaction_admin
from ingest_gateway.server.transaction_markers import Marker, decode_before


API_DESCRIBE_PRODUCERS, API_DESCRIBE_TRANSACTIONS, API_LIST_TRANSACTIONS = 61, 65, 66
API_WRITE_TXN_MARKERS = 27
#: Kafka 4.0's version floors up to the newest kio reads
OFFERED: dict[int, tuple[int, int]] = {
    API_WRITE_TXN_MARKERS: (1, 2),
    API_DESCRIBE_PRODUCERS: (0, 0),
    API_DESCRIBE_TRANSACTIONS: (0, 0),
    API_LIST_TRANSACTIONS: (0, 2),
}
#: Kafka's TransactionState names (``Dead`` is never listed; ``PrepareEpochFence`` is
#: never held in the log: an epoch fence is one version there)
STATES = frozenset({"Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit",
                    "CompleteAbort", "Dead", "PrepareEpochFence"})
TRANSACTIONAL_ID_NOT_FOUND = ErrorCode.transactional_id_not_found
INVALID_REGULAR_EXPRESSION = ErrorCode.invalid_regular_expression
#: the longest transactional id pattern compiled (as the group regexes' bound)
MAX_PATTERN_CHARS = 4096


async def list_transactions(ctx: KafkaContext, head: Header, req: Any) -> Any:
    mod = response_module(API_LIST_TRANSACTIONS, head.api_version)
    unknown = tuple(s for s in req.state_filters if s not in STATES)
    pattern = getattr(req, "transactional_id_pattern", None)
    code, states = codes.NONE, []
    matcher = None
    if pattern:
        options = re2.Options()
        options.log_errors = False  # the answer says it; no line on stderr per pattern
        try:
            if len(pattern) > MAX_PATTERN_CHARS:
                raise re2.error(f"over {MAX_PATTERN_CHARS} characters")
            matcher = re2.compile(pattern, options=options).fullmatch
        except re2.error:
            code = INVALID_REGULAR_EXPRESSION
    if code == codes.NONE:
        try:
            docs = await transaction_admin.list_all(ctx.gateway, matcher)
        except Exception as e:  # noqa: BLE001 - the answer's error code
            code, docs = codes.code_logged(e, "ListTransactions"), []
        wanted_states = set(req.state_filters)
        pids = set(req.producer_id_filters)
        duration = getattr(req, "duration_filter", -1)
        now = ctx.gateway.clock_ms()
        for tid, doc in docs:
            if doc["state"] == "Dead" or (pids and doc["producer_id"] not in pids):
                continue
            if wanted_states and doc["state"] not in wanted_states:
                continue
            if duration >= 0 and now - doc.get("started_ms", -1) <= duration:
                continue
            if not sec.allowed(ctx, "Describe", "TransactionalId", tid):
                continue
            states.append(make(mod.TransactionState, transactional_id=tid,
                               producer_id=doc["producer_id"],
                               transaction_state=doc["state"]))
    return make(mod.ListTransactionsResponse, throttle_time=ZERO, error_code=error(code),
                unknown_state_filters=unknown, transaction_states=tuple(states))


async def describe_transactions(ctx: KafkaContext, head: Header, req: Any) -> Any:
    mod = response_module(API_DESCRIBE_TRANSACTIONS, head.api_version)
    out = []
    for tid in req.transactional_ids:
        code, doc = codes.NONE, None
        if not sec.allowed(ctx, "Describe", "TransactionalId", tid):
            code = sec.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        else:
            try:
                doc = await transaction_admin.describe(ctx.gateway, tid)
                if doc is None:
                    code = TRANSACTIONAL_ID_NOT_FOUND
            except Exception as e:  # noqa: BLE001 - a per-id error code
                code = codes.code_logged(e, "DescribeTransactions")
        out.append(_state(ctx, mod, tid, code, doc or {}))
    return make(mod.DescribeTransactionsResponse, throttle_time=ZERO,
                transaction_states=tuple(out))


def _state(ctx: KafkaContext, mod: Any, tid: str, code: int, doc: dict) -> Any:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in doc.get("partitions", ()):
        by_topic.setdefault(topic, []).append(partition)
    topics = tuple(make(mod.TopicData, topic=t, partitions=tuple(sorted(ps)))
                   for t, ps in sorted(by_topic.items())
                   if sec.allowed(ctx, "Describe", "Topic", t))
    started = doc.get("started_ms", -1)
    return make(mod.TransactionState, error_code=error(code), transactional_id=tid,
                transaction_state=doc.get("state", ""),
                transaction_timeout=datetime.timedelta(milliseconds=doc.get("timeout_ms", 0)),
                transaction_start_time=datetime.datetime.fromtimestamp(
                    started / 1000, datetime.timezone.utc),
                producer_id=doc.get("producer_id", -1), producer_epoch=doc.get("epoch", -1),
                topics=topics)


async def describe_producers(ctx: KafkaContext, head: Header, req: Any) -> Any:
    mod = response_module(API_DESCRIBE_PRODUCERS, head.api_version)
    topics = []
    for t in req.topics:
        denied = sec.refused(ctx, "Read", "Topic", t.name)
        parts = []
        for p in t.partition_indexes:
            code, message, found = denied, None, []
            if not denied:
                try:
                    found = await transaction_admin.producers(ctx.gateway, t.name, p)
                except Exception as e:  # noqa: BLE001 - a per-partition error code
                    code, message = codes.code_logged(e, "DescribeProducers"), str(e)
            parts.append(make(mod.PartitionResponse, partition_index=p, error_code=error(code),
                              error_message=message, active_producers=tuple(
                                  make(mod.ProducerState, producer_id=s.producer_id,
                                       producer_epoch=s.epoch, last_sequence=s.last_sequence,
                                       last_timestamp=ts, coordinator_epoch=-1,
                                       current_txn_start_offset=s.current_txn_start_offset)
                                  for s, ts in found)))
        topics.append(make(mod.TopicResponse, name=t.name, partitions=tuple(parts)))
    return make(mod.DescribeProducersResponse, throttle_time=ZERO, topics=tuple(topics))


async def write_txn_markers(ctx: KafkaContext, head: Header, req: Any) -> Any:
    mod = response_module(API_WRITE_TXN_MARKERS, head.api_version)
    denied = sec.refused(ctx, "ClusterAction", "Cluster")
    out = []
    for mk in req.markers:
        forwarded, before = decode_before(mk.coordinator_epoch)
        topics = []
        for t in mk.topics:
            parts = []
            for p in t.partition_indexes:
                code = denied or (codes.INVALID_REQUEST if mk.transaction_result and
                                  not forwarded else 0)
                if not code:
                    try:
                        await _write_marker(ctx, mk, t.name, p, forwarded, before)
                    except Exception as e:  # noqa: BLE001 - a per-partition error code
                        code = codes.code_logged(e, "WriteTxnMarkers")
                parts.append(make(mod.WritableTxnMarkerPartitionResult, partition_index=p,
                                  error_code=error(code)))
            topics.append(make(mod.WritableTxnMarkerTopicResult, name=t.name,
                               partitions=tuple(parts)))
        out.append(make(mod.WritableTxnMarkerResult, producer_id=mk.producer_id,
                        topics=tuple(topics)))
    return make(mod.WriteTxnMarkersResponse, markers=tuple(out))


async def _write_marker(ctx: KafkaContext, mk: Any, topic: str, partition: int,
                        forwarded: bool, before: int | None) -> None:
    """One partition's marker of a WriteTxnMarkers entry: a coordinator's forwarded
    one (``forwarded``: written as asked, module doc) or an admin's ABORT."""
    if not forwarded:
        await transaction_admin.abort_partition(ctx.gateway, topic, partition,
                                                mk.producer_id, mk.producer_epoch)
        return
    if mk.producer_id < 0 or mk.producer_epoch < 0:
        raise BadRequest(f"a marker for producer {mk.producer_id} at epoch "
                         f"{mk.producer_epoch}")
    strict = getattr(mk, "transaction_version", 0) >= 2
    await transaction_admin.write_forwarded(ctx.gateway, Marker(
        topic, partition, mk.producer_id, mk.producer_epoch, bool(mk.transaction_result),
        strict, before))


HANDLERS = {API_WRITE_TXN_MARKERS: write_txn_markers,
            API_LIST_TRANSACTIONS: list_transactions,
            API_DESCRIBE_TRANSACTIONS: describe_transactions,
            API_DESCRIBE_PRODUCERS: describe_producers}

"""The Python clients of a sparklog gateway: what an application embeds.

::

    from ingest_gateway.client import Consumer, Producer

:class:`Producer` batches records per partition and posts them as Arrow to each
partition's leader gateway (``producer`` over ``accumulator``, ``sender``, ``sequences``,
``transactions``, ``topic_metadata``; ``batch``); :class:`Consumer`
reads through gateways or straight from the store (``consumer`` over ``subscription``,
``fetcher``, ``consumer_coordinator``; ``gateway_transport``, ``direct``). Both
take Kafka's bootstrap list and find leaders and group coordinators through
``cluster`` (``GET /metadata``), and talk HTTP through one ``session`` per gateway
with one retry policy. Importing this package loads no server
code (no Starlette, no uvicorn): only the shared ``ingest_gateway.errors`` besides
these modules (and ``log_layout``'s partitioner and errors); a consumer's direct mode
loads ``protocol.group_offsets`` (a group's offsets in the store) when it is built.
"""

from ingest_gateway.client.batch import BatchHandle, BatchMetadata, RecordMetadata, SendHandle
from ingest_gateway.client.consumer import Consumer
from ingest_gateway.client.consumer_coordinator import GroupMetadata
from ingest_gateway.protocol.groups import MemberState
from ingest_gateway.client.producer import Producer
from ingest_gateway.client.records import ArrowBatch, Record, TopicPartition
from ingest_gateway.errors import (GatewayError, IllegalState, NoOffsetForPartition,
                                   ProduceError)
from log_layout.errors import InvalidTxnState, ProducerFenced

__all__ = ["Producer", "Consumer", "Record", "ArrowBatch", "TopicPartition", "RecordMetadata",
           "BatchMetadata", "SendHandle", "BatchHandle", "MemberState", "GroupMetadata",
           "ProduceError", "IllegalState", "NoOffsetForPartition", "GatewayError",
           "ProducerFenced", "InvalidTxnState"]

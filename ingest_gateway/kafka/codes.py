"""Kafka's numeric error code of a typed error, from the gateway's one error table.

The table (``ingest_gateway.error_table``) gives each error class its Kafka code beside
its HTTP status; this module adds what only the Kafka side knows: an error that
carries its own code (``records``' errors: ``error_code``) answers it, and an
authorization refusal answers the code of the resource type refused. The names below
are kio's ``ErrorCode`` members (ints), for handlers that answer a code directly.
"""

from __future__ import annotations

import logging
from types import MappingProxyType

from kio.schema.errors import ErrorCode

from ingest_gateway.error_table import answer_of
from ingest_gateway.errors import NotAuthorized

UNKNOWN_SERVER_ERROR = ErrorCode.unknown_server_error
NONE = ErrorCode.none
OFFSET_OUT_OF_RANGE = ErrorCode.offset_out_of_range
LEADER_NOT_AVAILABLE = ErrorCode.leader_not_available
INVALID_REQUEST = ErrorCode.invalid_request
UNSUPPORTED_VERSION = ErrorCode.unsupported_version
INVALID_PRODUCER_EPOCH = ErrorCode.invalid_producer_epoch
PRODUCER_FENCED = ErrorCode.producer_fenced
UNKNOWN_TOPIC_ID = ErrorCode.unknown_topic_id
INVALID_RECORD = ErrorCode.invalid_record

#: Kafka's code of a denial, by the type of the resource refused
AUTHORIZATION_FAILED = MappingProxyType({
    "Topic": ErrorCode.topic_authorization_failed,
    "Group": ErrorCode.group_authorization_failed,
    "Cluster": ErrorCode.cluster_authorization_failed,
    "TransactionalId": ErrorCode.transactional_id_authorization_failed,
})


def code_of(exc: BaseException) -> int:
    """Kafka's error code for ``exc`` (UNKNOWN_SERVER_ERROR if none is known)."""
    own = getattr(exc, "error_code", None)
    if isinstance(own, int) and not isinstance(own, bool):
        return own
    if isinstance(exc, NotAuthorized):
        return AUTHORIZATION_FAILED.get(exc.resource_type,
                                        ErrorCode.cluster_authorization_failed)
    return answer_of(exc).kafka


def code_logged(exc: BaseException, what: str) -> int:
    """``code_of(exc)``, logging ``exc`` when it is unknown (UNKNOWN_SERVER_ERROR): a
    failure of ``what`` the client only sees as a code."""
    code = code_of(exc)
    if code == UNKNOWN_SERVER_ERROR:
        logging.getLogger("sparklog.gateway.kafka").warning("%s failed: %s", what, exc)
    return code

"""One gateway's life: its services built, its background tasks started, all stopped.

:func:`running_gateway` builds the :class:`~ingest_gateway.server.gateway.Gateway` (the
batcher, the cluster membership under the broker application, topic admin), starts
the membership, the protocols served beside HTTP (the composition root passes the
Kafka listener) and the timed-out transaction aborter, and on exit stops them in
reverse: the other protocols, the aborter, the authorizer's and quotas' refreshes,
the membership, and last the batcher, which flushes every accepted record. The
composition root (``ingest_gateway.runner``) enters it around uvicorn's serving; the
HTTP app enters it in its lifespan when it is not given a built gateway (tests that
run the app alone). :func:`gateway_parts` builds what both protocols use at their door
(the metrics, the credential verifiers both logins check with, the HTTP authenticator,
the authorizer and quotas): the composition root
builds them once and hands them to the HTTP app and, through the Gateway, to the Kafka
listener.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

import conf
from conf.errors import ConfigError
from ingest_gateway.server import transaction_markers, transaction_service
from ingest_gateway.server.batcher import Batcher
from ingest_gateway.server.gateway import Gateway
from ingest_gateway.server.metrics import GatewayMetrics
from ingest_gateway.server.topic_admin import TopicAdmin
from log_layout import Log

logger = logging.getLogger("sparklog.gateway")

Beside = Callable[[Gateway], AbstractAsyncContextManager]


@dataclasses.dataclass(frozen=True, eq=False)
class GatewayParts:
    """What both protocols use at their door, built once per gateway process: the
    metrics, the credential checks (``security.authentication.Verifiers``: the password
    file, the JWT verifier, the SCRAM credentials) that HTTP's authenticator and the
    Kafka listener's SASL login share, the HTTP authenticator over them (both None:
    ``authentication.method`` empty), the authorizer and quotas (each None when off)."""

    metrics: GatewayMetrics
    authenticator: Any = None
    verifiers: Any = None
    authorizer: Any = None
    quotas: Any = None


def gateway_parts(settings: conf.Settings, log_: Log) -> GatewayParts:
    """The metrics, verifiers, authenticator, authorizer and quotas of one gateway (see
    :class:`GatewayParts`). Raises ConfigError for bad security settings."""
    authenticator = verifiers = None
    if settings.authentication.method.strip():
        from ingest_gateway.security.authentication import Authenticator, Verifiers

        # one set of verifiers for both protocols (one password file and its cache, one
        # JWT verifier, one SCRAM credential cache)
        verifiers = Verifiers.from_settings(settings, log_.store)
        authenticator = Authenticator.from_settings(settings, verifiers=verifiers)
    authorizer, quotas = security_services(settings, log_)
    return GatewayParts(GatewayMetrics(), authenticator, verifiers, authorizer, quotas)


def security_services(settings: conf.Settings, log_: Log) -> tuple[Any, Any]:
    """(authorizer, quotas): each None when off. Quotas come with authentication or ACLs
    (a principal to count for). Raises ConfigError for bad security settings."""
    authorizer = quotas = None
    if settings.authorizer.enabled:
        from ingest_gateway.security.authorizer import Authorizer

        authorizer = Authorizer(log_, settings)
    if settings.authentication.method.strip() or authorizer is not None:
        from ingest_gateway.security.quotas import QuotaManager

        quotas = QuotaManager(log_, settings)
    return authorizer, quotas


def cluster_member(settings: conf.Settings, log_: Log, batcher: Batcher,
                   on_replaced: Callable[[], None]) -> Any:
    """The gateway's ClusterMember if ``gateway.broker.id`` makes it a slot of the broker
    application, else None (a standalone gateway leads every partition).
    Raises ConfigError for a broker.id that is not a slot number."""
    gw = settings.gateway
    if not gw.broker_id:
        return None
    from ingest_gateway.server.cluster_member import ClusterMember

    if not gw.broker_id.isdigit() or len(gw.broker_id) > 6:
        raise ConfigError("gateway.broker.id", gw.broker_id, "expected a slot number (0, 1, ...)")
    url = gw.advertised_listeners or gw.listeners.strip() or f"http://{gw.host}:{gw.port}"
    return ClusterMember(log_, batcher, int(gw.broker_id), url.rstrip("/"),
                         on_replaced=on_replaced)


@contextlib.asynccontextmanager
async def running_gateway(settings: conf.Settings, log_: Log, *, parts: GatewayParts,
                          gateway_id: str | None = None, flush_threads: int | None = None,
                          now_ms: Callable[[], int] | None = None,
                          on_replaced: Callable[[], None] = lambda: None,
                          beside: Sequence[Beside] = ()) -> AsyncIterator[Gateway]:
    """The gateway's services over ``parts`` (:func:`gateway_parts`), running until the
    block ends (on the event loop).

    ``on_replaced`` is called when a newer gateway took this one's slot (it should stop
    serving); ``beside``: other protocols on the same services, each entered with the
    gateway once it is built and exited before the batcher closes.
    """
    slot = settings.gateway.broker_id
    metrics, authorizer, quotas = parts.metrics, parts.authorizer, parts.quotas
    batcher = Batcher(log_, settings.gateway, topic_defaults=settings.topic, metrics=metrics,
                      gateway_id=gateway_id or (f"gw{slot}-{uuid.uuid4().hex[:8]}" if slot
                                                else None),
                      flush_threads=flush_threads)
    metrics.watch_buffer(lambda: batcher.buffered)
    member = cluster_member(settings, log_, batcher, on_replaced)
    if member is not None:
        batcher.cluster = member
    gateway = Gateway(settings, log_, batcher, metrics, TopicAdmin(log_, batcher, settings.topic),
                      cluster=member, authenticator=parts.authenticator,
                      verifiers=parts.verifiers, authorizer=authorizer,
                      quotas=quotas, now_ms=now_ms)
    if member is not None:
        await member.start()
    others = contextlib.AsyncExitStack()  # the protocols beside HTTP (Kafka's)
    for serve_beside in beside:
        await others.enter_async_context(serve_beside(gateway))
    if member is None:
        aborter = transaction_service.TimeoutAborter(
            batcher, log_, now_ms, markers=transaction_markers.router(gateway)).start()
    else:  # one slot at a time, less often: each round lists the store
        aborter = transaction_service.TimeoutAborter(
            batcher, log_, now_ms, interval_s=transaction_service.CLUSTER_ABORT_CHECK_S,
            should_run=member.owns_transaction_timeouts,
            markers=transaction_markers.router(gateway)).start()
    logger.info("gateway %s serving %s", batcher.id, log_.url)
    try:
        yield gateway
    finally:
        await others.aclose()
        await aborter.stop()
        for part in (authorizer, quotas):  # their refresh threads
            if part is not None and hasattr(part, "close"):
                part.close()
        if member is not None:
            await member.stop()
        await batcher.close()
        logger.info("gateway %s flushed and stopped", batcher.id)

"""Fixtures of the Kafka listener tests (``kafka_gateway``: the session's shared gateway
process with its Kafka listener on a local store; ``own_kafka_gateway``: one of the
module's own; ``tools``: Kafka's own command-line tools' jars); defined in
``kafka_gateway``."""

from tests.ingest_gateway.kafka.kafka_gateway import (  # noqa: F401
    kafka_gateway, kafka_log, kafka_store, own_kafka_gateway, own_kafka_log, own_kafka_store,
    tools)

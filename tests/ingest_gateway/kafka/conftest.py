"""Fixtures of the Kafka listener tests (``kafka_gateway``: a real gateway process with
its Kafka listener on a local store; ``tools``: Kafka's own command-line tools' jars);
defined in ``kafka_gateway``."""

from tests.ingest_gateway.kafka.kafka_gateway import (kafka_gateway, kafka_log,  # noqa: F401
                                                      kafka_store, tools)

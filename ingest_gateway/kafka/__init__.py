"""Kafka's wire protocol in the gateway: any Kafka client produces and consumes unchanged.

``listener`` (the TCP server, framing, pipelining, dispatch), ``wire`` (headers, the
APIs and versions offered, kio bodies), ``codes`` (the one error table to Kafka's
codes), ``broker`` (what handlers reach; ApiVersions, Metadata, InitProducerId,
CreateTopics, DeleteTopics), ``produce`` (Produce into the batcher), ``fetch`` (Fetch
through the consumer hub, ListOffsets), ``records`` (Kafka record batches <-> Arrow).
Started beside HTTP by the composition root (``runner``) when ``gateway.kafka.listeners``
is set.
"""

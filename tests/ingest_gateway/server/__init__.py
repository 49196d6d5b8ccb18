"""Tests of the core services (ingest_gateway/server/, security's authorizer and quotas) and of
the gateway as a whole behind either protocol: batcher, flush path, groups, transactions,
cluster, crashes, metrics, the Schema Registry."""

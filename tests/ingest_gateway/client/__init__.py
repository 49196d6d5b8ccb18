"""Tests of the client library (ingest_gateway/client/, the partitioner, the clients' HTTP
session): Producer, Consumer, direct mode, batching, routing."""

"""sparklog's Spark side.

``spark``    the SparkSession (Delta Lake, the ``sparklog`` source registered)
``source``   the ``sparklog`` data source: batch and Structured Streaming reads
``options``  its options (Spark Kafka-source names and meanings)
``planning`` driver-side planning from partition manifests: offsets, slices, data loss
``tables``   topics as Delta tables (append / MERGE), the SQL session's catalog
``errors``   typed errors of this layer
"""

"""Key-based log compaction with tombstones, and roll-up of small segments.

``cleaner`` holds Kafka's cleaner rules for one partition (plan from the
manifest, vectorised dedup, commit through ``log_layout``), ``rollup`` merges
runs of small segments; each is a ``log_layout.maintenance.MaintenanceStep``
(the skeleton and result type every maintenance step shares). The Spark job
that runs them over many partitions is ``jobs.maintain``.
"""

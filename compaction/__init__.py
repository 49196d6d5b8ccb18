"""Key-based log compaction with tombstones, as a Spark job."""

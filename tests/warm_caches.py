"""Fill the project's download caches once, before parallel test workers start.

A fresh clone has no ``.cache/hadoop`` (the MiniDFSCluster's jars), no ``.cache/kafka``
(the Apache Kafka broker of the benchmarks) and no ``.ivy2`` (Delta, Spark's Kafka
connector, S3A). Each is fetched on first use; under pytest-xdist several workers would
fetch the same one at once (two ``mvn`` runs renaming into one folder, two Ivy resolutions
in one cache), so the xdist controller calls :func:`warm` first (tests/conftest.py), one
download at a time. A warm cache costs nothing here: each step first checks for its files.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_SPARK_START = ("from pipeline.spark import session; "
                "session(master='local[1]', s3={s3}, source=False).stop()")


def _spark_cached(s3: bool) -> bool:
    import conf
    from pipeline.spark import _cached_jars, packages

    settings = conf.load().spark
    return _cached_jars(settings, packages(settings, s3=s3)) is not None


def warm(wanted: Callable[[str], bool], log: Callable[[str], None] = print) -> None:
    """Fetch what the selected tests need; ``wanted(marker)``: whether tests with that
    marker (``hdfs``, ``kafka_broker``, ``spark``, ``s3``) are selected."""
    if wanted("hdfs"):
        from bench.hdfs_side.minihdfs import CACHE
        from bench.kafka_side.fetch import maven_fetch
        from pipeline.spark import hadoop_version

        maven_fetch("org.apache.hadoop", "hadoop-client-minicluster", hadoop_version(),
                    cache=CACHE, log=log)
    if wanted("kafka_broker"):
        from bench.kafka_side.fetch import fetch_kafka

        fetch_kafka(tools=True, log=log)
    if wanted("spark"):
        # S3A only matters to the Spark tests on S3 (Delta beside the log on S3)
        for s3 in (False, True) if wanted("s3") else (False,):
            if not _spark_cached(s3):
                log(f"fetching Spark's packages{' with S3A' if s3 else ''} into .ivy2 (once)")
                subprocess.run([sys.executable, "-c", _SPARK_START.format(s3=s3)], cwd=ROOT,
                               check=True, timeout=1800)

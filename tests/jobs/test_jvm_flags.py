"""The test suite's JVM flags are one list (tests/jvm.py's QUICK_START), written twice:
there, and in tests/spark_conf/spark-defaults.conf for every Spark JVM."""

from __future__ import annotations

import os

from tests import jvm


def test_spark_defaults_carry_the_quick_start_flags():
    with open(os.path.join(jvm.SPARK_CONF_DIR, "spark-defaults.conf")) as f:
        conf = dict(line.split(None, 1) for line in f.read().splitlines()
                    if line.strip() and not line.startswith("#"))
    for key in ("spark.driver.defaultJavaOptions", "spark.executor.defaultJavaOptions"):
        assert conf[key].split() == list(jvm.QUICK_START), key

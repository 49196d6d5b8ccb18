"""Spark reading a topic whole: ``format("kafka")`` (Spark's own connector) vs ``format("sparklog")``.

Spark's Kafka connector (``spark-sql-kafka-0-10_2.13`` of the installed pyspark's
version) is fetched into ``.cache/kafka/`` like the broker. Only the connector,
its token provider, the ``kafka-clients`` it was built against and
``commons-pool2`` go on the classpath: the rest of what Maven resolves for it
(Scala, Hadoop, compression codecs) is pyspark's own, in other versions.
"""

from __future__ import annotations

import os
import time

from bench.kafka_side.fetch import maven_fetch

#: the jars of the connector's folder that go on Spark's classpath (by name prefix)
NEEDED = ("spark-sql-kafka-0-10_", "spark-token-provider-kafka-0-10_", "kafka-clients-",
          "commons-pool2-")


def connector_jars(log=print) -> list[str]:
    import pyspark

    jars = maven_fetch("org.apache.spark", "spark-sql-kafka-0-10_2.13", pyspark.__version__,
                       log=log)
    return sorted(os.path.join(jars.folder, f) for f in os.listdir(jars.folder)
                  if f.startswith(NEEDED))


class SparkReads:
    """One local SparkSession for the run; ``sum_length(side, ...)`` times one query."""

    def __init__(self, jars: list[str], master: str = "local[2]"):
        from pipeline.spark import session

        self.spark = session(master=master, app_name="bench-vs-kafka", extra={
            "spark.driver.extraClassPath": os.pathsep.join(jars),
            "spark.ui.showConsoleProgress": "false", "spark.sql.shuffle.partitions": "4"})
        self.spark.sparkContext.setLogLevel("ERROR")

    def sum_length(self, fmt: str, options: dict[str, str], expect: int) -> dict:
        """``sum(length(value))`` over the whole topic; records/s, checked against ``expect``."""
        from pyspark.sql import functions as F

        t0 = time.perf_counter()
        df = self.spark.read.format(fmt).options(**options).load()
        got = df.select(F.sum(F.length("value")), F.count("*")).first()
        elapsed = time.perf_counter() - t0
        if got[0] != expect:
            raise RuntimeError(f"format({fmt!r}) summed {got[0]} value bytes, expected {expect}")
        return {"msgs_per_s": got[1] / elapsed, "records": got[1], "elapsed_s": elapsed}

    def kafka(self, bootstrap: str, topic: str, expect: int) -> dict:
        return self.sum_length("kafka", {"kafka.bootstrap.servers": bootstrap, "subscribe": topic,
                                         "startingOffsets": "earliest",
                                         "endingOffsets": "latest"}, expect)

    def sparklog(self, store: str, topic: str, expect: int) -> dict:
        return self.sum_length("sparklog", {"store": store, "subscribe": topic}, expect)

    def stop(self) -> None:
        self.spark.stop()

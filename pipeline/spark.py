"""The SparkSession sparklog's Spark side runs in.

:func:`session` builds (or returns the active) SparkSession with Delta Lake
configured, Spark's Kafka connector (``format("kafka")``) loaded, the ``sparklog``
data source registered, and the Python workers pointed at the running interpreter
(executors need pyarrow and sparklog). Delta's and the connector's jars come from
Maven Central on first start and are cached in the project folder
(``spark.jars.ivy``, default ``<project>/.ivy2``), so later starts work offline.
A session that reads or writes ``s3://`` tables (``s3=True``) also gets S3A:
``hadoop-aws`` at pyspark's Hadoop version with its AWS SDK, fetched the same
way, ``s3://`` mapped to S3A, and the endpoint from ``store.s3.endpoint.url``
(credentials from the environment, as boto's). pyspark's Hadoop client speaks
``hdfs://`` and ``webhdfs://``; the JVM a session starts acts as the store's HDFS
user: ``store.hdfs.user`` and ``store.hdfs.delegation.token`` reach it as
``HADOOP_USER_NAME`` and ``HADOOP_TOKEN`` in its environment, never in a Spark
configuration (see ``log_layout.hadoop_client``). A session that is already running
(under ``spark-submit``, or started before) keeps the user it has.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import conf
from log_layout.hadoop_client import hadoop_environment
from pipeline import quiet

_registered: set[int] = set()


#: Ivy's resolvers for the first start: Maven Central only (see the file)
IVY_SETTINGS = Path(conf.__file__).resolve().parent / "ivysettings.xml"


def _ivy_dir(settings: conf.SparkSettings) -> str:
    path = Path(settings.jars_ivy)
    if not path.is_absolute():
        path = conf.PROJECT_ROOT / path
    return str(path)


def hadoop_version() -> str:
    """The Hadoop version of pyspark's own jars (``hadoop-client-api-<v>.jar``)."""
    import pyspark

    jars = sorted(Path(pyspark.__file__).parent.joinpath("jars").glob("hadoop-client-api-*.jar"))
    if not jars:
        raise RuntimeError("pyspark's hadoop-client-api jar is missing: is pyspark installed?")
    return jars[0].name[len("hadoop-client-api-"):-len(".jar")]


def kafka_package(settings: conf.SparkSettings) -> str:
    """Spark's Kafka connector (``format("kafka")``): ``spark.kafka.package``, or
    ``spark-sql-kafka-0-10`` at pyspark's own version (the connector must match Spark)."""
    import pyspark

    return settings.kafka_package or \
        f"org.apache.spark:spark-sql-kafka-0-10_2.13:{pyspark.__version__}"


def packages(settings: conf.SparkSettings, *, s3: bool = False) -> list[str]:
    """Maven coordinates a session needs: Delta, Spark's Kafka connector (a cached start
    pays nothing measurable for it), and S3A if ``s3``."""
    out = [settings.delta_package, kafka_package(settings)]
    if s3:
        out.append(settings.s3a_package or f"org.apache.hadoop:hadoop-aws:{hadoop_version()}")
    return out


def _jar_list_file(settings: conf.SparkSettings, coordinates: list[str]) -> Path:
    """Where the first start records the jars Ivy resolved for ``coordinates``."""
    name = "+".join(coordinates).replace(":", "_").replace("/", "_")
    return Path(_ivy_dir(settings)) / f"sparklog-jars-{name}.txt"


def _cached_jars(settings: conf.SparkSettings, coordinates: list[str]) -> str | None:
    """The resolved jars of an earlier start, if every one is still on disk."""
    try:
        jars = [j for j in _jar_list_file(settings, coordinates).read_text().split(",") if j]
    except FileNotFoundError:
        return None
    if jars and all(os.path.exists(urlsplit(j).path) for j in jars):
        return ",".join(jars)
    return None


def _remember_jars(spark, settings: conf.SparkSettings, coordinates: list[str]) -> None:
    jars = spark.sparkContext.getConf().get("spark.jars", "")
    if all(c.split(":")[1] in jars for c in coordinates):
        path = _jar_list_file(settings, coordinates)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(jars)
        os.replace(tmp, path)


def s3a_configs(settings: conf.Settings) -> dict[str, str]:
    """Spark configs for S3A: ``s3://`` served by S3A (Delta's S3 LogStore is chosen by
    scheme, s3 and s3a alike), and a non-AWS endpoint (``store.s3.endpoint.url``) with
    path-style addressing. Credentials: S3A's default chain (environment variables
    AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, profiles, instance roles)."""
    out = {"spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem"}
    endpoint = settings.store.s3_endpoint_url
    if endpoint:
        out.update({"spark.hadoop.fs.s3a.endpoint": endpoint,
                    "spark.hadoop.fs.s3a.path.style.access": "true",
                    "spark.hadoop.fs.s3a.endpoint.region":
                        os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
                        or "us-east-1"})
    return out


def needs_s3(*locations: str | None) -> bool:
    """Whether any of ``locations`` is on S3 (so the session needs S3A)."""
    return any(urlsplit(loc).scheme in ("s3", "s3a") for loc in locations if loc)


def hadoop_env(settings: conf.Settings, locations: Iterable[str | None] = ()) -> dict[str, str]:
    """Environment of the JVM a session starts: the store's HDFS user and delegation
    token (``locations``: the tables' URLs, see ``log_layout.hadoop_client``)."""
    store = settings.store
    return hadoop_environment(user=store.hdfs_user, token=store.hdfs_delegation_token,
                              store_url=store.url, locations=locations)


@contextlib.contextmanager
def _environment(env: dict[str, str]) -> Iterator[None]:
    """``env`` in ``os.environ`` while the JVM is launched (pyspark hands the JVM a copy
    of it), as it was afterwards: the token stays out of later child processes."""
    before = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def session(*, master: str | None = None, app_name: str | None = None,
            settings: conf.Settings | None = None, extra: dict[str, Any] | None = None,
            s3: bool = False, source: bool = True, locations: Iterable[str | None] = ()):
    """A SparkSession with Delta Lake and the ``sparklog`` source registered.

    ``master`` defaults to ``spark.master`` of the settings (``local[*]``);
    ``extra`` adds Spark configs; ``s3`` adds S3A (see the module docstring);
    ``source=False`` leaves the ``sparklog`` source unregistered (registering costs
    ~1.8 s of a cold start; :func:`register` does it later); ``locations``: the
    tables' URLs, for the store's HDFS credentials (:func:`hadoop_env`).
    Returns the active session if one exists. Raises ConfigError for a delegation
    token that is not one.
    """
    from pyspark.sql import SparkSession

    settings = settings or conf.load()
    spark_settings = settings.spark
    # Executors (Python workers) must run this interpreter: it has pyarrow and sparklog.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    root = str(conf.PROJECT_ROOT)
    if root not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(
            p for p in (root, os.environ.get("PYTHONPATH")) if p)
    builder = SparkSession.builder
    # Under spark-submit (which starts the JVM and hands Python its gateway port) the
    # master comes from spark-submit unless one is given here.
    submitted = bool(os.environ.get("PYSPARK_GATEWAY_PORT"))
    if master or not submitted:
        builder = builder.master(master or spark_settings.master)
    builder = (
        builder.appName(app_name or spark_settings.app_name)
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        .config("spark.ui.enabled", str(spark_settings.ui_enabled).lower())
        .config("spark.sql.shuffle.partitions", str(spark_settings.shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
    )
    # The first start resolves Delta through Ivy (Maven Central) into the project's
    # .ivy2; later starts put the recorded jars on the classpath directly: no Ivy
    # resolution (a second of start-up and a screen of output), and no network.
    coordinates = packages(spark_settings, s3=s3)
    cached = _cached_jars(spark_settings, coordinates)
    if cached:
        builder = builder.config("spark.jars", cached)
    else:
        builder = (builder.config("spark.jars.packages", ",".join(coordinates))
                   .config("spark.jars.ivy", _ivy_dir(spark_settings))
                   # Maven Central only: a POM without its jar in ~/.m2 failed the
                   # resolution (see the file)
                   .config("spark.jars.ivySettings", str(IVY_SETTINGS)))
    local = (master or ("" if submitted else spark_settings.master)).startswith("local")
    if local:
        # One machine: Spark's sockets stay on loopback (a cluster's driver must be
        # reachable, so there the deployment's own settings decide). Delta replays its
        # log with 50 tasks by default: here that is scheduling overhead, not parallelism.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = (builder.config("spark.driver.bindAddress", "127.0.0.1")
                   .config("spark.driver.host", "127.0.0.1")
                   .config("spark.databricks.delta.snapshotPartitions", "2"))
    configs = {**quiet.spark_configs(), **(s3a_configs(settings) if s3 else {}), **(extra or {})}
    for key, value in configs.items():
        builder = builder.config(key, value)
    if not cached and not quiet.verbose():
        print(f"sparklog: fetching {', '.join(coordinates)} from Maven Central into "
              f"{_ivy_dir(spark_settings)} (once)" + (" - S3A's AWS SDK is ~690 MB" if s3 else ""),
              file=sys.stderr, flush=True)
    with quiet.jvm_output(), _environment(hadoop_env(settings, locations)):
        spark = builder.getOrCreate()
    if not cached:
        _remember_jars(spark, spark_settings, coordinates)
    if source:
        register(spark)
    return spark


def register(spark) -> None:
    """Register the ``sparklog`` data source with ``spark`` (once per session)."""
    if id(spark) in _registered:
        return
    try:
        from pipeline.source import SparklogDataSource
    except ImportError:  # the data source module is not there yet
        return
    spark.dataSource.register(SparklogDataSource)
    _registered.add(id(spark))

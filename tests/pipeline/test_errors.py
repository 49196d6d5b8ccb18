"""``spark_failure_message``: a failed Spark job in one sentence (the CLI's error line)."""

from __future__ import annotations

from pipeline.errors import spark_failure_message


class Py4JJavaError(Exception):
    """Stands for py4j's: what the CLI sees when a Java call of Spark fails."""


Py4JJavaError.__module__ = "py4j.protocol"

#: py4j's text of a Delta write refused by HDFS (abridged from a real run)
REFUSED = """An error occurred while calling o113.save.
: org.apache.spark.sql.delta.DeltaIOException: [DELTA_CANNOT_CREATE_LOG_PATH] Cannot create hdfs://127.0.0.1:48701/a/_tables/x/_delta_log
\tat org.apache.spark.sql.delta.DeltaErrorsBase.cannotCreateLogPathException(DeltaErrors.scala:2022)
\tat org.apache.spark.sql.delta.DeltaLog.createDirIfNotExists$1(DeltaLog.scala:672)
Caused by: org.apache.hadoop.security.AccessControlException: Permission denied: user=mallory, access=WRITE, inode="/a":alice:supergroup:drwxr-xr-x
\tat org.apache.hadoop.ipc.RemoteException.instantiateException(RemoteException.java:121)
Caused by: org.apache.hadoop.ipc.RemoteException(org.apache.hadoop.security.AccessControlException): Permission denied: user=mallory
\tat org.apache.hadoop.ipc.Client.call(Client.java:1614)
"""


def test_a_java_failure_is_its_exception_and_first_cause():
    assert spark_failure_message(Py4JJavaError(REFUSED)) == (
        "org.apache.spark.sql.delta.DeltaIOException: [DELTA_CANNOT_CREATE_LOG_PATH] Cannot "
        "create hdfs://127.0.0.1:48701/a/_tables/x/_delta_log (caused by "
        "org.apache.hadoop.security.AccessControlException: Permission denied: user=mallory, "
        "access=WRITE, inode=\"/a\":alice:supergroup:drwxr-xr-x)")


def test_without_a_cause_the_exception_line_alone():
    text = "An error occurred while calling o7.load.\n: java.io.IOException: gone\n\tat x.y(Z.java:1)"
    assert spark_failure_message(Py4JJavaError(text)) == "java.io.IOException: gone"


def test_other_errors_are_not_spark_failures():
    assert spark_failure_message(ValueError("An error occurred while calling o1.x")) is None

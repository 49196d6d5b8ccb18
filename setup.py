"""The one compiled module, ``ingest_gateway/kafka/_records_c.c`` (Kafka records to
and from Arrow buffers: ``ingest_gateway/kafka/records_columns.py``); everything else
is declared in pyproject.toml. ``optional``: where it cannot be compiled the install
still succeeds and the gateway reads records with aiokafka instead (and says so)."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("ingest_gateway.kafka._records_c",
                             sources=["ingest_gateway/kafka/_records_c.c"],
                             extra_compile_args=["-O2", "-std=c11"], optional=True)])

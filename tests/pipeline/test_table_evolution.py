"""The field-by-field comparison that names what a table's schema change is (no Spark
session: Spark's types only)."""

from __future__ import annotations

from pyspark.sql.types import (ArrayType, IntegerType, LongType, StringType, StructField,
                               StructType)

from pipeline.table_evolution import type_changes


def struct(*fields) -> StructType:
    return StructType([StructField(n, t, True) for n, t in fields])


def test_type_changes_name_nested_fields_and_ignore_added_ones():
    old = struct(("url", StringType()), ("ms", IntegerType()),
                 ("where", struct(("city", StringType()), ("zip", IntegerType()))))
    new = struct(("url", StringType()), ("ms", LongType()), ("ref", StringType()),
                 ("where", struct(("city", StringType()), ("zip", StringType()),
                                  ("country", StringType()))))
    assert type_changes(old, new) == ["ms: int -> bigint", "where.zip: int -> string"]
    assert type_changes(old, old) == []


def test_a_struct_that_becomes_something_else_is_one_change():
    old = struct(("where", struct(("city", StringType()),)))
    new = struct(("where", ArrayType(StringType())))
    assert type_changes(old, new) == ["where: struct<city:string> -> array<string>"]

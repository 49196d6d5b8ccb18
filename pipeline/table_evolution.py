"""A materialised table's schema following its topic's: create the Delta table, or evolve
it by Delta's own schema evolution before a run writes rows of a newer schema.

A run's rows have the reader schema's columns (the subject's latest version when the
run starts, :mod:`pipeline.registry_decode`). Against the table's columns:

* the same: nothing to do;
* columns added (a field added to the subject, nested fields too): an empty append with
  ``mergeSchema`` adds them (Delta's schema evolution); older rows read null there;
* columns the rows lack (a field removed from the subject): the table keeps them (Delta
  writes null there), as Delta's ``mergeSchema`` does: no row loses data;
* a column whose type changed: Delta's type widening (``delta.enableTypeWidening``,
  switched on for the table only when a change needs it) follows what it can (int ->
  long, float -> double, int -> double, ...); anything else (long -> string, a
  struct becoming a string ...) is refused with :class:`~pipeline.errors.TableError`
  naming each field and both types, and the table is left as it was.
"""

from __future__ import annotations

from pipeline.errors import TableError, spark_failure_message


def _fields(schema, prefix: str = "") -> dict[str, object]:
    """Every column and nested struct field by dotted name -> its Spark type."""
    from pyspark.sql.types import StructType

    out: dict[str, object] = {}
    for f in schema.fields:
        name = f"{prefix}{f.name}"
        out[name] = f.dataType
        if isinstance(f.dataType, StructType):
            out.update(_fields(f.dataType, name + "."))
    return out


def _leaf(t) -> bool:
    from pyspark.sql.types import StructType

    return not isinstance(t, StructType)


def type_changes(old, new) -> list[str]:
    """``"field: old -> new"`` for each field both schemas have with another type (a
    struct's own fields are compared one by one, not the struct)."""
    before, after = _fields(old), _fields(new)
    return [f"{name}: {before[name].simpleString()} -> {t.simpleString()}"
            for name, t in after.items()
            if name in before and (_leaf(t) or _leaf(before[name])) and before[name] != t]


def _exists(spark, path: str) -> bool:
    from delta.tables import DeltaTable

    return DeltaTable.isDeltaTable(spark, path)


def create_or_evolve(spark, path: str, schema, table: str) -> list[str]:
    """Make the Delta table at ``path`` hold ``schema``'s columns: create it, or evolve it
    (module docstring). Returns what changed (``added x``, ``x: int -> bigint``).
    Raises TableError naming the fields Delta cannot follow."""
    empty = spark.createDataFrame([], schema)
    if not _exists(spark, path):
        empty.write.format("delta").mode("ignore").save(path)
        return []
    current = spark.read.format("delta").load(path).schema
    before, after = _fields(current), _fields(schema)
    added = [f"added {name}" for name in after if name not in before]
    changed = type_changes(current, schema)
    if not added and not changed:
        return []
    if changed:
        # type widening is a table feature (readers need Delta 3.2+): only when needed
        spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES "
                  "('delta.enableTypeWidening' = 'true')")
    try:
        empty.write.format("delta").mode("append").option("mergeSchema", "true").save(path)
    except Exception as e:  # Delta raises AnalysisException and others through py4j
        reason = spark_failure_message(e) or str(e).splitlines()[0]
        raise TableError(table, f"the topic's schema changed in a way Delta cannot follow "
                         f"({'; '.join(changed) or 'see below'}): {reason}") from None
    return added + changed

"""``sparklog sql`` over topics whose names need quoting and tables named as topics.

In process, on the run's one SparkSession (``spark`` fixture): a subprocess
would start a JVM per command. Names are unique: the session is shared.
"""

from __future__ import annotations

import pytest

from jobs.cli import main
from tests.pipeline.conftest import append

pytestmark = pytest.mark.spark


def test_sql_over_dashed_topics_and_a_table_named_as_its_topic(spark, local_log, capsys):
    store = local_log.store.describe()["url"]
    local_log.create_topic("sqlcli-page-views", {"partitions": 1})
    append(local_log, "sqlcli-page-views", 0, ["/a", "/b", "/a"])
    local_log.create_topic("sqlcli_orders", {"partitions": 1})
    append(local_log, "sqlcli_orders", 0, ['{"sku": "x", "qty": 2}', '{"sku": "y", "qty": 5}'])
    assert main(["--store", store, "materialize", "sqlcli_orders", "--table", "sqlcli_orders",
                 "--once", "--value-format", "json", "--schema", "sku STRING, qty INT"]) == 0
    capsys.readouterr()

    # the table keeps the name (qty is a column of the table, not of the topic's view);
    # the dashed topic is a view, quoted with backticks
    assert main(["--store", store, "sql",
                 "SELECT sum(o.qty) AS total, (SELECT count(*) FROM `sqlcli-page-views`) AS views "
                 "FROM sqlcli_orders o"]) == 0
    out, err = capsys.readouterr()
    assert "total" in out and "7" in out and "3" in out
    assert "table sqlcli_orders has the name of topic sqlcli_orders" in err

    # a second run in the same session: the names are registered already
    assert main(["--store", store, "sql", "SELECT count(*) AS n FROM sqlcli_orders"]) == 0
    assert "2" in capsys.readouterr().out


def test_a_query_spark_refuses_is_a_one_line_error(spark, local_log, capsys):
    store = local_log.store.describe()["url"]
    assert main(["--store", store, "sql", "SELECT * FROM sqlcli_nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("sparklog: error: query 'SELECT * FROM sqlcli_nope'")
    assert "sqlcli_nope" in err[0] and "cannot be found" in err[0]
    assert main(["--store", store, "sql", "SELEC 1"]) == 2
    assert "PARSE_SYNTAX_ERROR" in capsys.readouterr().err


def test_only_the_topics_a_query_names_become_views(spark, local_log, capsys):
    """A topic's view costs a round trip to a Python worker: a query registers the
    topics it mentions, not every topic of the store."""
    store = local_log.store.describe()["url"]
    for name in ("sqlcli_named", "sqlcli_other", "sqlcli-named-too"):
        local_log.create_topic(name, {"partitions": 1})
    append(local_log, "sqlcli_named", 0, ["a", "b"])
    assert main(["--store", store, "sql",
                 "SELECT count(*) AS n FROM SQLCLI_NAMED JOIN `sqlcli-named-too` ON true"]) == 0
    capsys.readouterr()
    views = {t.name for t in spark.catalog.listTables() if t.isTemporary}
    assert {"sqlcli_named", "sqlcli-named-too"} <= views and "sqlcli_other" not in views


def test_mentioned_is_a_superset_of_the_names_read():
    from pipeline.tables import mentioned

    names = ["clicks", "page-views", "a.b", "clicks2", "views"]
    assert mentioned(names, "SELECT * FROM `page-views` p JOIN CLICKS c") == \
        {"page-views", "clicks", "views"}  # views: a word of page-views (harmless extra)
    assert mentioned(names, "SELECT 'a.b' AS s") == {"a.b"}  # in a literal: registered too
    assert mentioned(names, "SELECT 1") == set()

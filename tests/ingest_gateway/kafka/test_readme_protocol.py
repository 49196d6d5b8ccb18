"""ingest_gateway/README.md's protocol table is what the listener answers to ApiVersions
(a SASL listener's table, with the SASL APIs): every API offered has its row with its
exact versions, and no row names an API or version not offered."""

from __future__ import annotations

import pathlib
import re

from kio.index import load_request_schema

from ingest_gateway.kafka.listener import offered

README = pathlib.Path(__file__).parents[3] / "ingest_gateway" / "README.md"


def _table() -> dict[str, tuple[int, int]]:
    """API name -> (low, high) from the README's "| API | versions | notes |" table."""
    text = README.read_text()
    start = text.index("| API | versions | notes |")
    rows = {}
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        names, versions = (c.strip() for c in line.strip("|").split("|")[:2])
        names_l, versions_l = names.split(", "), versions.split(", ")
        assert len(names_l) == len(versions_l), line
        for name, v in zip(names_l, versions_l):
            low, _, high = v.partition("-")
            rows[name] = (int(low), int(high or low))
    return rows


def test_the_readme_table_is_what_api_versions_answers():
    served = {re.sub(r"Request$", "", load_request_schema(k, high).__name__): (low, high)
               for k, (low, high) in offered(sasl=True).items()}
    assert _table() == served

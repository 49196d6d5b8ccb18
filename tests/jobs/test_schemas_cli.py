"""``sparklog schemas`` end to end: through ``jobs.cli.main`` on a store, what it wrote
read back by a real gateway's Schema Registry (the same documents), and as a
subprocess for the exit status and the one-line errors."""

from __future__ import annotations

import json

import pytest
import urllib3

from jobs.cli import main
from jobs.gateway_process import GatewayProcess
from tests.jobs.cli_proc import assert_one_line_error, sparklog

V1 = {"type": "record", "name": "Click", "fields": [{"name": "url", "type": "string"}]}
V2_BAD = {"type": "record", "name": "Click", "fields": [
    {"name": "url", "type": "string"}, {"name": "ms", "type": "long"}]}
V2 = {"type": "record", "name": "Click", "fields": [
    {"name": "url", "type": "string"}, {"name": "ms", "type": "long", "default": 0}]}


@pytest.fixture
def files(tmp_path):
    out = {}
    for name, doc in (("v1", V1), ("v2", V2), ("bad", V2_BAD)):
        out[name] = tmp_path / f"{name}.avsc"
        out[name].write_text(json.dumps(doc))
    return out


def cli(store: str, *args: str) -> int:
    return main(["schemas", "--store", store, *args])


def test_register_check_describe_delete(tmp_path, files, capsys):
    store = str(tmp_path / "store")
    assert cli(store, "register", "clicks-value", str(files["v1"])) == 0
    assert "id 1, version 1" in capsys.readouterr().out
    assert cli(store, "check", "clicks-value", str(files["bad"])) == 1
    assert "NOT compatible" in capsys.readouterr().out
    assert cli(store, "check", "clicks-value", str(files["v2"])) == 0
    assert cli(store, "register", "clicks-value", str(files["v2"])) == 0
    capsys.readouterr()
    assert cli(store, "describe", "clicks-value", "--version", "1", "--json") == 0
    described = json.loads(capsys.readouterr().out)
    assert (described["version"], json.loads(described["schema"])) == (1, V1)
    assert cli(store, "compatibility", "clicks-value", "--level", "full_transitive") == 0
    assert "FULL_TRANSITIVE" in capsys.readouterr().out
    assert cli(store, "list") == 0
    assert "clicks-value" in capsys.readouterr().out
    # a gateway on the same store serves what the CLI wrote
    with GatewayProcess(f"file://{store}") as gw:
        r = urllib3.request("GET", gw.url + "/schema-registry/subjects/clicks-value/versions")
        assert (r.status, json.loads(r.data)) == (200, [1, 2])
        r = urllib3.request("GET", gw.url + "/schema-registry/config/clicks-value")
        assert json.loads(r.data) == {"compatibilityLevel": "FULL_TRANSITIVE"}
    assert cli(store, "delete", "clicks-value", "--version", "2", "--yes") == 0
    assert cli(store, "delete", "clicks-value", "--yes") == 0
    assert cli(store, "delete", "clicks-value", "--permanent", "--yes") == 0
    capsys.readouterr()
    assert cli(store, "list") == 0
    assert "no subjects" in capsys.readouterr().out


def test_refusals_are_one_line_errors(tmp_path, files):
    store = str(tmp_path / "store")
    assert cli(store, "register", "clicks-value", str(files["v1"])) == 0
    run = sparklog("schemas", "--store", store, "register", "clicks-value", str(files["bad"]))
    assert run.returncode == 2
    assert_one_line_error(run, "incompatible", "ms")
    run = sparklog("schemas", "--store", store, "compatibility", "--level", "sideways")
    assert_one_line_error(run, "Invalid compatibility level")
    run = sparklog("schemas", "--store", store, "describe", "nope-value")
    assert_one_line_error(run, "Subject 'nope-value' not found")
    bad = tmp_path / "broken.avsc"
    bad.write_text('{"type": "record", "name": "X"')
    run = sparklog("schemas", "--store", store, "register", "x-value", str(bad))
    assert_one_line_error(run, "Invalid schema")

"""``sparklog users``: SCRAM credentials in the store (add from stdin, never an argument;
list; remove after asking); what it stores proves the password with scramp's RFC 5802
client and keeps no password."""

from __future__ import annotations

import scramp

from ingest_gateway.security.scram import ScramExchange, ScramUsers
from log_layout import open_log, scram
from tests.jobs.cli_proc import assert_one_line_error, sparklog, text


def _proves(store, user: str, password: str, mechanism: str) -> bool:
    """Whether a SCRAM exchange against the store's credentials accepts ``password``."""
    server = ScramExchange(mechanism, ScramUsers(store, 0))
    client = scramp.ScramClient([mechanism], user, password)
    first, _ = server.step(client.get_client_first().encode())
    client.set_server_first(first.decode())
    try:
        final, principal = server.step(client.get_client_final().encode())
    except Exception:  # noqa: BLE001 - NotAuthenticated: the proof did not match
        return False
    client.set_server_final(final.decode())
    return principal == f"User:{user}"


def test_add_list_remove(tmp_path):
    data = str(tmp_path / "data")
    run = sparklog("users", "--store", data, "add", "alice", "--password-stdin",
                   stdin=b"s3cret pass\n")
    assert run.returncode == 0, text(run)
    run = sparklog("users", "--store", data, "add", "bob", "--password-stdin",
                   "--mechanism", "SCRAM-SHA-512", "--iterations", "8192", stdin=b"bob-pw")
    assert run.returncode == 0, text(run)
    store = open_log(data).store
    found = scram.describe(store)
    assert set(found.users["alice"]) == {"SCRAM-SHA-256", "SCRAM-SHA-512"}
    assert found.users["bob"]["SCRAM-SHA-512"].iterations == 8192
    assert set(found.users["bob"]) == {"SCRAM-SHA-512"}
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        assert _proves(store, "alice", "s3cret pass", mechanism)
        assert not _proves(store, "alice", "s3cret pass ", mechanism)
    assert not _proves(store, "nobody", "s3cret pass", "SCRAM-SHA-256")
    listed = "\n".join(text(sparklog("users", "--store", data, "list")))
    assert "alice" in listed and "iterations 8192" in listed
    raw = b"".join(store.read(f"_security/scram/{f.name}") for f in
                   store.list("_security/scram"))
    assert b"s3cret" not in raw
    assert_one_line_error(sparklog("users", "--store", data, "add", "carol",
                                   "--password-stdin", "--iterations", "100", stdin=b"x"),
                          "iterations")
    assert_one_line_error(sparklog("users", "--store", data, "remove", "alice"),
                          "refused without a terminal")
    assert "alice" in scram.describe(store).users
    run = sparklog("users", "--store", data, "remove", "alice", "--yes")
    assert run.returncode == 0, text(run)
    assert "alice" not in scram.describe(store).users
    assert sparklog("users", "--store", data, "remove", "alice", "--yes").returncode == 2

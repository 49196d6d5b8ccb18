"""``sparklog passwords``: add (stdin or a no-echo prompt, never an argument), remove and
list users of the argon2id password file, which stays private (0600), keeps its
comments, and is replaced atomically."""

from __future__ import annotations

import argparse
import os
import stat

import pytest

from conf.errors import ConfigError
from ingest_gateway.security import passwords
from jobs.commands import passwords as command
from tests.jobs.cli_proc import assert_one_line_error, on_a_terminal, sparklog, text


def test_add_list_remove(tmp_path):
    path = str(tmp_path / "pw")
    run = sparklog("passwords", "--file", path, "add", "alice", "--password-stdin",
                   stdin=b"s3cret pass\n")
    assert run.returncode == 0, text(run)
    assert "s3cret" not in "".join(text(run))
    run = sparklog("passwords", "add", "bob@example.com", "--password-stdin", "--file", path,
                   stdin=b"other")
    assert run.returncode == 0, text(run)
    users = passwords.read(path)
    assert list(users) == ["alice", "bob@example.com"]
    assert users["alice"].startswith("$argon2id$") and "s3cret" not in open(path).read()
    assert passwords.verify(users["alice"], "s3cret pass")
    assert not passwords.verify(users["alice"], "s3cret pass\n")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    run = sparklog("passwords", "--file", path, "list")
    assert text(run)[0].split() == ["alice", "bob@example.com"]
    # removing asks first: no terminal, no --yes -> refused, nothing removed
    assert_one_line_error(sparklog("passwords", "--file", path, "remove", "alice"),
                          "refused without a terminal", "add --yes")
    assert list(passwords.read(path)) == ["alice", "bob@example.com"]
    run = sparklog("passwords", "--file", path, "remove", "alice", "--yes")
    assert run.returncode == 0 and list(passwords.read(path)) == ["bob@example.com"]
    # a user that is not there: said so, nothing asked
    assert_one_line_error(sparklog("passwords", "--file", path, "remove", "alice"),
                          "no user 'alice'")


@pytest.mark.parametrize("answer, removed", [(b"n\n", False), (b"\n", False), (b"y\n", True)])
def test_remove_asks_on_a_terminal(tmp_path, answer, removed):
    path = str(tmp_path / "pw")
    passwords.add(path, "alice", "pw")
    status, out, err = on_a_terminal("passwords", "--file", path, "remove", "alice",
                                     answer=answer)
    assert f"Remove user 'alice' from {path}? [y/N]" in out
    assert ("alice" not in passwords.read(path)) is removed
    if removed:
        assert status == 0 and f"removed alice from {path}" in err
    else:
        assert status == 2 and "not confirmed, nothing changed" in err
        assert "Traceback" not in err


def test_changing_a_password_keeps_comments_and_order(tmp_path):
    path = tmp_path / "pw"
    path.write_text("# the users of the test\n\n")
    passwords.add(str(path), "alice", "one")
    passwords.add(str(path), "bob", "two")
    old = passwords.read(str(path))["alice"]
    assert passwords.add(str(path), "alice", "three") is False
    lines = path.read_text().splitlines()
    assert lines[:2] == ["# the users of the test", ""] and lines[2].startswith("alice:")
    assert lines[3].startswith("bob:") and passwords.read(str(path))["alice"] != old
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".passwords-")]


@pytest.mark.parametrize("name", ["a:b", "", "_x", ".x", "a b", "é", "x" * 129, "a\nb"])
def test_bad_names_are_refused(tmp_path, name):
    run = sparklog("passwords", "--file", str(tmp_path / "pw"), "add", name,
                   "--password-stdin", stdin=b"pw")
    assert_one_line_error(run, "user name")
    assert not (tmp_path / "pw").exists()


def test_an_empty_password_is_refused(tmp_path):
    run = sparklog("passwords", "--file", str(tmp_path / "pw"), "add", "alice",
                   "--password-stdin", stdin=b"\n")
    assert_one_line_error(run, "cannot be empty")


def test_a_password_is_never_an_argument(tmp_path):
    run = sparklog("passwords", "--file", str(tmp_path / "pw"), "add", "alice", "--password",
                   "x")
    assert run.returncode == 2 and "unrecognized arguments" in text(run)[1]


def test_the_prompt_asks_twice_without_echo(monkeypatch):
    answers = iter(["first", "first", "first", "second"])
    asked = []
    monkeypatch.setattr("getpass.getpass", lambda prompt: asked.append(prompt) or next(answers))
    args = argparse.Namespace(password_stdin=False, name="alice")
    assert command._password(args) == "first"
    with pytest.raises(ConfigError) as e:
        command._password(args)
    assert "differ" in str(e.value) and "second" not in str(e.value)
    assert asked[:2] == ["password for alice: ", "again: "]


def test_a_malformed_file_is_not_rewritten(tmp_path):
    path = tmp_path / "pw"
    path.write_text("alice:not-a-hash\n")
    run = sparklog("passwords", "--file", str(path), "add", "bob", "--password-stdin",
                   stdin=b"pw")
    assert_one_line_error(run, "line 1")
    assert path.read_text() == "alice:not-a-hash\n"


def test_the_file_defaults_to_the_setting(tmp_path):
    path = str(tmp_path / "pw")
    run = sparklog("--set", f"authentication.password.file={path}", "passwords", "add",
                   "carol", "--password-stdin", stdin=b"pw")
    assert run.returncode == 0, text(run)
    assert list(passwords.read(path)) == ["carol"]
    assert_one_line_error(sparklog("passwords", "list"), "--file")

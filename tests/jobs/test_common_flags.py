"""``--store`` and ``--set`` before or after any command name, for every sub-command."""

from __future__ import annotations

import argparse

import pytest

from jobs.cli import _command_parsers, build_parser, settings_from

# the smallest valid arguments of every leaf command
COMMANDS = {
    ("topics", "create"): ["t"], ("topics", "list"): [], ("topics", "describe"): ["t"],
    ("topics", "alter"): ["t"], ("topics", "delete"): ["t"],
    ("groups", "list"): [], ("groups", "describe"): ["g"],
    ("consume",): ["t"], ("produce",): ["t"], ("sql",): ["SELECT 1"],
    ("materialize",): ["t", "--table", "t"], ("compact",): [], ("retention",): [],
    ("maintain",): [], ("maintenance-history",): [], ("gateway",): [], ("demo",): [],
    ("broker-app",): [], ("cluster", "status"): [],
    ("groups", "reset-offsets"): ["g", "--all-topics", "--to-earliest"],
    ("groups", "delete"): ["g"], ("groups", "delete-offsets"): ["g", "--topic", "t"],
    ("records", "delete"): ["t", "--partition", "0", "--before", "1"], ("offsets",): ["t"],
    ("metadata",): [], ("dump-log",): ["t/0"],
    ("acls",): ["--list"], ("quotas",): ["--describe"],
    ("passwords", "add"): ["--file", "p", "u"], ("passwords", "remove"): ["--file", "p", "u"],
    ("passwords", "list"): ["--file", "p"],
    ("transactions", "list"): [], ("transactions", "describe"): ["--transactional-id", "x"],
    ("transactions", "describe-producers"): ["--topic", "t", "--partition", "0"],
    ("transactions", "find-hanging"): [], ("transactions", "abort"): ["--transactional-id", "x"],
    ("schemas", "list"): [], ("schemas", "describe"): ["s"], ("schemas", "register"): ["s", "f"],
    ("schemas", "check"): ["s", "f"], ("schemas", "delete"): ["s"],
    ("schemas", "compatibility"): [],
    ("users", "add"): ["u"], ("users", "remove"): ["u"], ("users", "list"): [],
}


def _leaves(parser):
    """The command paths (``("topics", "create")``...) of the parsers with no sub-commands."""
    for _depth, child in _command_parsers(parser):
        if not any(isinstance(a, argparse._SubParsersAction) for a in child._actions):
            yield tuple(child.prog.split()[1:])


def test_every_command_is_covered():
    assert set(_leaves(build_parser())) == set(COMMANDS)


@pytest.mark.parametrize("path", sorted(COMMANDS), ids=" ".join)
def test_store_and_set_after_the_command_name(path):
    parser = build_parser()
    rest = COMMANDS[path]
    before = parser.parse_args(["--store", "d1", "--set", "gateway.port=1", *path, *rest])
    after = parser.parse_args([*path, *rest, "--store", "d2", "--set", "gateway.port=2"])
    both = parser.parse_args(["--store", "d1", "--set", "gateway.linger.ms=7", *path, *rest,
                              "--store", "d3", "--set", "gateway.port=3"])
    assert (before.store, after.store, both.store) == ("d1", "d2", "d3")
    assert settings_from(before).gateway.port == 1
    assert settings_from(after).gateway.port == 2
    s = settings_from(both)
    assert (s.gateway.port, s.gateway.linger_ms, s.store.url) == (3, 7, "d3")

"""``sparklog users``: the SCRAM users of the Kafka listener, kept in the store.

``sparklog users add NAME`` asks for NAME's password twice without echoing it (or
reads one line from stdin with ``--password-stdin``; never from an argument, which
``ps`` and shell histories would show) and stores a SCRAM-SHA-256 and a SCRAM-SHA-512
credential (``--mechanism`` for one of them; ``--iterations``, 4096 to 16384, Kafka's
bounds): a salt and two keys derived from the password, never the password. ``remove
NAME`` asks first (``--yes`` skips the question; without a terminal it refuses unless
``--yes``); ``list`` prints each user's mechanisms and iterations.

The same credentials as Kafka's ``kafka-configs.sh --bootstrap-server ... --alter
--entity-type users --entity-name NAME --add-config 'SCRAM-SHA-256=[password=...]'``
writes through a gateway; every gateway of the store logs them in within
``authorizer.refresh.ms``, on a SASL listener with ``authentication.method`` holding
``scram``. The HTTP Basic users of ``sparklog passwords`` are another list (a file).

Examples:
  echo 's3cret' | sparklog users --store ./data add alice --password-stdin
  sparklog users --store ./data add bob --mechanism SCRAM-SHA-512 --iterations 8192
  sparklog users --store ./data list
  sparklog users --store ./data remove alice --yes
"""

from __future__ import annotations

import argparse
import sys

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("users", help="add, remove or list SCRAM users of the Kafka listener",
                       description=__doc__.split("\n\n", 1)[1],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    a = actions.add_parser("add", help="add a user, or set a user's password")
    a.add_argument("name")
    a.add_argument("--password-stdin", action="store_true",
                   help="read the password from the first line of stdin (no prompt)")
    a.add_argument("--iterations", type=int, default=4096,
                   help="PBKDF2 iterations, 4096 to 16384 (default 4096, Kafka's)")
    r = actions.add_parser("remove", help="remove a user's credentials")
    r.add_argument("name")
    r.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    for parser in (a, r):
        parser.add_argument("--mechanism", choices=MECHANISMS, action="append",
                            help="only this mechanism (repeatable; default both)")
    actions.add_parser("list", help="the users, their mechanisms and iterations")
    p.set_defaults(handler=run)


def _password(args: argparse.Namespace) -> str:
    from jobs.commands.passwords import _password as ask

    return ask(args)


def run(args: argparse.Namespace) -> int:
    from conf.errors import ConfigError
    from ingest_gateway.security.scram import credential
    from jobs.cli import settings_from
    from jobs.cli_output import confirm, console
    from log_layout import open_log_from_settings, scram

    store = open_log_from_settings(settings_from(args)).store
    out = console()
    if args.action == "list":
        found = scram.describe(store)
        if not found.users:
            out.print("no SCRAM users")
        for name, mechanisms in sorted(found.users.items()):
            out.print(name + "  " + ", ".join(f"{m} (iterations {c.iterations})"
                                              for m, c in sorted(mechanisms.items())))
        return 0
    if not args.name:
        raise ConfigError("NAME", args.name, "a user name cannot be empty")
    mechanisms = tuple(dict.fromkeys(args.mechanism or MECHANISMS))
    if args.action == "add":
        password = _password(args)
        try:
            made = {(args.name, m): credential(m, password, iterations=args.iterations)
                    for m in mechanisms}
        except ValueError as e:
            raise ConfigError("--iterations", args.iterations, str(e)) from None
        scram.alter(store, upsert=made)
        print(f"set {', '.join(mechanisms)} credentials of {args.name}", file=sys.stderr)
        return 0
    present = [m for m in mechanisms if scram.describe(store).get(args.name, m) is not None]
    if not present:
        print(f"sparklog: error: no SCRAM user {args.name!r}", file=sys.stderr)
        return 2
    confirm(f"Remove the {', '.join(present)} credentials of {args.name!r}?", yes=args.yes)
    scram.alter(store, delete={(args.name, m) for m in present})
    print(f"removed the {', '.join(present)} credentials of {args.name}", file=sys.stderr)
    return 0

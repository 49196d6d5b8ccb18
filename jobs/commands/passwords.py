"""``sparklog passwords``: the users of HTTP Basic authentication.

``sparklog passwords --file F add NAME`` asks for NAME's password twice without
echoing it (or reads one line from stdin with ``--password-stdin``, for scripts;
never from an argument, which ``ps`` and shell histories would show) and stores its
salted argon2id hash; ``remove NAME`` asks first (``--yes`` skips the question;
without a terminal it refuses unless ``--yes``); ``list`` prints the names. ``--file``
defaults to ``authentication.password.file``. The file format is
``ingest_gateway.security.passwords``; a running gateway reads a changed file
within a second.
"""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("passwords", help="add, remove or list Basic authentication users",
                       description=__doc__.split("\n\n", 1)[1],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    a = actions.add_parser("add", help="add a user, or set a user's password")
    a.add_argument("name")
    a.add_argument("--password-stdin", action="store_true",
                   help="read the password from the first line of stdin (no prompt)")
    r = actions.add_parser("remove", help="remove a user")
    r.add_argument("name")
    r.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    lst = actions.add_parser("list", help="the users' names")
    for parser in (p, a, r, lst):  # before or after the action, like --store
        parser.add_argument("--file", metavar="PATH", default=argparse.SUPPRESS,
                            help="the password file (default: authentication.password.file)")
    p.set_defaults(handler=run)


def _password(args: argparse.Namespace) -> str:
    """The new password: stdin's first line with --password-stdin, else asked twice on
    the terminal without echo. Raises ConfigError if empty or the two differ."""
    import getpass

    from conf.errors import ConfigError

    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = getpass.getpass(f"password for {args.name}: ")
        if getpass.getpass("again: ") != password:
            raise ConfigError("password", "(hidden)", "the two passwords differ")
    if not password:
        raise ConfigError("password", "", "a password cannot be empty")
    return password


def _known(path: str, name: str) -> bool:
    from ingest_gateway.security import passwords

    try:
        return name in passwords.read(path)
    except FileNotFoundError:
        return False


def _remove(path: str, args: argparse.Namespace) -> bool:
    """Remove the user after asking (raises NotConfirmed); False if it was gone meanwhile."""
    from ingest_gateway.security import passwords
    from jobs.cli_output import confirm

    confirm(f"Remove user {args.name!r} from {path}?", yes=args.yes)
    return passwords.remove(path, args.name)


def run(args: argparse.Namespace) -> int:
    from conf.errors import ConfigError
    from ingest_gateway.security import passwords
    from jobs.cli import settings_from

    path = getattr(args, "file", None) or settings_from(args).authentication.password_file
    if not path:
        raise ConfigError("--file", "", "name the password file (or set "
                                        "authentication.password.file)")
    if args.action == "list":
        try:
            names = passwords.read(path)
        except FileNotFoundError:
            names = {}
        for name in names:
            print(name)
        return 0
    try:
        passwords.validate_name(args.name)
    except ValueError as e:
        raise ConfigError("NAME", args.name, str(e)) from None
    if args.action == "add":
        new = passwords.add(path, args.name, _password(args))
        print(f"{'added' if new else 'changed the password of'} {args.name} in {path}",
              file=sys.stderr)
        return 0
    if not _known(path, args.name) or not _remove(path, args):
        print(f"sparklog: error: no user {args.name!r} in {path}", file=sys.stderr)
        return 2
    print(f"removed {args.name} from {path}", file=sys.stderr)
    return 0

"""``sparklog quotas``: client quotas in the store, like ``kafka-configs.sh
--entity-type users`` and ``--entity-type clients``.

  --describe [--user NAME | --user-default] [--client ID | --client-default]
      the quotas set (all of them, or one entity's); for a user (and client id), also
      the quotas in force for it (Kafka's precedence);
  --alter ENTITY [--add-config K=V,...] [--delete-config K,...]
      set or remove ``producer_byte_rate`` and ``consumer_byte_rate`` (bytes per
      second, whole numbers of at least 1) and ``request_percentage`` (percent of one
      thread's handling time, above 0); removing a quota that is set asks first
      (``--yes`` skips the question; without a terminal it refuses unless ``--yes``).
      ENTITY is a user (``--user``/``--user-default``), a client id
      (``--client``/``--client-default``) or both.

The most specific entity wins, config by config, in Kafka's order: user and client
id, user and default client, user, default user and client id, default user and
default client, default user, client id, default client. A default is each user's
(or client id's) own limit; a client id's quota is shared by every user of it.
Gateways read the quotas again within ``authorizer.refresh.ms`` and throttle a client
above its rate as Kafka does: the answer is delayed or says how long to wait, and the
rate is measured over 11 one-second windows. ``kafka-configs.sh --bootstrap-server``
writes the same quotas through the Kafka listener (AlterClientQuotas).

Examples:
  sparklog quotas --alter --user alice --add-config producer_byte_rate=1048576
  sparklog quotas --alter --user-default \\
      --add-config producer_byte_rate=10485760,consumer_byte_rate=20971520
  sparklog quotas --alter --user alice --delete-config producer_byte_rate --yes
  sparklog quotas --alter --client etl --add-config request_percentage=50
  sparklog quotas --alter --user alice --client-default --add-config consumer_byte_rate=1048576
  sparklog quotas --describe --user alice --client etl
"""

from __future__ import annotations

import argparse

from conf.errors import ConfigError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("quotas", help="describe or alter client quotas (like kafka-configs.sh "
                                      "--entity-type users)",
                       description=__doc__.split("\n\n", 1)[1],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--describe", action="store_true", help="show the quotas set")
    action.add_argument("--alter", action="store_true", help="set or remove quotas")
    who = p.add_mutually_exclusive_group()
    who.add_argument("--user", metavar="NAME",
                     help="a user (alice, or User:alice as ACLs name it)")
    who.add_argument("--user-default", action="store_true",
                     help="the default of every user without a quota of its own")
    client = p.add_mutually_exclusive_group()
    client.add_argument("--client", metavar="ID", help="a client id (Kafka's client.id)")
    client.add_argument("--client-default", action="store_true",
                        help="the default of every client id without a quota of its own")
    p.add_argument("--add-config", action="append", default=[], metavar="K=V[,K=V]",
                   help="producer_byte_rate=N, consumer_byte_rate=N (bytes/s), "
                        "request_percentage=P")
    p.add_argument("--delete-config", action="append", default=[], metavar="K[,K]",
                   help="remove producer_byte_rate, consumer_byte_rate, request_percentage")
    p.add_argument("--yes", action="store_true",
                   help="--delete-config: do not ask for confirmation")
    p.set_defaults(handler=run, quotas_parser=p)


def _entity(args: argparse.Namespace) -> str | None:
    from log_layout.quotas import CLIENT, DEFAULT, entity

    user = DEFAULT if args.user_default else None
    if args.user is not None:
        name = args.user.strip()
        user = name if name.startswith("User:") else f"User:{name}"
    client = f"{CLIENT}{DEFAULT}" if args.client_default else \
        None if args.client is None else f"{CLIENT}{args.client}"
    if user is None and client is None:
        return None
    return entity("/".join(x for x in (user, client) if x is not None))


def _pairs(items: list[str]) -> dict[str, str]:
    """``K=V,K=V`` (repeatable) as a dict; raises ConfigError naming a malformed pair."""
    out: dict[str, str] = {}
    for item in items:
        for pair in filter(None, (p.strip() for p in item.split(","))):
            key, sep, value = pair.partition("=")
            if not sep or not key.strip():
                raise ConfigError("--add-config", item, f"{pair!r}: expected KEY=VALUE")
            out[key.strip()] = value.strip()
    return out


def run(args: argparse.Namespace) -> int:
    from jobs.cli import settings_from
    from jobs.cli_output import console
    from log_layout import open_log_from_settings, quotas

    usage = args.quotas_parser.error  # a wrong combination of flags: exit status 2
    if args.describe and (args.add_config or args.delete_config):
        usage("--add-config and --delete-config are only used with --alter")
    if args.alter and args.user is None and not args.user_default and args.client is None \
            and not args.client_default:
        usage("--alter needs --user NAME, --user-default, --client ID or --client-default")
    who = _entity(args)
    out = console()
    if args.alter:
        add = _pairs(args.add_config)
        delete = [k.strip() for item in args.delete_config for k in item.split(",") if k.strip()]
        if not add and not delete:
            usage("--alter needs --add-config or --delete-config")
        for key, value in add.items():
            quotas.rate(key, value)  # checked before the store is opened
        store = open_log_from_settings(settings_from(args)).store
        _confirm_removal(store, who, add, delete, yes=args.yes)
        after = quotas.alter_quotas(store, who, add=add, delete=delete)
        out.print(f"quotas of {who}: " + _configs(after.entries.get(who, {})))
        return 0
    _describe(quotas.describe(open_log_from_settings(settings_from(args)).store), who, out)
    return 0


def _confirm_removal(store, who: str, add: dict[str, str], delete: list[str], *,
                     yes: bool) -> None:
    """Ask before removing quotas that are set (a client's throttle lifted); raises
    NotConfirmed. A request alter_quotas refuses (an unknown key, one both added and
    deleted) goes on unasked, to be refused with its reason."""
    from jobs.cli_output import confirm
    from log_layout import quotas

    if not set(delete) <= set(quotas.CONFIGS) or set(delete) & set(add):
        return
    own = quotas.describe(store).entries.get(who, {})
    gone = [f"{k}={own[k]}" for k in delete if k in own]
    if gone:
        confirm(f"Remove the quota {', '.join(gone)} of {who}?", yes=yes)


def _configs(configs) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(configs.items())) or "none"


def _describe(found, who: str | None, out) -> None:
    from jobs.cli_output import table
    from log_layout.quotas import CONFIGS, DEFAULT

    entities = sorted(found.entries) if who is None else [who]
    rows = [(e, found.entries.get(e, {})) for e in entities]
    if who is None and not rows:
        out.print("no quotas")
        return
    t = table("ENTITY", *(c.upper() for c in CONFIGS), left=("ENTITY",))
    for e, configs in rows:
        t.add_row(e, *(configs.get(c) for c in CONFIGS))
    t.print()
    user, _, client = (who or "").partition("/Client:")
    if user.startswith("Client:"):
        user, client = "", user[len("Client:"):]
    if who is not None and DEFAULT not in (user, client) and (user or client):
        in_force = []
        for c in CONFIGS:
            hit = found.find(user, client, c)
            if hit is not None:
                where = _whose(found, user, client, c)
                in_force.append(f"{c}={hit[0]} ({'own' if where == who else where})")
        out.print(f"in force for {who}: " + (", ".join(in_force) or "no quota"))


def _whose(found, user: str, client: str, config: str) -> str:
    """The entity whose ``config`` applies to ``user`` with ``client`` (precedence)."""
    from log_layout.quotas import _LEVELS

    for name, _, _ in _LEVELS:
        entity = name(user, client)
        if config in found.entries.get(entity, {}):
            return entity
    return "none"

"""``sparklog acls``: Kafka's ACLs in the store, like ``kafka-acls.sh``.

Exactly one action:

  --add      add ACLs: every --allow-principal (from every --allow-host, default *)
             and every --deny-principal (from every --deny-host, default *) gets every
             --operation (default All) on every resource named;
  --remove   remove them: the ACLs given as for --add, or, with no principal, every
             ACL of the resources named (asks for confirmation; --yes, or
             kafka-acls.sh's --force, skips it);
  --list     list the ACLs of the resources named (all of them if none), optionally
             only those of --principal.

Resources: --topic NAME, --group NAME, --transactional-id NAME, --subject NAME (a
Schema Registry subject; each repeatable; ``*`` is every resource of the type),
--cluster. --resource-pattern-type is
``literal`` (the default: the name exactly) or ``prefixed`` (names starting with
it); --list and --remove also take ``any`` (the name exactly, whatever the pattern)
and ``match`` (every ACL that applies to the name: literal, ``*`` and prefixes;
take care with --remove).

Conveniences, as kafka-acls.sh: --producer gives Write, Describe and Create on the
topics (Write and Describe on transactional ids; IdempotentWrite on the cluster with
--idempotent), --consumer Read and Describe on the topics and Read on the groups.

The ACLs are kept in the store (``--store``); every gateway with
``authorizer.enabled`` reads them again within ``authorizer.refresh.ms``. Deny
wins over Allow; ``authorizer.super.users`` may do everything.

Examples:
  sparklog acls --add --allow-principal User:alice --operation Read --topic clicks
  sparklog acls --add --allow-principal User:bob --producer --topic logs- \\
      --resource-pattern-type prefixed
  sparklog acls --add --deny-principal User:mallory --deny-host 10.0.0.9 --topic '*'
  sparklog acls --list --topic clicks --resource-pattern-type match
  sparklog acls --remove --topic clicks --yes
  sparklog acls --add --allow-principal User:carol --operation Write --subject clicks-value
"""

from __future__ import annotations

import argparse
import json

_PATTERN_TYPES = ("literal", "prefixed", "any", "match")


def _pattern_type(text: str) -> str:
    if text.lower() not in _PATTERN_TYPES:
        raise argparse.ArgumentTypeError(
            f"expected one of {', '.join(_PATTERN_TYPES)}, got {text!r}")
    return text.upper()


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("acls", help="add, remove or list ACLs (like kafka-acls.sh)",
                       description=__doc__.split("\n\n", 1)[1],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--add", action="store_true", help="add ACLs")
    action.add_argument("--remove", action="store_true", help="remove ACLs")
    action.add_argument("--list", action="store_true",
                        help="list the ACLs of the resources given (all if none)")
    res = p.add_argument_group("resources")
    res.add_argument("--topic", action="append", default=[], metavar="NAME",
                     help="a topic ('*': every topic; repeatable)")
    res.add_argument("--group", action="append", default=[], metavar="NAME",
                     help="a consumer group ('*': every group; repeatable)")
    res.add_argument("--transactional-id", action="append", default=[], metavar="ID",
                     help="a transactional id ('*': every one; repeatable)")
    res.add_argument("--cluster", action="store_true", help="the cluster (kafka-cluster)")
    res.add_argument("--subject", action="append", default=[], metavar="NAME",
                     help="a Schema Registry subject ('*': every subject; repeatable): "
                          "Read, Write, Delete, DescribeConfigs, AlterConfigs")
    res.add_argument("--resource-pattern-type", type=_pattern_type, default="LITERAL",
                     metavar="TYPE", help="literal (default) or prefixed; for --list and "
                                          "--remove also any or match")
    who = p.add_argument_group("principals, hosts and operations")
    who.add_argument("--allow-principal", action="append", default=[], metavar="User:NAME",
                     help="a principal to allow (User:* is every user; repeatable)")
    who.add_argument("--deny-principal", action="append", default=[], metavar="User:NAME",
                     help="a principal to deny (deny wins over allow; repeatable)")
    who.add_argument("--allow-host", action="append", default=[], metavar="IP",
                     help="an address the allowed principals connect from (default *)")
    who.add_argument("--deny-host", action="append", default=[], metavar="IP",
                     help="an address the denied principals are denied from (default *)")
    who.add_argument("--operation", action="append", default=[], metavar="OP",
                     help="All (default), Read, Write, Create, Delete, Alter, Describe, "
                          "ClusterAction, DescribeConfigs, AlterConfigs, IdempotentWrite "
                          "(repeatable)")
    who.add_argument("--principal", action="append", default=[], metavar="User:NAME",
                     help="--list: only the ACLs of this principal (repeatable)")
    conv = p.add_argument_group("conveniences")
    conv.add_argument("--producer", action="store_true",
                      help="Write, Describe, Create on the topics (Write, Describe on the "
                           "transactional ids)")
    conv.add_argument("--idempotent", action="store_true",
                      help="with --producer: IdempotentWrite on the cluster too")
    conv.add_argument("--consumer", action="store_true",
                      help="Read, Describe on the topics and Read on the groups")
    p.add_argument("--yes", "--force", dest="yes", action="store_true",
                   help="remove without asking for confirmation (--force: kafka-acls.sh's "
                        "name for it)")
    p.add_argument("--json", action="store_true", help="--list: print the ACLs as JSON")
    p.set_defaults(handler=run, acls_parser=p)


def _check_args(args: argparse.Namespace) -> None:
    """kafka-acls.sh's ``checkArgs``: a usage error (exit status 2) naming the flags."""
    usage = args.acls_parser.error
    if args.list:
        for flag in ("producer", "consumer", "allow_principal", "deny_principal", "allow_host",
                     "deny_host"):
            if getattr(args, flag):
                usage(f"--{flag.replace('_', '-')} is not used with --list")
    if args.principal and not args.list:
        usage("--principal is only used with --list (--allow-principal or --deny-principal "
              "name the ACLs to add or remove)")
    if args.json and not args.list:
        usage("--json is only used with --list")
    if args.producer or args.consumer:
        for flag in ("operation", "deny_principal", "deny_host"):
            if getattr(args, flag):
                usage(f"--{flag.replace('_', '-')} is not used with --producer or --consumer "
                      "(they allow their own operations)")
    if args.producer and not args.topic:
        usage("--producer needs a --topic")
    if args.idempotent and not args.producer:
        usage("--idempotent is only used with --producer")
    if args.consumer and (not args.topic or not args.group or (
            not args.producer and (args.cluster or args.transactional_id))):
        usage("--consumer needs a --topic and a --group, and no --cluster or "
              "--transactional-id")
    if (args.add or args.remove) and not (args.topic or args.group or args.transactional_id
                                          or args.cluster or args.subject):
        usage(f"--{'add' if args.add else 'remove'} needs a resource: at least one of "
              "--topic, --group, --transactional-id, --cluster, --subject")
    if args.subject and (args.producer or args.consumer):
        usage("--subject takes --operation (Read, Write, Delete, DescribeConfigs, "
              "AlterConfigs), not --producer or --consumer")
    if args.remove and args.operation and not (args.allow_principal or args.deny_principal):
        usage("--remove --operation needs the --allow-principal or --deny-principal whose "
              "ACLs to remove (without a principal, --remove removes every ACL of the "
              "resources)")
    if args.add and not (args.allow_principal or args.deny_principal):
        usage("--add needs an --allow-principal or a --deny-principal")
    for kind in ("allow", "deny"):
        if getattr(args, f"{kind}_host") and not getattr(args, f"{kind}_principal"):
            usage(f"--{kind}-host needs a --{kind}-principal")
    if args.add and args.resource_pattern_type not in ("LITERAL", "PREFIXED"):
        usage(f"--resource-pattern-type {args.resource_pattern_type.lower()}: adding ACLs "
              "takes literal or prefixed")
    if args.cluster and args.resource_pattern_type == "PREFIXED":
        usage("--cluster takes no prefixed pattern (its one name is kafka-cluster)")


def _resources(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(resource type, name) of every resource named."""
    from log_layout.acls import CLUSTER_NAME

    found = [("Topic", t.strip()) for t in args.topic]
    found += [("Group", g.strip()) for g in args.group]
    found += [("TransactionalId", t) for t in args.transactional_id]
    found += [("Subject", s) for s in args.subject]
    if args.cluster or args.idempotent:
        found.append(("Cluster", CLUSTER_NAME))
    return list(dict.fromkeys(found))


def _entries(args: argparse.Namespace, operations: list[str]) -> list[tuple[str, str, str, str]]:
    """(principal, host, operation, permission) for every principal, host and operation."""
    out = []
    for principals, hosts, permission in (
            (args.allow_principal, args.allow_host, "Allow"),
            (args.deny_principal, args.deny_host, "Deny")):
        for principal in principals:
            for host in hosts or ["*"]:
                out += [(principal.strip(), host.strip(), op, permission) for op in operations]
    return out


def _operations(args: argparse.Namespace, rtype: str) -> list[str]:
    """The operations the flags give on a resource of type ``rtype``."""
    if not (args.producer or args.consumer):
        return [op.strip() for op in args.operation] or ["All"]
    ops: list[str] = []
    if args.producer:
        ops += {"Topic": ["Write", "Describe", "Create"], "TransactionalId": ["Write", "Describe"],
                "Cluster": ["IdempotentWrite"] if args.idempotent else []}.get(rtype, [])
    if args.consumer:
        ops += {"Topic": ["Read", "Describe"], "Group": ["Read"]}.get(rtype, [])
    return list(dict.fromkeys(ops))


def _bindings(args: argparse.Namespace):
    """The ACLs --add or --remove names (validated); raises InvalidAcl naming the field."""
    from log_layout.acls import AclBinding

    out = []
    for rtype, name in _resources(args):
        pattern = "LITERAL" if rtype == "Cluster" else args.resource_pattern_type
        for principal, host, op, permission in _entries(args, _operations(args, rtype)):
            out.append(AclBinding.create(rtype, name, pattern, principal=principal, host=host,
                                         operation=op, permission=permission))
    return sorted(set(out))


def _remove_filters(args: argparse.Namespace):
    """The filters --remove deletes by: each ACL given, or every ACL of each resource."""
    from log_layout.acls import AclFilter

    if args.allow_principal or args.deny_principal:
        if args.resource_pattern_type in ("LITERAL", "PREFIXED"):
            return [AclFilter.exact(b) for b in _bindings(args)]
        filters = []
        for rtype, name in _resources(args):
            for principal, host, op, permission in _entries(args, _operations(args, rtype)):
                filters.append(AclFilter.create(rtype, name, args.resource_pattern_type,
                                                principal=principal, host=host, operation=op,
                                                permission=permission))
        return filters
    return [AclFilter.create(rtype, name, "LITERAL" if rtype == "Cluster"
                             else args.resource_pattern_type)
            for rtype, name in _resources(args)]


def _print(bindings, out) -> None:
    from jobs.cli_output import table

    t = table("RESOURCE-TYPE", "NAME", "PATTERN-TYPE", "PRINCIPAL", "HOST", "OPERATION",
              "PERMISSION", left=("RESOURCE-TYPE", "NAME", "PATTERN-TYPE", "PRINCIPAL", "HOST",
                                  "OPERATION", "PERMISSION"))
    for b in bindings:
        t.add_row(b.resource_type, b.name, b.pattern_type, b.principal, b.host, b.operation,
                  b.permission)
    t.print()


def run(args: argparse.Namespace) -> int:
    from jobs.cli import settings_from
    from jobs.cli_output import console
    from log_layout import open_log_from_settings

    _check_args(args)
    settings = settings_from(args)
    out = console()
    if args.list:
        return _run_list(args, open_log_from_settings(settings).store, out)
    if args.add:
        bindings = _bindings(args)  # validated before the store is opened
        return _run_add(bindings, open_log_from_settings(settings).store, out)
    filters = _remove_filters(args)
    return _run_remove(args, filters, open_log_from_settings(settings).store, out)


def _run_list(args: argparse.Namespace, store, out) -> int:
    from log_layout import acls

    filters = [acls.AclFilter.create(rtype, name, "LITERAL" if rtype == "Cluster"
                                     else args.resource_pattern_type)
               for rtype, name in _resources(args)]
    found = acls.list_acls(store, filters or None)
    if args.principal:
        wanted = {acls.parse_principal(p.strip()) for p in args.principal}
        found = [b for b in found if b.principal in wanted]
    if args.json:
        out.print_json(json.dumps([b.to_json() for b in found]))
        return 0
    if not found:
        out.print("no ACLs" + (" match" if filters or args.principal else ""))
        return 0
    _print(found, out)
    return 0


def _run_add(bindings, store, out) -> int:
    from jobs.cli_output import plural
    from log_layout import acls

    added = acls.add_acls(store, bindings)
    _print(bindings, out)
    already = len(bindings) - len(added)
    out.print(f"added {plural(len(added), 'ACL')}"
              + (f" ({already} already there)" if already else ""))
    return 0


def _run_remove(args: argparse.Namespace, filters, store, out) -> int:
    from jobs.cli_output import confirm, plural
    from log_layout import acls

    planned = acls.list_acls(store, filters)
    if not planned:
        out.print("no ACLs match: nothing to remove")
        return 0
    _print(planned, out)
    confirm(f"Remove {plural(len(planned), 'ACL')}?", yes=args.yes)
    removed = acls.remove_acls(store, filters)
    out.print(f"removed {plural(len(removed), 'ACL')}")
    return 0

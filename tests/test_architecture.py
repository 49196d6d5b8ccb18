"""The shape of the code, read from its source: layers, cycles, sizes, the client's weight.

Every rule reads the product's files with ``ast`` (nothing here imports the
product, except the one check that must: what ``import ingest_gateway.client``
loads, run in a fresh interpreter). A failure lists every offender with
``file:line``, so one run is the whole to-do list.

The tables below are the design; change them on purpose, in review:

- ``LAYERS``: which top-level package may import which. The graph is
  ``jobs -> {pipeline, compaction, retention, ingest_gateway} -> log_layout -> conf``;
  a layer may import any layer below it, never one beside or above it.
- ``FORBIDDEN_THIRD_PARTY``: libraries a package must never import (no Spark in
  the gateway or the storage layer: a gateway is not a Spark application).
- ``CLIENT_MAY_LOAD``: the gateway modules, beside ``ingest_gateway.client*``,
  that a client process may load (they hold no server code).

An import counts wherever it is written: at module level, inside a function,
under ``if TYPE_CHECKING:`` (a type-only import is still a design dependency).
``from pkg import name`` counts as an import of ``pkg.name`` when that is a
module, else of ``pkg``. Importing ``a.b`` also runs ``a/__init__.py``; that
implicit arrow is not counted, or every package that re-exports its own
modules would be a cycle.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parent.parent

# layer -> the layers it may import (its own package is always allowed).
LAYERS: dict[str, set[str]] = {
    "conf": set(),
    "log_layout": {"conf"},
    "ingest_gateway": {"log_layout", "conf"},
    "pipeline": {"log_layout", "conf"},
    "compaction": {"log_layout", "conf"},
    "retention": {"log_layout", "conf"},
    "jobs": {"pipeline", "compaction", "retention", "ingest_gateway", "log_layout", "conf"},
}

SPARK = {"pyspark", "py4j", "delta", "deltalake"}
# package -> top-level modules it must not import; "*" applies to every product package.
FORBIDDEN_THIRD_PARTY: dict[str, set[str]] = {
    "*": {"tests", "bench"},
    "log_layout": SPARK,
    "ingest_gateway": SPARK,
}

# Gateway modules a client may load besides ingest_gateway and ingest_gateway.client*.
CLIENT_MAY_LOAD = {"ingest_gateway.errors", "ingest_gateway.protocol",
                   "ingest_gateway.protocol.groups", "ingest_gateway.protocol.session",
                   "ingest_gateway.protocol.connection_security"}

# The gateway's parts: part -> the parts it must not import (STYLE.md 13: HTTP and Kafka
# are adapters over server/; server/ and client/ share only protocol/ and errors).
GATEWAY_PARTS_APART: dict[str, set[str]] = {
    "ingest_gateway.http": {"ingest_gateway.kafka"},
    "ingest_gateway.kafka": {"ingest_gateway.http"},
    "ingest_gateway.server": {"ingest_gateway.http", "ingest_gateway.kafka",
                              "ingest_gateway.client"},
    "ingest_gateway.client": {"ingest_gateway.server", "ingest_gateway.http",
                              "ingest_gateway.kafka"},
    "ingest_gateway.protocol": {"ingest_gateway.server", "ingest_gateway.http",
                                "ingest_gateway.kafka", "ingest_gateway.client"},
}
# Arrows between the parts not removed yet (issue 29): each is a debt with its reason,
# and the test fails when one is paid (remove it here) or a new one appears.
GATEWAY_ARROWS_OWED: set[tuple[str, str]] = set()
# What the protocol adapters (http/, kafka/) may import from the storage layer: its typed
# errors and the types and constants of its format, never an operation. An operation the
# gateway exposes is a server/ service's (STYLE.md 13: one implementation per operation),
# which may re-export the types its callers need. module -> the names allowed ("*": any);
# on ``log_layout`` itself, its typed errors (log_layout/errors.py's classes) too.
ADAPTERS = ("ingest_gateway.http", "ingest_gateway.kafka")
ADAPTER_LOG_LAYOUT_ALLOWED: dict[str, set[str]] = {
    "log_layout.errors": {"*"},
    # Log as a type (annotations); the segment schema records are encoded into
    "log_layout": {"Log", "SEGMENT_SCHEMA"},
    # the format's columns and arrays: the record codecs build segment tables in them
    "log_layout.segment_schema": {"*"},
    # the control records a transaction marker is, as a Fetch encodes them (a codec)
    "log_layout.txn_writes": {"marker_records"},
    # a pure look-up in a manifest's epoch list already read (no store access)
    "log_layout.leader_epochs": {"epoch_at"},
    # the names of the isolation levels a fetch may ask for
    "log_layout.reader": {"ISOLATION_LEVELS"},
    # the names of ACL resources, for an adapter's authorization checks (constants)
    "log_layout.acls": {"CLUSTER_NAME", "SUBJECT"},
}
# Adapter imports of log_layout operations not moved into a server/ service yet
# ("source module -> log_layout module.name"): each a debt; the test fails when one is
# paid (remove it here) or a new one appears.
ADAPTER_LOG_LAYOUT_OWED: set[str] = set()
# Loaded by a client process means the server came along.
SERVER_LIBRARIES = {"starlette", "uvicorn", "pyspark"}

MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80


class Import(NamedTuple):
    """One import statement's target: a product module, or a third-party top-level name."""
    source: str        # importing module, e.g. "ingest_gateway.http.app"
    target: str        # imported product module, or third-party top-level name
    product: bool      # target is a product module
    name: str          # the dotted name as written (resolved if relative)
    where: str         # "path:line" of the statement


# -- reading the source -----------------------------------------------------------------------

def product_packages(root: Path = ROOT) -> list[str]:
    """The top-level packages of the product that exist under ``root``, in ``LAYERS`` order."""
    return [name for name in LAYERS if (root / name / "__init__.py").is_file()]


def modules_of(root: Path, packages: Iterable[str]) -> dict[str, Path]:
    """Every module of ``packages`` under ``root``: dotted name -> file (``__init__`` = package)."""
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The longest prefix of dotted ``name`` that is a product module, else None."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in modules:
            return candidate
    return None


def _absolute_base(node: ast.ImportFrom, module: str, path: Path) -> str:
    """The absolute module a (possibly relative) ``from X import`` statement names."""
    if not node.level:
        return node.module or ""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


def _targets(node: ast.Import | ast.ImportFrom, module: str, path: Path,
             modules: dict[str, Path]) -> list[str]:
    """The dotted names one import statement brings in, submodules resolved."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = _absolute_base(node, module, path)
    names = []
    for alias in node.names:
        submodule = f"{base}.{alias.name}"
        names.append(submodule if submodule in modules else base)
    return names


def imports_of(module: str, path: Path, modules: dict[str, Path], root: Path = ROOT) -> list[Import]:
    """Every import written anywhere in ``path`` (functions and TYPE_CHECKING blocks included)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        where = f"{path.relative_to(root)}:{node.lineno}"
        for name in _targets(node, module, path, modules):
            target = _resolve(name, modules)
            if target is None:
                found.append(Import(module, name.split(".")[0], False, name, where))
            elif target != module:
                found.append(Import(module, target, True, name, where))
    return found


def import_graph(root: Path = ROOT, packages: Iterable[str] | None = None) -> list[Import]:
    """Every import statement of every product module under ``root``."""
    modules = modules_of(root, product_packages(root) if packages is None else packages)
    return [imp for module, path in modules.items() for imp in imports_of(module, path, modules, root)]


# -- cycles -----------------------------------------------------------------------------------

def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components of ``graph`` (iterative: no recursion limit on a long chain)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(sorted(component))
    return components


def _shortest_cycle(graph: dict[str, set[str]], start: str, within: set[str]) -> list[str]:
    """The shortest path ``start -> ... -> start`` inside ``within`` (breadth first)."""
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph.get(node, ())):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if child in within and child not in parents and child != start:
                    parents[child] = node
                    following.append(child)
        frontier = following
    return []


def import_cycles(imports: Iterable[Import]) -> list[str]:
    """One line per cycle of product modules: the shortest cycle and every arrow inside it."""
    imports = [imp for imp in imports if imp.product]
    graph: dict[str, set[str]] = {}
    for imp in imports:
        graph.setdefault(imp.source, set()).add(imp.target)
        graph.setdefault(imp.target, set())
    report = []
    for component in _strongly_connected(graph):
        if len(component) < 2:
            continue
        members = set(component)
        cycle = _shortest_cycle(graph, component[0], members)
        arrows = sorted({f"{imp.source} -> {imp.target} ({imp.where})" for imp in imports
                         if imp.source in members and imp.target in members})
        report.append(f"cycle of {len(component)} modules, e.g. {' -> '.join(cycle)}; "
                      f"its arrows: " + "; ".join(arrows))
    return report


# -- the rules --------------------------------------------------------------------------------

def test_every_packaged_product_package_has_a_layer():
    includes = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "packages"]["find"]["include"]
    unplaced = [name.rstrip("*") for name in includes if name.rstrip("*") not in LAYERS]
    assert not unplaced, f"packages with no place in LAYERS: {unplaced}"


def test_no_import_cycle_between_product_modules():
    cycles = import_cycles(import_graph())
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_imports_follow_the_layers():
    wrong = sorted(
        f"{imp.where}: {imp.source} -> {imp.target}"
        for imp in import_graph() if imp.product
        for source, target in [(imp.source.split(".")[0], imp.target.split(".")[0])]
        if source != target and target not in LAYERS[source])
    assert not wrong, "arrows outside the layers:\n" + "\n".join(wrong)


def test_gateway_parts_import_only_what_they_may():
    def part(module: str) -> str | None:
        return next((p for p in GATEWAY_PARTS_APART if module == p or module.startswith(p + ".")),
                    None)

    arrows = {(imp.source, imp.target) for imp in import_graph() if imp.product
              and part(imp.source) and part(imp.target)
              and part(imp.target) in GATEWAY_PARTS_APART[part(imp.source)]}
    new = sorted(f"{s} -> {t}" for s, t in arrows - GATEWAY_ARROWS_OWED)
    paid = sorted(f"{s} -> {t}" for s, t in GATEWAY_ARROWS_OWED - arrows)
    assert not new, "arrows between gateway parts that must stay apart:\n" + "\n".join(new)
    assert not paid, "debts paid: remove them from GATEWAY_ARROWS_OWED:\n" + "\n".join(paid)


def _log_layout_errors(root: Path) -> set[str]:
    """The class names of ``log_layout/errors.py`` (the typed errors ``log_layout``
    re-exports)."""
    path = root / "log_layout" / "errors.py"
    if not path.is_file():
        return set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.name for n in tree.body if isinstance(n, ast.ClassDef)}


def _adapter_trees(root: Path):
    """(module, path, parsed tree) of every module of the adapters (``ADAPTERS``)."""
    modules = modules_of(root, [p.split(".")[0] for p in ADAPTERS][:1])
    for module, path in modules.items():
        if any(module == a or module.startswith(a + ".") for a in ADAPTERS):
            yield module, path, ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def adapter_storage_imports(root: Path = ROOT) -> list[tuple[str, str, str]]:
    """(where, source module, "log_layout.module.name") of every import by an adapter
    (``ADAPTERS``) of a ``log_layout`` name that ``ADAPTER_LOG_LAYOUT_ALLOWED`` does
    not allow (``import log_layout.x`` names ``x`` itself)."""
    errors = _log_layout_errors(root)
    found = []
    for module, path, tree in _adapter_trees(root):
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = _absolute_base(node, module, path)
                names = [(base, alias.name) for alias in node.names]
            elif isinstance(node, ast.Import):
                names = [tuple(alias.name.rpartition(".")[::2]) for alias in node.names]
            else:
                continue
            for base, name in names:
                if base != "log_layout" and not base.startswith("log_layout."):
                    continue
                allowed = ADAPTER_LOG_LAYOUT_ALLOWED.get(base, set())
                if "*" in allowed or name in allowed or (base == "log_layout" and name in errors):
                    continue
                found.append((f"{path.relative_to(root)}:{node.lineno}", module,
                              f"{base}.{name}"))
    return found


# ``Log``'s metadata reads (log_layout/topics.py): an adapter asks the gateway's metadata
# service (``Gateway.metadata``, server/topic_metadata.py) instead.
LOG_METADATA_METHODS = {"topic", "topics", "topic_names", "partition", "partitions",
                        "groups", "history", "compression", "file_delete_delay_ms",
                        "log_append_time", "cluster_id"}


def adapter_log_metadata_reads(root: Path = ROOT) -> list[str]:
    """"file:line: expression" of every read in an adapter (``ADAPTERS``) of one of
    ``Log``'s metadata methods: on a ``.log`` attribute (``broker.log.topic``,
    ``state.log.partition``), on a name ``log``/``log_``/``lg`` (a Log handed in), or on
    ``log_of(request)``."""
    found = []
    for _, path, tree in _adapter_trees(root):
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute) or node.attr not in LOG_METADATA_METHODS:
                continue
            on = node.value
            if (isinstance(on, ast.Attribute) and on.attr == "log") \
                    or (isinstance(on, ast.Name) and on.id in {"log", "log_", "lg"}) \
                    or (isinstance(on, ast.Call) and isinstance(on.func, ast.Name)
                        and on.func.id == "log_of"):
                found.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_adapters_call_no_storage_operation():
    reads = adapter_log_metadata_reads()
    assert not reads, ("http/ and kafka/ read Log's metadata directly (ask "
                       "Gateway.metadata):\n" + "\n".join(reads))
    found = adapter_storage_imports()
    used = {f"{source} -> {target}" for _, source, target in found}
    new = sorted(f"{where}: {source} -> {target}" for where, source, target in found
                 if f"{source} -> {target}" not in ADAPTER_LOG_LAYOUT_OWED)
    paid = sorted(ADAPTER_LOG_LAYOUT_OWED - used)
    assert not new, ("http/ and kafka/ import log_layout operations (call a server/ service; "
                     "it may re-export types and errors):\n" + "\n".join(new))
    assert not paid, "debts paid: remove them from ADAPTER_LOG_LAYOUT_OWED:\n" + "\n".join(paid)


_ADAPTER_TREE = {
    "log_layout/__init__.py": "",
    "log_layout/errors.py": "class UnknownTopic(Exception):\n    pass\n",
    "log_layout/transactions.py": "",
    "ingest_gateway/__init__.py": "",
    "ingest_gateway/kafka/__init__.py": "",
    "ingest_gateway/kafka/txn.py": (
        "from log_layout import UnknownTopic, Log, transactions\n"
        "from log_layout.errors import Anything\n"
        "def f():\n    import log_layout.transactions\n"),
    "ingest_gateway/server/__init__.py": "",
    "ingest_gateway/server/txn.py": "from log_layout import transactions\n",
}


def test_adapter_storage_imports_finds_an_operation(tmp_path):
    for name, text in _ADAPTER_TREE.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert adapter_storage_imports(tmp_path) == [
        ("ingest_gateway/kafka/txn.py:1", "ingest_gateway.kafka.txn", "log_layout.transactions"),
        ("ingest_gateway/kafka/txn.py:4", "ingest_gateway.kafka.txn", "log_layout.transactions"),
    ]  # errors, Log and log_layout.errors pass; server/ may call the store


def test_adapter_log_metadata_reads_finds_them(tmp_path):
    tree = {
        "ingest_gateway/__init__.py": "",
        "ingest_gateway/http/__init__.py": "",
        "ingest_gateway/http/topics.py": (
            "def f(request, broker, log, log_):\n"
            "    broker.log.topic('t')\n"
            "    run(state.log.partition, 't', 0)\n"
            "    log.topics()\n"
            "    log_of(request).partitions('t')\n"
            "    log.warning('a logger')\n"
            "    broker.metadata.topic('t')\n"
            "    log_.store.url\n"),
        "ingest_gateway/server/__init__.py": "",
        "ingest_gateway/server/meta.py": "def f(log):\n    return log.topic('t')\n",
    }
    for name, text in tree.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert adapter_log_metadata_reads(tmp_path) == [
        "ingest_gateway/http/topics.py:2: broker.log.topic",
        "ingest_gateway/http/topics.py:3: state.log.partition",
        "ingest_gateway/http/topics.py:4: log.topics",
        "ingest_gateway/http/topics.py:5: log_of(request).partitions",
    ]  # a logger's methods, the metadata service and server/ pass


def test_no_forbidden_third_party_import():
    wrong = sorted({
        f"{imp.where}: {imp.source} imports {imp.name}"
        for imp in import_graph() if not imp.product
        if imp.target in FORBIDDEN_THIRD_PARTY["*"]
        | FORBIDDEN_THIRD_PARTY.get(imp.source.split(".")[0], set())})
    assert not wrong, "forbidden imports:\n" + "\n".join(wrong)


def test_bench_imports_nothing_from_tests():
    modules = modules_of(ROOT, product_packages())
    wrong = sorted({
        f"{imp.where}: imports {imp.name}"
        for path in sorted((ROOT / "bench").glob("*.py"))
        for imp in imports_of(f"bench.{path.stem}", path, modules)
        if not imp.product and imp.target == "tests"})
    assert not wrong, "bench/ imports tests/ (move what it needs into the product):\n" + "\n".join(wrong)


_CLIENT_PROBE = """
import json, sys
missing = []
try:
    import ingest_gateway.client as client
    missing = [name for name in ("Producer", "Consumer") if not hasattr(client, name)]
    error = None
except Exception as exc:  # reported by the test, with the modules loaded so far
    error = repr(exc)
print(json.dumps({"modules": sorted(sys.modules), "missing": missing, "error": error}))
"""


@pytest.fixture(scope="module")
def client_process() -> dict:
    """What a fresh interpreter holds after ``import ingest_gateway.client``."""
    done = subprocess.run([sys.executable, "-c", _CLIENT_PROBE], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=True)
    return json.loads(done.stdout)


def test_client_import_loads_no_server_code(client_process):
    assert client_process["error"] is None, client_process["error"]
    modules = client_process["modules"]
    libraries = sorted({name.split(".")[0] for name in modules} & SERVER_LIBRARIES)
    gateway = [name for name in modules
               if name.startswith("ingest_gateway.") and name not in CLIENT_MAY_LOAD
               and name != "ingest_gateway.client" and not name.startswith("ingest_gateway.client.")]
    assert not libraries and not gateway, (
        f"import ingest_gateway.client loads server libraries {libraries} "
        f"and gateway modules outside the client {gateway}")


def test_client_exports_producer_and_consumer(client_process):
    assert client_process["error"] is None, client_process["error"]
    assert not client_process["missing"], f"ingest_gateway.client lacks {client_process['missing']}"


def test_no_product_module_over_the_line_limit():
    wrong = []
    for path in modules_of(ROOT, product_packages()).values():
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_MODULE_LINES:
            wrong.append((lines, f"{path.relative_to(ROOT)}: {lines} lines"))
    assert not wrong, (f"modules over {MAX_MODULE_LINES} lines:\n"
                       + "\n".join(text for _, text in sorted(wrong, reverse=True)))


def test_no_function_over_the_line_limit():
    wrong = []
    for path in modules_of(ROOT, product_packages()).values():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                size = node.end_lineno - node.lineno + 1
                if size > MAX_FUNCTION_LINES:
                    wrong.append((size, f"{path.relative_to(ROOT)}:{node.lineno} "
                                        f"{node.name}: {size} lines"))
    assert not wrong, (f"functions over {MAX_FUNCTION_LINES} lines:\n"
                       + "\n".join(text for _, text in sorted(wrong, reverse=True)))


# -- the checker checks itself on a small tree, so a rule cannot pass by seeing nothing ---------

_TREE = {
    "low/__init__.py": "from low.base import thing\n",
    "low/base.py": "import json\n",
    "low/sub/__init__.py": "",
    "low/sub/leaf.py": "from .. import base\nfrom ..base import thing\n",
    "high/__init__.py": "",
    "high/a.py": ("from typing import TYPE_CHECKING\n"
                  "if TYPE_CHECKING:\n    from high import b\n"
                  "import low.sub.leaf as leaf\n"),
    "high/b.py": "def f():\n    from high.c import g\n",
    "high/c.py": "import pyspark.sql\nfrom high import a, missing_name\n",
}


def test_graph_reads_every_kind_of_import_and_finds_the_cycle(tmp_path):
    for name, text in _TREE.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    imports = import_graph(tmp_path, ["low", "high"])
    arrows = {(imp.source, imp.target, imp.product) for imp in imports}
    assert arrows == {
        ("low", "low.base", True),
        ("low.base", "json", False),
        ("low.sub.leaf", "low.base", True),          # relative, as a submodule and as a name
        ("high.a", "typing", False),
        ("high.a", "high.b", True),                  # under TYPE_CHECKING
        ("high.a", "low.sub.leaf", True),
        ("high.b", "high.c", True),                  # inside a function
        ("high.c", "pyspark", False),
        ("high.c", "high.a", True),                  # `from pkg import module`
        ("high.c", "high", True),                    # `from pkg import name`
    }
    [cycle] = import_cycles(imports)
    assert "e.g. high.a -> high.b -> high.c -> high.a;" in cycle
    assert "high.b -> high.c (high/b.py:2)" in cycle


# -- each class owns its state (STYLE.md habit 14) ----------------------------------------------
#
# A class may read ``self.x`` only if it or a base in the product defines ``x``: assigns it
# (anywhere in its methods), or declares it in its body (a method, a class attribute). A bare
# annotation (``x: int``) counts only in a dataclass or in an abstract class (one with a method
# that raises NotImplementedError), whose subclasses must assign it; a mixin annotating what
# its host defines is the case this rule is for. Classes with a base outside the product
# (Exception, NamedTuple, threading.Thread...) are not checked: their bases' attributes are
# not in the source read here.

def _base_names(node: ast.ClassDef) -> list[str]:
    names = []
    for base in node.bases:
        base = base.value if isinstance(base, ast.Subscript) else base
        names.append(base.id if isinstance(base, ast.Name)
                     else base.attr if isinstance(base, ast.Attribute) else "?")
    return names


def _decorated_dataclass(node: ast.ClassDef) -> bool:
    for decorator in node.decorator_list:
        f = decorator.func if isinstance(decorator, ast.Call) else decorator
        if (f.id if isinstance(f, ast.Name) else getattr(f, "attr", None)) == "dataclass":
            return True
    return False


def _abstract(node: ast.ClassDef) -> bool:
    return any(isinstance(n, ast.Raise) and n.exc is not None and "NotImplementedError"
               in ast.unparse(n.exc) for n in ast.walk(node))


def _own_attributes(node: ast.ClassDef) -> set[str]:
    """What ``node`` itself defines (see above)."""
    names = set()
    annotations_count = _decorated_dataclass(node) or _abstract(node)
    for item in node.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(item.name)
        elif isinstance(item, ast.Assign):
            names |= {n.id for t in item.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) \
                and (item.value is not None or annotations_count):
            names.add(item.target.id)
    names |= {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)
              and isinstance(n.value, ast.Name) and n.value.id == "self"
              and isinstance(n.ctx, (ast.Store, ast.Del))}
    return names


def borrowed_attributes(root: Path = ROOT, packages: Iterable[str] | None = None,
                        skipped: list[tuple[str, str, list[str]]] | None = None) -> list[str]:
    """One line per class reading ``self.x`` that neither it nor a product base defines;
    the classes not checked (a base outside the product, or ambiguous) are appended to
    ``skipped`` as (module path, class name, bases)."""
    classes: dict[str, list[tuple[Path, ast.ClassDef]]] = {}
    for path in modules_of(root, product_packages(root) if packages is None else packages).values():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.ClassDef):
                classes.setdefault(node.name, []).append((path, node))

    def defined(node: ast.ClassDef, seen: tuple[str, ...] = ()) -> set[str] | None:
        names = _own_attributes(node)
        for base in _base_names(node):
            if base in ("object", "Generic", "Protocol"):
                continue
            found = classes.get(base, [])
            if len(found) != 1 or base in seen:
                return None  # outside the product, or ambiguous: not checked
            inherited = defined(found[0][1], (*seen, base))
            if inherited is None:
                return None
            names |= inherited
        return names

    wrong = []
    for name, found in sorted(classes.items()):
        for path, node in found:
            names = defined(node)
            if names is None:
                if skipped is not None:
                    skipped.append((str(path.relative_to(root)), name, _base_names(node)))
                continue
            used = sorted({n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)
                           and isinstance(n.value, ast.Name) and n.value.id == "self"
                           and isinstance(n.ctx, ast.Load) and n.attr not in names
                           and not (n.attr.startswith("__") and n.attr.endswith("__"))})
            if used:
                wrong.append(f"{path.relative_to(root)}:{node.lineno} {name} uses "
                             f"{', '.join(used)}")
    return wrong


def test_no_class_uses_attributes_it_does_not_own():
    wrong = borrowed_attributes()
    assert not wrong, ("classes reading attributes that neither they nor a base define (a part "
                       "reading its host's state: STYLE.md habit 14):\n" + "\n".join(wrong))


# Bases outside the product a client class may have and still go unchecked: value types
# whose fields their base declares (the rule reads no attributes from outside the product).
CLIENT_UNCHECKED_BASES = {"NamedTuple"}


def test_the_class_rule_reads_the_client():
    """Every class of ``ingest_gateway/client`` is checked by the rule above, but value types
    (a client part whose base is outside the product would escape it)."""
    skipped: list[tuple[str, str, list[str]]] = []
    borrowed_attributes(skipped=skipped)
    escaped = sorted(f"{path} {name}({', '.join(bases)})" for path, name, bases in skipped
                     if path.startswith("ingest_gateway/client/")
                     and not set(bases) <= CLIENT_UNCHECKED_BASES)
    assert not escaped, ("client classes the attribute rule cannot check (a base outside "
                         "the product or two classes of one name):\n" + "\n".join(escaped))
    client = [p for p in (ROOT / "ingest_gateway" / "client").rglob("*.py")
              if "class Producer" in p.read_text() or "class Consumer" in p.read_text()]
    assert client, "the client's Producer and Consumer were not found"


_CLASSES = {
    "pkg/__init__.py": "",
    "pkg/parts.py": (
        "from dataclasses import dataclass\n"
        "class Host:\n    def __init__(self):\n        self.state = 1\n"
        "class Mixin:\n    state: int\n    def use(self):\n        return self.state + self.other\n"
        "class Both(Host, Mixin):\n    def more(self):\n        return self.state + self.other\n"
        "@dataclass\nclass Options:\n    size: int\n    def double(self):\n        return 2 * self.size\n"
        "class Base:\n    url: str\n    def read(self):\n        raise NotImplementedError\n"
        "    def where(self):\n        return self.url\n"
        "class Failure(Exception):\n    def text(self):\n        return self.args\n"),
}


def test_borrowed_attributes_finds_the_mixin(tmp_path):
    for name, text in _CLASSES.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    skipped: list[tuple[str, str, list[str]]] = []
    assert borrowed_attributes(tmp_path, ["pkg"], skipped) == [
        "pkg/parts.py:9 Both uses other",       # defined by neither it nor a base
        "pkg/parts.py:5 Mixin uses other, state",  # an annotation is not a definition
    ]
    assert skipped == [("pkg/parts.py", "Failure", ["Exception"])]  # a base outside: unread

"""docs/reference/settings.md names every environment variable the code reads, and reads
no variable the code does not.

The names are collected from the source with `ast` (no import, no Django): every `.py`
file under `platform/trainhub` and `ps_runtime`, tests and migrations left out. A name
counts when it reaches one of these as a string literal, a module constant (its own or
imported from another scanned module), or a loop variable over a constant tuple, list or
dict:

- `os.environ.get(X)`, `os.environ[X]`, `os.getenv(X)`, and `.get(X)` / `[X]` on a mapping
  passed in as `environ` or `env`;
- a function that hands one of its parameters to those as the name (`env_flag(name, …)`
  in `trainhub.envsettings`, `_networks`, `_positive`…): the names passed to it, found
  to a fixed point, so a helper of a helper counts;
- `Variable("TRAINHUB_…", …)` in `ps_runtime.taskenv`, whose `read` looks the name up.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCE_ROOTS = (REPO / "platform" / "trainhub", REPO / "ps_runtime")
SETTINGS_DOC = REPO / "docs" / "reference" / "settings.md"
MAPPING_NAMES = re.compile(r"^(\w+_)?(env|environ)$")  # a mapping of variables passed in
NAME_DEFINERS = frozenset({"Variable"})  # ps_runtime.taskenv: Variable(name, parse)
VARIABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass
class Module:
    name: str
    tree: ast.Module
    constants: dict[str, tuple[str, ...]] = field(default_factory=dict)
    imported: dict[str, tuple[str, str]] = field(default_factory=dict)  # alias: (module, name)


def _sources() -> Iterator[Path]:
    for root in SOURCE_ROOTS:
        for path in sorted(root.rglob("*.py")):
            parts = path.relative_to(root).parts
            if "tests" not in parts and "migrations" not in parts:
                yield path


def _module_name(path: Path) -> str:
    base = REPO / "platform" if path.is_relative_to(REPO / "platform") else REPO
    parts = list(path.relative_to(base).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _strings(node: ast.expr) -> tuple[str, ...] | None:
    """The strings a constant holds: a str, a tuple or list of them, a dict's str keys."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return (node.value,)
    items = node.keys if isinstance(node, ast.Dict) else getattr(node, "elts", None)
    if isinstance(node, (ast.Tuple, ast.List, ast.Dict)) and items is not None:
        texts = [i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)]
        if len(texts) == len(items):
            return tuple(texts)
    return None


def _absolute(package: str, module: str | None, level: int) -> str:
    """The module a `from … import` names, relative imports resolved."""
    if not level:
        return module or ""
    base = package
    for _ in range(level - 1):
        base = base.rpartition(".")[0]
    return f"{base}.{module}" if module else base


def _load(path: Path) -> Module:
    module = Module(_module_name(path), ast.parse(path.read_text(), str(path)))
    package = module.name if path.name == "__init__.py" else module.name.rpartition(".")[0]
    for node in module.tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            values = _strings(node.value)
            for target in targets:
                if isinstance(target, ast.Name) and values is not None:
                    module.constants[target.id] = values
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(package, node.module, node.level)
            for alias in node.names:
                module.imported[alias.asname or alias.name] = (source, alias.name)
    return module


class _Reads(ast.NodeVisitor):
    """Walks one module: the names it reads, and which of its functions are helpers."""

    def __init__(self, module: Module, modules: dict[str, Module], helpers: dict[str, int]):
        self.module, self.modules, self.helpers = module, modules, helpers
        self.names: set[str] = set()
        self.found_helpers: dict[str, int] = {}
        self.bound: list[dict[str, tuple[str, ...]]] = [{}]  # loop variables in scope
        self.params: list[str] = []  # the enclosing function's parameters

    def values(self, node: ast.expr) -> tuple[str, ...] | None:
        """The names an expression may hold, where they can be told without running it."""
        literal = _strings(node)
        if literal is not None:
            return literal
        parts: list[ast.expr] = []
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            parts = [node.left, node.right]  # CONSTANT + (OTHER if flag else ())
        elif isinstance(node, ast.IfExp):
            parts = [node.body, node.orelse]
        elif isinstance(node, (ast.Tuple, ast.List)):
            parts = list(node.elts)
        if parts:
            known = [v for v in map(self.values, parts) if v is not None]
            return tuple(name for v in known for name in v) if known else None
        if isinstance(node, ast.Name):
            for scope in reversed(self.bound):
                if node.id in scope:
                    return scope[node.id]
            if node.id in self.module.constants:
                return self.module.constants[node.id]
            source, name = self.module.imported.get(node.id, ("", ""))
            if source in self.modules:
                return self.modules[source].constants.get(name)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("lower", "upper")
        ):
            inner = self.values(node.func.value)
            if inner is not None:
                return tuple(getattr(v, node.func.attr)() for v in inner)
        return None

    def read(self, node: ast.expr) -> None:
        values = self.values(node)
        if values is not None:
            self.names.update(values)
        elif isinstance(node, ast.Name) and node.id in self.params:
            self.found_helpers[self.function] = self.params.index(node.id)

    function = ""

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        outer = (self.function, self.params)
        self.function = node.name
        self.params = [a.arg for a in (*node.args.posonlyargs, *node.args.args)]
        self.bound.append({})  # its local names
        self.generic_visit(node)
        self.bound.pop()
        self.function, self.params = outer

    def visit_Assign(self, node: ast.Assign) -> None:
        self.generic_visit(node)
        values = self.values(node.value) if len(self.bound) > 1 else None
        for target in node.targets:
            if isinstance(target, ast.Name) and values:
                self.bound[-1][target.id] = values

    visit_AsyncFunctionDef = visit_FunctionDef

    def _loop(self, target: ast.expr, iterable: ast.expr) -> dict[str, tuple[str, ...]]:
        values = self.values(iterable)
        return {target.id: values} if isinstance(target, ast.Name) and values else {}

    def visit_For(self, node: ast.For) -> None:
        self.visit(node.iter)
        self.bound.append(self._loop(node.target, node.iter))
        for child in (*node.body, *node.orelse):
            self.visit(child)
        self.bound.pop()

    def _comprehension(
        self, node: ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp
    ) -> None:
        scope: dict[str, tuple[str, ...]] = {}
        self.bound.append(scope)
        for generator in node.generators:
            self.visit(generator.iter)
            scope.update(self._loop(generator.target, generator.iter))
            for condition in generator.ifs:
                self.visit(condition)
        for part in ("key", "value", "elt"):
            if hasattr(node, part):
                self.visit(getattr(node, part))
        self.bound.pop()

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _comprehension

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        callee = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if node.args and (
            (isinstance(func, ast.Attribute) and func.attr == "get" and _is_mapping(func.value))
            or (isinstance(func, ast.Attribute) and func.attr == "getenv" and _is_os(func.value))
        ):
            self.read(node.args[0])
        elif callee in NAME_DEFINERS and node.args:
            self.read(node.args[0])
        elif callee in self.helpers and len(node.args) > self.helpers[callee]:
            self.read(node.args[self.helpers[callee]])
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if isinstance(node.ctx, ast.Load) and _is_mapping(node.value):
            self.read(node.slice)
        self.generic_visit(node)


def _is_os(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id == "os"


def _is_mapping(node: ast.expr) -> bool:
    """`os.environ`, or a mapping of variables passed in (`environ`, `env`, `agent_env`)."""
    if isinstance(node, ast.Attribute):
        return node.attr == "environ" and _is_os(node.value)
    return isinstance(node, ast.Name) and MAPPING_NAMES.match(node.id) is not None


def variables_read() -> dict[str, set[str]]:
    """Every variable name the code reads, with the modules that read it."""
    modules = {m.name: m for m in map(_load, _sources())}
    helpers: dict[str, int] = {}
    while True:  # a helper found may make its callers helpers too
        found: dict[str, set[str]] = {}
        new: dict[str, int] = {}
        for module in modules.values():
            walker = _Reads(module, modules, helpers)
            walker.visit(module.tree)
            for name in walker.names:
                found.setdefault(name, set()).add(module.name)
            new.update(walker.found_helpers)
        if new.keys() <= helpers.keys():
            return found
        helpers.update(new)


def documented() -> tuple[str, set[str]]:
    """settings.md's text, and the variables its tables' first column names."""
    text = SETTINGS_DOC.read_text()
    named: set[str] = set()
    for line in text.splitlines():
        cells = line.strip().strip("|").split("|")
        if not line.startswith("|") or set(cells[0].strip()) <= set("-: "):
            continue
        named.update(n for n in re.findall(r"`([^`]+)`", cells[0]) if VARIABLE.match(n))
    return text, named - {"variable"}


def test_every_variable_the_code_reads_is_in_settings_md() -> None:
    read = variables_read()
    text, _ = documented()
    missing = sorted(name for name in read if f"`{name}`" not in text)
    assert not missing, (
        f"{SETTINGS_DOC.relative_to(REPO)} does not name these variables the code reads: "
        + ", ".join(f"{name} ({', '.join(sorted(read[name]))})" for name in missing)
        + ". Add a row (or a mention in backticks) for each."
    )


def test_every_variable_in_settings_md_tables_is_read_by_the_code() -> None:
    read = variables_read()
    _, named = documented()
    unread = sorted(named - read.keys())
    assert not unread, (
        f"{SETTINGS_DOC.relative_to(REPO)} has rows for variables no code under "
        f"platform/trainhub or ps_runtime reads: {', '.join(unread)}. Remove the rows, or "
        "read the variables where they belong."
    )


def test_the_collector_finds_each_kind_of_read() -> None:
    """One example of each way a name is read, so a collector that misses one fails."""
    read = variables_read()
    for name in (
        "TRAINHUB_DATA_DIR",  # os.environ.get("…") in settings.py
        "TRAINHUB_HSTS_PRELOAD",  # env_flag("…", …), a helper taking the name
        "TRAINHUB_NOTIFY_ATTEMPTS",  # _positive("…", …), a helper of a helper
        "TRAINHUB_METRICS_ALLOW",  # _networks("…")
        "TRAINHUB_JOB_TOKEN",  # Variable("…", …) in ps_runtime.taskenv
        "TRAINHUB_BWRAP",  # environ.get(BWRAP_ENV) on a passed mapping, a constant
        "TRAINHUB_AGENT_STATE",  # os.environ.get(STATE_ENV)
        "PIP_CONFIG_FILE",  # environ["…"]
        "PIP_INDEX_URL",  # environ[k] for k in PIP_TO_UV (a dict's keys)
        "https_proxy",  # for spelling in (name, name.lower())
        "TZ",  # agent_env.get(name) for name in a local sum of constants
    ):
        assert name in read, f"the collector missed {name}"

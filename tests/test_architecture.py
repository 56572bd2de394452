"""The house rules of docs/architecture.md, checked on the source.

Each rule is read from the code itself (the AST of every module), so a change that breaks one fails
here with the module that broke it, instead of surfacing as an import cycle or a slow hot path later.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"agents": "medpanel.agents", "retrieval": "medpanel.retrieval", "experiments": "medpanel.experiments",
           "methods": "medpanel.methods"}
SOFT_LINES = 400
"""A module longer than this holds one idea only if `ONE_IDEA` says which and why."""
ONE_IDEA: dict[str, str] = {
    "medpanel.experiments.run.store.store":
        "the record of what is done: a pair claimed, its transcript appended and its row committed after "
        "it, read back for resume; its SQL statements and its row type are modules of their own already",
}
"""Modules over `SOFT_LINES`, each with the one idea it holds (a long module is fine; two ideas are not)."""
MAX_LATE_IMPORTS = 11
"""Outside the command room: the optional extras' and the openai SDK's (Azure, batches, a second model),
the store's SQLAlchemy (a reader of the run's own SQLite study needs none) and the panel's discussion
(a report reads only the pipeline's settings and tables)."""
MODEL_LIBRARIES = ("autogen_core", "autogen_agentchat", "autogen_ext", "openai")


def _modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for folder, package in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            name = ".".join([package, *parts]).removesuffix(".__init__")
            out[name] = path
    for path in sorted((ROOT / "medpanel").glob("*.py")):
        out["medpanel" if path.stem == "__init__" else f"medpanel.{path.stem}"] = path
    for folder in sorted(p for p in (ROOT / "medpanel").iterdir() if p.is_dir() and not p.is_symlink()):
        for path in sorted(folder.rglob("*.py")):  # medpanel/plugins/; the links to the code folders skipped
            parts = path.relative_to(ROOT / "medpanel").with_suffix("").parts
            out[".".join(["medpanel", *parts]).removesuffix(".__init__")] = path
    for path in sorted((ROOT / "benchmarks").glob("*.py")):
        out["benchmarks" if path.stem == "__init__" else f"benchmarks.{path.stem}"] = path
    return out


MODULES = _modules()


def _imports(path: Path, *, top_level: bool | None = None) -> list[tuple[int, str]]:
    """(line, module) of the imports at module level (`top_level`), inside functions (False), or
    anywhere, `if TYPE_CHECKING:` blocks included (None)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    nodes = [tree] if top_level is None else tree.body if top_level else functions
    found: list[tuple[int, str]] = []
    for node in nodes:
        for sub in [node] if top_level else ast.walk(node):
            if isinstance(sub, ast.Import):
                found += [(sub.lineno, a.name) for a in sub.names]
            elif isinstance(sub, ast.ImportFrom) and sub.module and sub.level == 0:
                # `from medpanel.agents.roles import challenger` imports the module ...roles.challenger; the
                # package itself is its parent, imported first anyway, not a dependency of the importer.
                submodules = [f"{sub.module}.{a.name}" for a in sub.names if f"{sub.module}.{a.name}" in MODULES]
                if len(submodules) < len(sub.names):
                    found.append((sub.lineno, sub.module))
                found += [(sub.lineno, m) for m in submodules]
    return found


def test_every_module_opens_by_saying_what_it_holds() -> None:
    # A module is split by meaning, not by size: its docstring's first line says the one thing it
    # holds, and a reader who opens the folder learns the room from those lines.
    missing = []
    for name, path in MODULES.items():
        text = path.read_text(encoding="utf-8")
        doc = ast.get_docstring(ast.parse(text))
        if text.strip() and not (doc and doc.splitlines()[0].strip()):
            missing.append(name)
    assert not missing, f"these modules do not open with a docstring saying what they hold: {missing}"


def test_a_long_module_says_why_it_is_one_idea() -> None:
    long = {name for name, path in MODULES.items() if len(path.read_text(encoding="utf-8").splitlines()) > SOFT_LINES}
    unlisted = sorted(long - ONE_IDEA.keys())
    assert not unlisted, f"over {SOFT_LINES} lines: split by meaning, or say in ONE_IDEA the one idea of: {unlisted}"
    stale = sorted(ONE_IDEA.keys() - long)
    assert not stale, f"in ONE_IDEA but no longer over {SOFT_LINES} lines (or gone): remove them: {stale}"
    assert all(len(why.split()) >= 5 for why in ONE_IDEA.values()), "a reason is a sentence, not a word"


def test_function_level_medpanel_imports_are_few_and_say_why() -> None:
    # A command of the command room imports what it alone runs inside the command (the CLI's
    # start-up is what every command pays), and a benchmark times imports on purpose: both are
    # exempt. Anywhere else a late import names its optional dependency or why start-up wants it late.
    late = []
    for name, path in MODULES.items():
        if name.startswith(("medpanel.experiments.cli.", "benchmarks.")):
            continue
        lines = path.read_text(encoding="utf-8").splitlines()
        for lineno, module in _imports(path, top_level=False):
            if module.split(".")[0] != "medpanel":
                continue
            above = " ".join(lines[max(0, lineno - 4):lineno - 1]).lower()
            late.append((name, lineno, module))
            assert "optional" in above or "start-up" in above, (
                f"{name}:{lineno}: {module} in a function; name its optional dependency, or why start-up wants it late")
    assert len({(n, line) for n, line, _ in late}) <= MAX_LATE_IMPORTS, late


def _graph() -> dict[str, set[str]]:
    # Every import counts, also one inside a function or under TYPE_CHECKING: a cycle held together
    # by a late import is still a cycle.
    return {name: {m for _, m in _imports(path) if m in MODULES and m != name} for name, path in MODULES.items()}


def _cycle(graph: Mapping[str, Iterable[str]]) -> list[str] | None:
    """One cycle of `graph` as its nodes, the first repeated at the end; None when it has none."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt):], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for name in sorted(graph):
        if name not in state and (found := visit(name)):
            return found
    return None


def test_the_modules_import_no_cycle() -> None:
    cycle = _cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


# Rooms: a room is a package folder, two levels deep at most (`methods/panel/roles/` belongs to
# `methods/panel`, `methods/clear/roles/` to `methods/clear`), three in `experiments/run/` (a room
# per job); `agents` is the top-level modules of agents/ (the data model), `medpanel` those of
# medpanel/ (the public face). The floors, bottom first: a room imports only rooms on lower floors,
# never one on its own floor. docs/architecture.md draws them.
ROOM_FLOORS: tuple[tuple[str, ...], ...] = (
    ("medpanel/plugins", "medpanel/inputs"),  # finding by name; reading a file a user names
    ("retrieval",),
    ("agents",),
    ("agents/model",),
    ("agents/roles", "agents/freetext"),  # the roles two or more methods use; free-text benchmark files
    ("agents/pipelines",),  # the contract, the registry, the shared multi-agent talk, the majority vote
    ("experiments",),  # errors.py: the one-line user error
    # The run room, split by job; each floor of it imports only those below (docs/architecture.md):
    ("experiments/run", "experiments/run/store"),  # the package itself (no code); the run's files and rows
    ("experiments/run/sources", "experiments/run/tracking"),  # questions and references; counts, spend, health
    ("experiments/run/scenario",),  # the YAML to the resolved plan
    ("experiments/run/execution",),  # the runner, its members and processes, the workers
    ("experiments/analysis",),
    # One room per method (pipeline, roles, prompts, report); a room imports only those below it:
    ("methods", "methods/clear", "methods/baselines", "methods/medagents", "methods/mdagents", "methods/kamac"),
    # Methods built on others: the panel asks CLEAR as its evidence channel; the benchmark's settings,
    # summary and cot-sc samples are the baselines'; multiagent holds medagents, mdagents and kamac as
    # the variants of one pipeline.
    ("methods/panel", "methods/benchmark", "methods/multiagent"),
    ("experiments/view",),
    ("experiments/cli",),
    ("medpanel",),
    ("benchmarks",),
)


SPLIT_ROOMS = ("experiments/run",)
"""Rooms whose subfolders are rooms of their own (a third level)."""


def _room(name: str) -> str:
    parts = MODULES[name].relative_to(ROOT).parent.parts
    return "/".join(parts[:3] if "/".join(parts[:2]) in SPLIT_ROOMS else parts[:2])


Edges = dict[tuple[str, str], tuple[str, str]]


def _room_edges(graph: Mapping[str, Iterable[str]], room: Callable[[str], str]) -> Edges:
    """(importing room, imported room) -> the first module import that joins them."""
    edges: Edges = {}
    for name in sorted(graph):
        for imported in sorted(graph[name]):
            if room(name) != room(imported):
                edges.setdefault((room(name), room(imported)), (name, imported))
    return edges


def _room_cycle(graph: Mapping[str, Iterable[str]], room: Callable[[str], str]) -> str | None:
    """The rooms of one room-level cycle, each step with one module import that makes it; None if none."""
    edges = _room_edges(graph, room)
    rooms: dict[str, set[str]] = {}
    for a, b in edges:
        rooms.setdefault(a, set()).add(b)
    cycle = _cycle(rooms)
    if cycle is None:
        return None
    steps = "; ".join(" -> ".join(edges[(a, b)]) for a, b in itertools.pairwise(cycle))
    return f"rooms {' -> '.join(cycle)} import each other round: {steps}"


def test_the_rooms_import_no_cycle() -> None:
    found = _room_cycle(_graph(), _room)
    assert found is None, found


def test_the_room_rule_names_the_rooms_and_one_import_each_way() -> None:
    # Two rooms whose modules do not form a module cycle (x -> y -> z -> w) still form a room cycle.
    graph = {"clear.x": {"roles.y"}, "roles.y": {"roles.z"}, "roles.z": {"clear.w"}, "clear.w": set()}
    assert _cycle(graph) is None
    found = _room_cycle(graph, lambda name: name.split(".")[0])
    assert found == "rooms clear -> roles -> clear import each other round: clear.x -> roles.y; roles.z -> clear.w"
    graph["roles.z"] = set()
    assert _room_cycle(graph, lambda name: name.split(".")[0]) is None


def test_every_room_imports_only_rooms_on_lower_floors() -> None:
    floor = {room: i for i, rooms in enumerate(ROOM_FLOORS) for room in rooms}
    assert {_room(name) for name in MODULES} == set(floor), "a new room: place it on a floor of ROOM_FLOORS"
    wrong = [f"{a} imports {b} ({x} -> {y}): {b} is not on a lower floor"
             for (a, b), (x, y) in _room_edges(_graph(), _room).items() if floor[b] >= floor[a]]
    assert not wrong, wrong


def test_only_the_model_room_talks_to_autogen_and_openai() -> None:
    for name, path in MODULES.items():
        if name.startswith(("medpanel.agents.model", "benchmarks")):
            continue
        talks = [m for _, m in _imports(path) if m.split(".")[0] in MODEL_LIBRARIES]
        assert not talks, f"{name} imports {talks}: only medpanel.agents.model may"


def test_dependencies_point_one_way_and_the_benchmarks_stay_off_the_hot_path() -> None:
    forbidden = {"medpanel.retrieval": ("medpanel.agents", "medpanel.experiments", "medpanel.api"),
                 "medpanel.agents": ("medpanel.experiments", "medpanel.api")}
    for name, path in MODULES.items():
        imported = [m for _, m in _imports(path)]
        if not name.startswith("benchmarks"):
            assert not [m for m in imported if m.split(".")[0] == "benchmarks"], name
        for room, refused in forbidden.items():
            if name.startswith(room):
                wrong = [m for m in imported if m.startswith(refused)]
                assert not wrong, f"{name} (in {room}) imports {wrong}"


def _private_imports(path: Path) -> list[str]:
    """`from X import _name` where X is another medpanel module: a helper two modules share is public
    in the module it belongs to (the alias an importer gives it does not matter)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and (
                node.module.startswith("medpanel") or node.module.startswith("benchmarks")):
            found += [f"{path.relative_to(ROOT)}:{node.lineno}: from {node.module} import {a.name}"
                      for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
    return found


def test_no_module_imports_another_modules_private_names() -> None:
    found = [line for path in MODULES.values() for line in _private_imports(path)]
    assert not found, "\n".join(found)


ANALYSIS = ROOT / "experiments" / "analysis"


def _method_names() -> set[str]:
    """Every built-in pipeline's name and every method room's (`methods/<name>/`)."""
    from medpanel.agents.pipelines.registry import built_in

    return {*built_in(), *(p.name for p in (ROOT / "methods").iterdir() if (p / "__init__.py").is_file())}


def _strings(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every string constant, f-strings' literal parts included."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [(n.lineno, n.value) for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def test_the_analysis_room_names_no_method() -> None:
    """What one method knows sits in its room (methods/<method>/) and reaches the report through
    `MethodReport`; the analysis reads every run the same way."""
    names = _method_names()
    found = [f"{path.relative_to(ROOT)}:{line}: {text!r}" for path in sorted(ANALYSIS.rglob("*.py"))
             for line, text in _strings(path) if text in names]
    assert not found, "\n".join(found)


def _step_names() -> set[str]:
    """Every literal `step=` a pipeline, role or channel gives an event (`speak(..., step="turn")`)."""
    out: set[str] = set()
    for path in [*(ROOT / "agents").rglob("*.py"), *(ROOT / "methods").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.keyword) and node.arg == "step" and isinstance(node.value, ast.Constant) \
                    and isinstance(node.value.value, str):
                out.add(node.value.value.partition(":")[0])
    return out


def _reads_step(node: ast.expr) -> bool:
    """`e.step`, `e.base` (the step before a colon), `e["step"]`, `e.get("step")`."""
    if isinstance(node, ast.Attribute):
        return node.attr in ("step", "base")
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "step"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
        return bool(node.args) and isinstance(node.args[0], ast.Constant) and node.args[0].value == "step"
    return False


def _reads_who(node: ast.expr) -> bool:
    """`e.role`, `e.agent` (who spoke: a role's name says what it did only by convention)."""
    return isinstance(node, ast.Attribute) and node.attr in ("role", "agent")


def _name_comparisons(paths: list[Path], *, who: bool = False, steps: frozenset[str] = frozenset()) -> list[str]:
    """Each comparison of a step (and with `who`, a role or agent) with a string literal in `paths`,
    and each comparison of anything with a literal among `steps`."""
    found: list[str] = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Compare):
                continue
            sides = [node.left, *node.comparators]
            literals = [s.value for side in sides for s in ast.walk(side)
                        if isinstance(s, ast.Constant) and isinstance(s.value, str)]
            if (any(_reads_step(side) or (who and _reads_who(side)) for side in sides) and literals) or \
                    steps.intersection(literals):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: a step or role compared with {literals}")
    return found


def test_the_analysis_room_reads_no_step_name() -> None:
    """The analysis reads what an event is from its typed act, never from the pipeline's name for the
    step: no step compared with a literal, and no literal that is a step's name compared with anything."""
    steps = _step_names()
    assert {"turn", "verify", "answer"} <= steps  # the collection itself works
    found = _name_comparisons(sorted(ANALYSIS.rglob("*.py")))
    assert not found, "\n".join(found)


def test_clears_stages_are_read_from_acts_not_names() -> None:
    """CLEAR's trajectory and tables (methods/clear) read its pathways, verdicts, follow-ups and
    rulings from their acts: no step, role or agent compared with a literal, and no step's name
    compared with anything (the one reader of old files' names is `run.store.records_v1`)."""
    steps = frozenset(_step_names() - {"decision"})  # `decision` is also an event kind (`e.kind == "decision"`)
    assert {"verify", "format_gate", "followup_search"} <= steps  # CLEAR's own are collected
    found = _name_comparisons(sorted((ROOT / "methods" / "clear").rglob("*.py")), who=True, steps=steps)
    assert not found, "\n".join(found)

"""Arrows point one way (DESIGN.md): cli → gateway → provisioner → scheduler → batching → store → runtime →
compiler → core. Every `import` in a component's files is parsed; one that names a component above its own fails.

The platform's order within "scheduler/batching/provisioner" is fixed here: the provisioner starts workers the
scheduler defines, the scheduler's worker drives batching, and batching reads requests through its own protocols.
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Lowest first; a component may import itself and anything before it.
ORDER = ["core", "compiler", "runtime", "store", "batching", "scheduler", "provisioner", "gateway", "cli"]
FOLDER_OF = {"core": "luminal", **{name: name for name in ORDER[1:]}}
# Upward imports allowed only when deferred into a function body (never at module level, so importing the lower
# component never loads the upper one). Each with its reason.
DEFERRED_UPWARD = {
    # The pinned facade: lm.run runs the reference interpreter, lm.compile compiles.
    ("core", "runtime"),
    ("core", "compiler"),
    # A compiled program is prepared, and its candidates profiled, on the runtime registered for its target.
    ("compiler", "runtime"),
}


def component_of(module: str) -> str | None:
    """The component a dotted `luminal.*` module belongs to; None outside the project."""
    parts = module.split(".")
    if parts[0] != "luminal":
        return None
    if len(parts) > 1 and parts[1] in ORDER and parts[1] != "core":
        return parts[1]
    return "core"


def _imported(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        if node.module == "luminal":  # `from luminal import gateway` names a component by attribute
            return [f"luminal.{alias.name}" for alias in node.names]
        return [node.module]
    return []


def _imports(source: str) -> list[tuple[int, str, bool]]:
    """(line, module, deferred) of every absolute import; deferred when inside a function body."""
    found = []

    def visit(node: ast.AST, deferred: bool) -> None:
        for module in _imported(node):
            found.append((node.lineno, module, deferred))
        inside = deferred or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        for child in ast.iter_child_nodes(node):
            visit(child, inside)

    visit(ast.parse(source), False)
    return found


def upward_imports(component: str, files: list[Path]) -> list[str]:
    rank = ORDER.index(component)
    found = []
    for path in files:
        for line, module, deferred in _imports(path.read_text()):
            target = component_of(module)
            if target is None or ORDER.index(target) <= rank:
                continue
            if deferred and (component, target) in DEFERRED_UPWARD:
                continue
            where = "inside a function" if deferred else "at module level"
            shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
            found.append(f"{shown}:{line}: {component} imports {module} ({target}) {where}")
    return found


def _files(component: str) -> list[Path]:
    folder = ROOT / FOLDER_OF[component]
    # The core's folder holds only the core (the other components are root folders mapped into `luminal.*`).
    return sorted(p for p in folder.rglob("*.py") if ".venv" not in p.parts)


def test_no_component_imports_one_above_it():
    found = [line for component in ORDER for line in upward_imports(component, _files(component))]
    assert not found, "imports that point up DESIGN.md's data flow:\n" + "\n".join(found)


def test_every_root_component_is_ranked():
    # A component added to the layout must be placed in ORDER, or its imports would go unchecked.
    mapped = {name.split(".")[1] for name in _package_dirs() if name.count(".") == 1}
    assert mapped <= set(ORDER), f"components missing from ORDER: {sorted(mapped - set(ORDER))}"


def _package_dirs() -> list[str]:
    import tomllib

    return list(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"])


def test_the_check_sees_an_upward_import(tmp_path):
    # The check itself must fail on the kind of import it guards against, at module level and deferred.
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from luminal.gateway.app import create_app\n"
        "from luminal import cli\n"
        "def later():\n"
        "    import luminal.provisioner.provisioner\n"
        "    from luminal.compiler.program import compile_graph\n"
    )
    found = upward_imports("scheduler", [bad])
    assert len(found) == 3 and all("bad.py" in line for line in found)
    assert sum("at module level" in line for line in found) == 2 and "inside a function" in found[2]
    # The allowed deferred import stays allowed only where it is deferred.
    assert upward_imports("compiler", [bad]) != []
    late = tmp_path / "late.py"
    late.write_text("def run():\n    from luminal.runtime.cpu import CpuExecutable\n")
    assert upward_imports("compiler", [late]) == []
    late.write_text("from luminal.runtime.cpu import CpuExecutable\n")
    assert len(upward_imports("compiler", [late])) == 1

"""The compiler's layout (DESIGN.md, issue 46): folders that show the pipeline, one folder per backend behind one
small interface, a pipeline with no branch on the target's kind, Metal sharing the GPU layer, not CUDA, and no
rewrite of the chosen program after the ranking (test_ranked_is_shipped.py checks the sources themselves).

Read from the source files (their syntax trees), so a deferred import inside a function counts as one at the top.
"""

from __future__ import annotations

import ast
from pathlib import Path

from luminal.compiler.analysis.targets import TARGETS

COMPILER = Path(__file__).resolve().parent.parent.parent / "compiler"
ENTRY_POINTS = {"__init__.py", "program.py", "artifact.py", "backends.py"}
BACKEND_INTERFACE = ("fuse", "passes", "variants", "program_source", "launched_together", "run_plan")
KINDS = sorted({t.kind for t in TARGETS.values()})


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def _imports(path: Path) -> set[str]:
    """Every module `path` imports (a `from package import module` counted as package.module too)."""
    found = set()
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def _module_path(name: str) -> Path | None:
    """The file of a luminal.compiler module, or None for anything else."""
    if not name.startswith("luminal.compiler."):
        return None
    parts = name.split(".")[2:]
    for candidate in (COMPILER.joinpath(*parts).with_suffix(".py"), COMPILER.joinpath(*parts, "__init__.py")):
        if candidate.is_file():
            return candidate
    return None


def _reached(folder: str) -> set[str]:
    """The luminal.compiler modules that importing any module of compiler/<folder>/ reaches, transitively."""
    todo = [p for p in (COMPILER / folder).glob("*.py")]
    seen: set[Path] = set()
    names: set[str] = set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for name in _imports(path):
            target = _module_path(name)
            if target is not None:
                names.add(name)
                todo.append(target)
    return names


def test_compilers_top_level_holds_only_the_entry_points():
    modules = {p.name for p in COMPILER.glob("*.py")}
    stray = sorted(modules - ENTRY_POINTS)
    assert not stray, f"modules at compiler/'s top level that belong in a folder: {stray}"


def test_each_target_kind_has_a_backend_folder_with_the_interface():
    for kind in KINDS:
        backend = COMPILER / kind / "backend.py"
        assert backend.is_file(), f"no compiler/{kind}/backend.py for the {kind} targets"
        tree = _tree(backend)
        defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        defined |= {a.asname or a.name for n in tree.body if isinstance(n, ast.ImportFrom) for a in n.names}
        missing = [name for name in BACKEND_INTERFACE if name not in defined]
        assert not missing, f"compiler/{kind}/backend.py lacks {missing}"


def test_no_backend_rewrites_the_chosen_program():
    for kind in KINDS:
        tree = _tree(COMPILER / kind / "backend.py")
        defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        defined |= {a.asname or a.name for n in tree.body if isinstance(n, ast.ImportFrom) for a in n.names}
        extra = sorted(n for n in defined if "choice" in n)
        assert not extra, f"compiler/{kind}/backend.py rewrites the chosen program: {extra}"
    calls = [n.func for n in ast.walk(_tree(COMPILER / "program.py")) if isinstance(n, ast.Call)]
    called = {f.attr for f in calls if isinstance(f, ast.Attribute) and getattr(f.value, "id", "") == "backend"}
    assert called <= set(BACKEND_INTERFACE), (
        f"compiler/program.py calls backend.{sorted(called - set(BACKEND_INTERFACE))}"
    )


def test_the_pipeline_has_no_branch_on_the_targets_kind():
    program = COMPILER / "program.py"
    backends = sorted(f"luminal.compiler.{kind}" for kind in [*KINDS, "gpu"])
    imported = [name for name in _imports(program) if name.startswith(tuple(backends))]
    assert not imported, f"compiler/program.py imports a backend directly: {imported}"
    for node in ast.walk(_tree(program)):
        if isinstance(node, ast.Compare):
            values = [node.left, *node.comparators]
            named = [v.value for v in ast.walk(node) if isinstance(v, ast.Constant) and v.value in KINDS]
            kind = any(isinstance(v, ast.Attribute) and v.attr == "kind" for v in values)
            assert not named and not kind, f"compiler/program.py:{node.lineno} branches on a target kind"


def test_metal_shares_the_gpu_layer_and_does_not_import_cuda():
    assert (COMPILER / "gpu").is_dir(), "no compiler/gpu/ for what CUDA and Metal share"
    for folder in ("metal", "gpu"):
        cuda = sorted(n for n in _reached(folder) if n.startswith("luminal.compiler.cuda"))
        assert not cuda, f"compiler/{folder}/ imports CUDA's modules: {cuda}"
    assert any(n.startswith("luminal.compiler.gpu") for n in _reached("metal"))

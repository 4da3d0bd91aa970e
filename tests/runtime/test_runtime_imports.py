"""The runtimes read the artifact, not the compiler (DESIGN.md, issue 46): what runtime/ imports of the compiler is
the kernel IR's types, the run plan's records, the memory plan's offsets and the targets' names, nothing more.

Read from the source files (their syntax trees), so a deferred import inside a function counts as one at the top.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.compiler.test_backend_layout import COMPILER, _module_path

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ROOT / "runtime"
ALLOWED = {
    "luminal.compiler.kernels.ir",  # the kernel IR's data types
    "luminal.compiler.storage.run_plan",  # the run plan: launches, merged kernels, in-place inputs, buffer roles
    "luminal.compiler.analysis.memory",  # a shape bucket's arena offsets, from the IR's buffers and lifetimes
    "luminal.compiler.analysis.targets",  # which target a GPU the driver names is (runtime/cuda/devices.py)
}
MAX_MODULES = 4


def compiler_imports(path: Path) -> set[str]:
    """The luminal.compiler modules `path` imports: `from package import module` names the module, `from module
    import name` the module."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("luminal.compiler.")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("luminal.compiler"):
            for alias in node.names:
                inner = f"{node.module}.{alias.name}"
                found.add(inner if _module_path(inner) is not None else node.module)
    return found


def runtime_imports(root: Path = RUNTIME) -> dict[str, list[str]]:
    """Compiler module -> the runtime files that import it."""
    by_module: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        for name in compiler_imports(path):
            by_module.setdefault(name, []).append(str(path.relative_to(root.parent)))
    return by_module


def test_runtimes_import_only_the_artifacts_schema_and_the_ir():
    found = runtime_imports()
    extra = {name: files for name, files in sorted(found.items()) if name not in ALLOWED}
    assert not extra, f"runtime/ imports compiler modules beyond the allowed {sorted(ALLOWED)}: {extra}"
    assert len(ALLOWED) <= MAX_MODULES


def test_the_allowed_modules_reach_no_other_compiler_module():
    """Importing one of them must not pull the planners in behind it (their package __init__s included)."""
    for name in sorted(ALLOWED):
        path = _module_path(name)
        assert path is not None, f"{name} is gone: update ALLOWED"
        packages = [COMPILER.joinpath(*name.split(".")[2:k], "__init__.py") for k in range(3, len(name.split(".")))]
        for source in [path, COMPILER / "__init__.py", *packages]:
            reached = compiler_imports(source) - ALLOWED
            assert not reached, f"{source.relative_to(ROOT)} (behind {name}) imports {sorted(reached)}"

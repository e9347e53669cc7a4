"""In-tree plugins import infercore only through ``infercore.plugin_api`` and never another plugin."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import infercore.plugin_api as api

ROOT = Path(__file__).resolve().parents[2]
#: Every folder under plugins/ (a new one is held to the facade as soon as it exists).
IN_TREE_PLUGINS = sorted(p.name for p in (ROOT / "plugins").iterdir() if (p / "pyproject.toml").exists())
#: Plugin folders held to the facade: (folder, its own top-level package).
PLUGINS = [
    *((ROOT / "plugins" / name, f"infercore_{name}") for name in IN_TREE_PLUGINS),
    *((pkg, next(p.name for p in pkg.iterdir() if p.is_dir() and p.name.startswith("infercore_")
                 and not p.name.endswith(".egg-info")))
      for pkg in sorted((ROOT / "tests" / "plugin_pkgs").iterdir()) if (pkg / "pyproject.toml").exists()),
]
FACADE = "infercore.plugin_api"


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, module) for every import in ``path``, relative imports resolved to their package."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


def facade_violations(folder: Path, own_package: str) -> list[str]:
    """Imports in ``folder`` of private infercore modules or of other infercore plugins' packages."""
    bad = []
    for path in sorted(folder.rglob("*.py")):
        for line, module in imported_modules(path):
            top = module.split(".")[0]
            private_core = top == "infercore" and module != FACADE
            other_plugin = top.startswith("infercore_") and top != own_package
            if private_core or other_plugin:
                bad.append(f"{path.relative_to(folder)}:{line} imports {module}")
    return bad


@pytest.mark.parametrize(("folder", "package"), PLUGINS, ids=[str(f.relative_to(ROOT)) for f, _ in PLUGINS])
def test_plugin_imports_only_the_facade(folder: Path, package: str) -> None:
    assert facade_violations(folder, package) == []


def test_the_check_catches_a_private_import(tmp_path: Path) -> None:
    (tmp_path / "mod.py").write_text("from infercore.attention.backend import AttentionImpl\n"
                                     "import infercore_cpu.attention\nfrom infercore.plugin_api import Attention\n")
    bad = facade_violations(tmp_path, "infercore_acme")
    assert len(bad) == 2 and "infercore.attention.backend" in bad[0] and "infercore_cpu" in bad[1]


def test_facade_names_all_resolve_and_import_stays_cheap() -> None:
    import subprocess
    import sys

    for name in api.__all__:
        getattr(api, name)
    code = "import sys, infercore.plugin_api; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "False"


def test_api_version_policy() -> None:
    from infercore.version import api_version_problem

    major, minor = api.API_VERSION
    assert api_version_problem((major, minor)) is None
    assert api_version_problem(major) is None  # a bare major means (major, 0)
    assert "upgrade infercore" in api_version_problem((major, minor + 1))
    assert "was built for plugin API version" in api_version_problem((major + 1, 0))
    assert "INFERCORE_PLUGIN_API" in api_version_problem("1.0")


def test_custom_ops_listed_by_the_api_are_the_ones_core_defines() -> None:
    from infercore.plugins.manager import get_plugin_manager

    references = {r.name for r in get_plugin_manager().registry("custom_op").all() if "platform" not in r.metadata}
    assert set(api.CUSTOM_OPS) == references, "list every custom op core registers in plugin_api.CUSTOM_OPS"
    assert all(callable(getattr(api.op_reference, name)) for name in api.CUSTOM_OPS)


def test_every_in_tree_plugin_folder_is_checked() -> None:
    assert IN_TREE_PLUGINS == ["cpu", "cuda", "rocm", "structured_output", "tool_parsers", "triton", "xpu"]

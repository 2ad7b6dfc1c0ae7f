"""The direction of imports DESIGN.md gives, as import-linter contracts (pyproject.toml): shared modules import
no subsystem, and subsystems reach the local region server and the command through seams only."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from importlinter.cli import lint_imports

ROOT = Path(__file__).parents[1]


def test_imports_flow_one_way(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    code = lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True)
    out = capsys.readouterr().out
    assert code == 0, out[-3000:]
    assert "0 broken" in out


PACKAGES = ("platformctl", "upgrade_service", "e2e_canary", "ami", "infra", "release_pipeline")
MAX_MODULE_LINES = 700
MAX_FUNCTION_LINES = 100


def _sources() -> list[Path]:
    return sorted(p for package in PACKAGES if (ROOT / package).is_dir() for p in (ROOT / package).rglob("*.py"))


def test_no_room_is_too_big_to_live_in() -> None:
    """A module a newcomer can read through (at most 700 lines) and functions that fit on a screen or two (at most
    100): past that, a module is split by concern, a function into its steps."""
    big_modules, big_functions = [], []
    for path in _sources():
        text = path.read_text()
        lines = len(text.splitlines())
        if lines > MAX_MODULE_LINES:
            big_modules.append(f"{path.relative_to(ROOT)} ({lines} lines)")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    big_functions.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({length} lines)")
    assert not big_modules, "modules over 700 lines: " + ", ".join(big_modules)
    assert not big_functions, "functions over 100 lines: " + ", ".join(big_functions)

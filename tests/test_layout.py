"""The direction of imports DESIGN.md gives, as import-linter contracts (pyproject.toml): shared modules import
no subsystem, and subsystems reach the local region server and the command through seams only."""

from __future__ import annotations

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

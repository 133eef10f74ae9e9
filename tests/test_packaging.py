"""What a user installs: rules inside the wheel, and a CLI that never imports torch or deepspeed."""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ROOT

HEAVY = ("torch", "deepspeed")


def test_wheel_ships_every_rule_file_and_store_migration(tmp_path: Path) -> None:
    pytest.importorskip("hatchling")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path), str(ROOT)], check=True, timeout=300, capture_output=True)
    wheel, = tmp_path.glob("zerodoctor-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {n.split("zerodoctor/rules/", 1)[1] for n in names if n.startswith("zerodoctor/rules/")}
    in_repo = {p.relative_to(ROOT / "rules").as_posix() for p in (ROOT / "rules").rglob("*.yaml")}
    assert in_repo and in_repo <= shipped
    migrations = ROOT / "zerodoctor" / "store" / "migrations"
    scripts = {p.relative_to(ROOT).as_posix() for p in migrations.rglob("*") if p.suffix in (".py", ".mako")}
    assert "zerodoctor/store/migrations/env.py" in scripts and scripts <= names


@pytest.mark.parametrize("args", [
    ["--help"],
    ["rules", "list"],
    ["diagnose", "--fail-on", "never", str(ROOT / "tests/fixtures/rules/ZD201/fires.jsonl")],
])
def test_cli_never_imports_torch_or_deepspeed(args: list[str]) -> None:
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "zerodoctor", *args],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    imported = set(re.findall(r"\|\s+([\w.]+)$", proc.stderr, re.M))
    assert not {m for m in imported if m.split(".")[0] in HEAVY}
    if args == ["--help"]:
        assert "sqlalchemy" not in {m.split(".")[0] for m in imported}, "--help must not load the store"

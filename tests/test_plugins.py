"""Plugins: built-ins load through the hooks, the docs' hello-world works, a broken plugin is contained."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pluggy
import pytest

from tests.conftest import ROOT
from zerodoctor.plugins import hookspecs

DOC = (ROOT / "docs" / "plugins.md").read_text()


def _install_fake_dist(site: Path, dist: str, module: str, source: str) -> None:
    """A module plus a ``.dist-info`` with its entry point: what ``pip install`` leaves behind."""
    (site / f"{module}.py").write_text(source)
    info = site / f"{dist}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[zerodoctor]\n{dist} = {module}\n")


def _zerodoctor(*args: str, site: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if site is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-m", "zerodoctor", *args], capture_output=True, text=True,
                          timeout=120, env=env)


def test_builtins_are_listed_with_the_hooks_they_implement() -> None:
    listed = {p["name"]: p for p in json.loads(_zerodoctor("plugins", "list", "--format", "json").stdout)}
    assert {name: (p["origin"], set(p["hooks"])) for name, p in listed.items() if p["origin"] == "built-in"} == {
        "zerodoctor.sources.plugin": ("built-in", {"register_sources", "register_parsers", "register_dialects"}),
        "zerodoctor.signals.plugin": ("built-in", {"register_signals"}),
        "zerodoctor.rulebook.plugin": ("built-in", {"register_rules"})}


TWO_RANKS = """\
code: ZD990
name: two-ranks
category: other
severity: info
when: hello.ranks == 2
message: "{hello.ranks} ranks reported steps"
doc: |
  ## What it does
  Says hello to a two-rank run.

  ## Why is this bad?
  It is not: it shows a plugin's signal in a rule.
"""


def test_the_hello_world_of_the_docs_runs(tmp_path: Path) -> None:
    code = re.search(r"```python\n(# zerodoctor_hello.py\n.*?)```", DOC, re.S).group(1)
    assert len(code.splitlines()) < 30
    _install_fake_dist(tmp_path, "hello", "zerodoctor_hello", code)
    assert _zerodoctor("hello", "--name", "you", site=tmp_path).stdout == "hello, you\n"
    listed = {p["name"]: p
              for p in json.loads(_zerodoctor("plugins", "list", "--format", "json", site=tmp_path).stdout)}
    assert listed["hello"]["hooks"] == ["register_commands", "register_signals"]
    rule_dir = tmp_path / "rules"
    rule_dir.mkdir()
    (rule_dir / "ZD990-two-ranks.yaml").write_text(TWO_RANKS)
    out = _zerodoctor("diagnose", "--format", "json", "--fail-on", "never", "--rules", str(rule_dir),
                      str(ROOT / "tests/fixtures/rules/ZD102/fires.jsonl"), site=tmp_path)
    assert "ZD990" in {f["rule"] for f in json.loads(out.stdout)["findings"]}, out.stderr


def test_the_folding_signal_of_the_docs_folds_real_steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The docs' fold example, loaded as a module beside the core's, through the real pipeline."""
    import types

    from zerodoctor import signals
    from zerodoctor.pipeline import Pipeline
    from zerodoctor.store.db import open_engine

    code = re.search(r"```python\n(# zerodoctor_worst_loss.py\n.*?)```", DOC, re.S).group(1)
    module = types.ModuleType("zerodoctor_worst_loss")
    monkeypatch.setitem(sys.modules, module.__name__, module)  # dataclasses look their module up
    exec(compile(code, "docs/plugins.md", "exec"), module.__dict__)  # noqa: S102 - our own docs
    log = tmp_path / "r" / "rank-0.jsonl"
    log.parent.mkdir()
    log.write_text("".join(json.dumps({"v": 1, "t": float(n), "run": "r", "rank": rank, "kind": "step", "step": n,
                                       "loss": n * (1 + rank)}) + "\n" for n in (1, 2, 3) for rank in (0, 1)))
    engine = open_engine(tmp_path / "zd.db")
    pipeline = Pipeline(engine, rules=[], modules=[*signals.signal_modules(), module])
    pipeline.ingest([(log, "jsonl")])
    assert pipeline.judge("r").values["hello.worst_loss"] == 6  # step 3, rank 1: merged with "max"
    assert pipeline.view("r").per_rank[1]["loss_sum"] == 12
    engine.dispose()


def test_a_plugin_that_fails_to_import_is_reported_once_and_the_rest_works(tmp_path: Path) -> None:
    _install_fake_dist(tmp_path, "broken", "zerodoctor_broken", "raise ImportError('no module named cuda_magic')\n")
    proc = _zerodoctor("diagnose", "--fail-on", "never", str(ROOT / "tests/fixtures/rules/ZD203/fires.jsonl"),
                       site=tmp_path)
    assert proc.returncode == 0
    assert "ZD203" in proc.stdout
    warnings = [line for line in proc.stderr.splitlines() if "plugin 'broken'" in line]
    assert len(warnings) == 1 and "no module named cuda_magic" in warnings[0]
    listed = {p["name"]: p
              for p in json.loads(_zerodoctor("plugins", "list", "--format", "json", site=tmp_path).stdout)}
    assert listed["broken"]["origin"].startswith("failed: ImportError")


def test_hook_tracing_is_switched_on_by_the_environment() -> None:
    env = {**os.environ, "ZERODOCTOR_TRACE_HOOKS": "1"}
    proc = subprocess.run([sys.executable, "-m", "zerodoctor", "rules", "list"], capture_output=True, text=True,
                          timeout=120, env=env)
    assert "register_rules" in proc.stderr and "register_signals" in proc.stderr


def _specs() -> dict[str, tuple[str, ...]]:
    """Each hook pluggy knows from ``hookspecs``, with the argument names pluggy passes by name."""
    manager = pluggy.PluginManager("zerodoctor")
    manager.add_hookspecs(hookspecs)
    return {name: caller.spec.argnames for name, caller in vars(manager.hook).items() if caller.spec}


@pytest.mark.parametrize("name", sorted(_specs()))
def test_every_hook_is_documented_with_its_real_arguments(name: str) -> None:
    """The docs' table shows each hook called with exactly the arguments its pluggy spec takes (datasette's
    test_docs reads ``spec.argnames`` the same way): a hook that gains an argument must gain it in the docs."""
    argnames = _specs()[name]
    documented = re.findall(rf"`{name}\(([^)]*)\)", DOC)
    assert documented, f"{name} is not in docs/plugins.md"
    for args in documented:
        assert [a.strip() for a in args.split(",") if a.strip()] == list(argnames), (name, args, argnames)


BROKEN_PARTS = '''
from zerodoctor.plugins.hookspecs import hookimpl
from zerodoctor.signals.base import Signal


class Exploding:
    SIGNALS = [Signal("boom.x", "x", "never computed")]

    @staticmethod
    def compute(run, values):
        raise RuntimeError("kaboom in a signal")


@hookimpl
def register_signals():
    return [Exploding]


@hookimpl
def register_commands(app):
    @app.command()
    def boom():
        """Fail the way a bug would."""
        raise RuntimeError("kaboom in a command")
'''


def test_a_failing_signal_module_costs_only_its_own_signals(tmp_path: Path) -> None:
    _install_fake_dist(tmp_path, "boom", "zerodoctor_boom", BROKEN_PARTS)
    proc = _zerodoctor("diagnose", "--format", "json", str(ROOT / "tests/fixtures/rules/ZD203/fires.jsonl"),
                       site=tmp_path)
    assert proc.returncode == 1  # ZD203 is an error finding: judged as usual
    assert "ZD203" in {f["rule"] for f in json.loads(proc.stdout)["findings"]}
    assert "signal module Exploding failed" in proc.stderr and "kaboom in a signal" in proc.stderr


def test_an_internal_error_is_one_line_and_exit_3_not_1(tmp_path: Path) -> None:
    _install_fake_dist(tmp_path, "boom", "zerodoctor_boom", BROKEN_PARTS)
    proc = _zerodoctor("boom", site=tmp_path)
    assert proc.returncode == 3
    assert proc.stderr.strip().count("\n") == 0 and "internal error: RuntimeError: kaboom in a command" in proc.stderr
    env_debug = subprocess.run([sys.executable, "-m", "zerodoctor", "boom"], capture_output=True, text=True,
                               timeout=120,
                               env={**os.environ, "PYTHONPATH": str(tmp_path), "ZERODOCTOR_DEBUG": "1"})
    assert "Traceback" in env_debug.stderr


def test_a_parser_hook_gets_the_context_it_names_and_no_more(tmp_path: Path) -> None:
    """``register_parsers`` implementations take the file's context by name, any subset of it (here ``path``
    alone): the core passes it to the hook, it inspects no factory's signature."""
    from zerodoctor import plugins
    from zerodoctor.sources.batches import make_parser

    class PathOnly:
        @hookspecs.hookimpl
        def register_parsers(self, path: Path | None) -> dict:
            return {"path-only": lambda: ("a parser for", path)}

    manager = plugins._state().manager
    manager.register(PathOnly(), name="path-only")
    try:
        assert make_parser("path-only", "r", tmp_path / "x.log") == ("a parser for", tmp_path / "x.log")
        assert make_parser("flight-recorder", "r", tmp_path / "rank-3").path == tmp_path / "rank-3"
    finally:
        manager.unregister(name="path-only")

"""Benchmark: start-up of every command on a tiny input, the whole process timed from outside.

Each command runs ``--runs`` times (after one warm-up run that compiles the bytecode), each run
paired with a ``python -c pass`` run right after it, so the ratio is taken against the
interpreter's own start-up on the machine as it was at that moment. The inputs are one line
each, taken from the samples (never made up): an OOM line of a console log, and the
``run_start`` line of an events file; and one whole sample run (``samples/healthy-zero2``: two ranks'
events). Prints a table: median, min and max wall seconds, the median of the pairwise differences
(``beyond s``: what the command adds to the interpreter's start-up; the goal is ≤ 0.25 s for every
command that does not import torch) and of the pairwise ratios to ``python -c pass``.

``PYTHONDONTWRITEBYTECODE`` is dropped from the commands' environment: an installed package
has its bytecode, and a run that recompiles every module measures the compiler.

    python bench/startup.py [--runs 10] [--only diagnose,rules] [--tree DIR [--tree DIR2]] [--cold]

Below the commands, the floors the dependencies set: what importing typer, pydantic and rich costs
(every command); with what a command given an argument imports besides (typer 0.29 validates each parameter
with a pydantic ``TypeAdapter``, ``typer._adapters``; the event schema is pydantic models, ``pydantic.main``) and
the plugin discovery every command runs (pluggy, and ``importlib.metadata``'s scan of the installed distributions
for the ``zerodoctor`` entry points); and with SQLAlchemy (every command that opens a store: ``status``, ``watch``,
``diagnose --db``; ``diagnose`` and ``compare`` keep none). What a command takes above its floor is zerodoctor's own.

``--tree DIR`` times the zerodoctor of another checkout (``python -m zerodoctor`` run in DIR), e.g. a ``git worktree``
of an earlier commit, for before/after figures; given twice or more, each run of a command runs in every tree in
turn (old/new/old/new), so a neighbour's load falls on both, and a table is printed per tree.

The rules are kept between commands in a cache (``rulebook/cache.py``): each tree gets its own empty cache
directory, filled by the warm-up run (a warm cache, what every command after the first sees); ``--cold`` gives
every run an empty one (the first command after an install or an edited rule).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OOM_LOG = ROOT / "samples" / "fragmentation-oom" / "console.log"
EVENTS = ROOT / "samples" / "healthy-zero2" / "rank-0.jsonl"
CONFIG = ROOT / "samples" / "healthy-zero2" / "ds_config.json"
SAMPLE = ROOT / "samples" / "healthy-zero2"
GOAL_S = 0.25  # start-up beyond ``python -c pass`` (issue 37)


def _first_line(path: Path, containing: str) -> str:
    return next(line for line in path.read_text().splitlines(keepends=True) if containing in line)


def _inputs(tmp: Path) -> dict[str, str]:
    """The one-line files and a store holding the one-line log, for the commands to read."""
    log, events, store = tmp / "one.log", tmp / "one.jsonl", tmp / "one.db"
    log.write_text(_first_line(OOM_LOG, "CUDA out of memory"))
    events.write_text(_first_line(EVENTS, '"run_start"'))
    _run([*_zerodoctor(), "diagnose", "--db", str(store), str(log)])
    return {"log": str(log), "events": str(events), "store": str(store), "config": str(CONFIG)}


TREE: Path | None = None  # the tree being timed (--tree)
CACHE: Path | None = None  # its rules cache directory (ZERODOCTOR_CACHE_DIR)
COLD = False  # --cold: an empty cache directory for every run


def _zerodoctor() -> list[str]:
    """The console script beside this interpreter (what a user runs), else ``python -m zerodoctor``."""
    if TREE is not None:
        return [sys.executable, "-m", "zerodoctor"]
    script = Path(sys.executable).with_name("zerodoctor")
    return [str(script)] if script.exists() else [sys.executable, "-m", "zerodoctor"]


def commands(inputs: dict[str, str]) -> dict[str, list[str]]:
    zd = _zerodoctor()
    return {
        "--help": [*zd, "--help"],
        "--version": [*zd, "--version"],
        "diagnose <one-line log>": [*zd, "diagnose", inputs["log"]],
        "diagnose <one-line events>": [*zd, "diagnose", inputs["events"]],
        "diagnose <sample run>": [*zd, "diagnose", "--fail-on", "never", str(SAMPLE)],
        "compare <log> <log>": [*zd, "compare", inputs["log"], inputs["log"]],
        "status --db <store>": [*zd, "status", "--db", inputs["store"]],
        "check <ds_config>": [*zd, "check", inputs["config"]],
        "rules list": [*zd, "rules", "list"],
        "plugins list": [*zd, "plugins", "list"],
    }


ARGUMENTS_AND_PLUGINS = ("import typer._adapters, pydantic.main, pluggy, importlib.metadata; "
                         "importlib.metadata.entry_points(group='zerodoctor')")
FLOORS = {
    "floor: typer pydantic rich": "import typer, pydantic, rich.console",
    "floor: + arguments, plugin discovery": f"import typer, pydantic, rich.console; {ARGUMENTS_AND_PLUGINS}",
    "floor: + sqlalchemy": "import typer, pydantic, rich.console, sqlalchemy",
}


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if CACHE is not None:
        if COLD:
            shutil.rmtree(CACHE, ignore_errors=True)
        env["ZERODOCTOR_CACHE_DIR"] = str(CACHE)
    return env


def _run(argv: list[str]) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system) of one run: on a loaded machine the wall time
    measures the neighbours too, the CPU time only the command."""
    env = _env()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env=env, cwd=TREE, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


Timings = tuple[list[tuple[float, float]], list[tuple[float, float]]]


def _in_tree(tree: tuple[Path | None, Path], argv: list[str]) -> tuple[float, float]:
    global TREE, CACHE
    TREE, CACHE = tree
    return _run(argv)


def measure(argv: list[str], runs: int, trees: list[tuple[Path | None, Path]]) -> list[Timings]:
    """For each tree: (wall, CPU) seconds of ``argv``, and of ``python -c pass`` run right after each; the trees
    take turns, run by run."""
    baseline = [sys.executable, "-c", "pass"]
    out: list[Timings] = [([], []) for _ in trees]
    for tree in trees:
        _in_tree(tree, argv)
    for _ in range(runs):
        for tree, (walls, bases) in zip(trees, out):
            walls.append(_in_tree(tree, argv))
            bases.append(_run(baseline))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--only", help="only the commands whose name contains one of these (comma-separated)")
    parser.add_argument("--tree", type=Path, action="append",
                        help="a checkout whose zerodoctor to time (default: the installed one); twice: interleaved")
    parser.add_argument("--cold", action="store_true", help="an empty rules cache for every run")
    args = parser.parse_args()
    global TREE, CACHE, COLD
    COLD = args.cold
    all_bases: list[tuple[float, float]] = []
    tmp = Path(tempfile.mkdtemp(prefix="zerodoctor-startup-"))
    trees: list[tuple[Path | None, Path]] = [(t.resolve(), tmp / f"cache-{i}") for i, t in enumerate(args.tree or [])]
    trees = trees or [(None, tmp / "cache")]
    TREE, CACHE = trees[0]  # the inputs are made by the first tree, its cache never the user's
    try:
        table = commands(_inputs(tmp))
        table.update({name: [sys.executable, "-c", code] for name, code in FLOORS.items()})
        print(f"{'command':<44} {'median s':>9} {'min s':>7} {'max s':>7} {'beyond s':>9} {'x python -c pass':>17} "
              f"{'cpu s':>6} {'cpu beyond s':>13}")
        for name, argv in table.items():
            if args.only and not any(part in name for part in args.only.split(",")):
                continue
            floor = name.startswith("floor")
            for tree, (runs, bases) in zip(trees, measure(argv, args.runs, trees[:1] if floor else trees)):
                all_bases += bases
                label = name if len(trees) == 1 or floor else f"{name} [{tree[0].name if tree[0] else 'installed'}]"
                walls = [w for w, _ in runs]
                ratio = statistics.median(w / b for (w, _), (b, _) in zip(runs, bases))
                beyond = statistics.median(w - b for (w, _), (b, _) in zip(runs, bases))
                cpu_beyond = statistics.median(c - b for (_, c), (_, b) in zip(runs, bases))
                mark = "" if floor or beyond <= GOAL_S else f"  over the {GOAL_S} s goal"
                print(f"{label:<44} {statistics.median(walls):9.3f} {min(walls):7.3f} {max(walls):7.3f} "
                      f"{beyond:9.3f} {ratio:17.1f} {statistics.median(c for _, c in runs):6.3f} "
                      f"{cpu_beyond:13.3f}{mark}", flush=True)
        base_walls = [w for w, _ in all_bases]
        print(f"{'python -c pass':<44} {statistics.median(base_walls):9.3f} {min(base_walls):7.3f} "
              f"{max(base_walls):7.3f} {'':>9} {'':>17} {statistics.median(c for _, c in all_bases):6.3f}")
        print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

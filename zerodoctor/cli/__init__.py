"""CLI: one Typer app; each command parses options and calls the stages, nothing more.

Heavy modules (pydantic models, SQLAlchemy, and never torch or deepspeed) are imported
inside the commands, so ``zerodoctor --help`` and the daemon start fast on a login node.
"""

from __future__ import annotations

import errno
import json
import os
import shlex
import sys
from enum import Enum
from pathlib import Path
from typing import Any, List, Optional

import typer

app = typer.Typer(
    help="Why is my DeepSpeed ZeRO run failing or slow, and which config change fixes it?",
    no_args_is_help=True,
    add_completion=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
)
rules_app = typer.Typer(help="List and explain the rules.", no_args_is_help=True)
app.add_typer(rules_app, name="rules")
plugins_app = typer.Typer(help="Show the plugins zerodoctor loaded.", no_args_is_help=True)
app.add_typer(plugins_app, name="plugins")


MAX_RANKS = 2**63 - 1  # what a run_start's 64-bit world_size holds


class Format(str, Enum):
    text = "text"
    json = "json"
    markdown = "markdown"
    html = "html"
    concise = "concise"  # one line per finding, for CI logs
    github = "github"  # GitHub Actions annotations


class Output(str, Enum):
    """For commands with no Markdown form: refusing ``--format markdown`` beats printing text."""

    text = "text"
    json = "json"


class Page(str, Enum):
    """For commands with text, JSON and an HTML page but no Markdown form (``compare``)."""

    text = "text"
    json = "json"
    html = "html"


class FailOn(str, Enum):
    info = "info"
    warning = "warning"
    error = "error"
    never = "never"


def fail(message: str) -> typer.Exit:
    """Print a one-line error to stderr; the caller raises the returned exit (code 2)."""
    from zerodoctor.report.terminal import plain

    typer.echo(f"zerodoctor: error: {plain(message)}", err=True)  # it may quote a path or a name of the input's
    return typer.Exit(2)


def _exit_on(findings: list, fail_on: FailOn, *, rejected: bool = False) -> None:
    """Exit 1 when a finding is at or above ``--fail-on`` (or DeepSpeed rejected the config)."""
    from zerodoctor.rulebook.finding import SEVERITY_ORDER

    if fail_on is not FailOn.never and (rejected or any(
            SEVERITY_ORDER[f.severity] >= SEVERITY_ORDER[fail_on.value] for f in findings)):
        raise typer.Exit(1)


def _load_rules(extra: list[Path] | None):  # noqa: ANN202 - returns list[Rule], imported lazily
    from zerodoctor.rulebook.loader import RuleLoadError, rules_from

    try:
        return rules_from(extra)
    except RuleLoadError as exc:
        for error in exc.errors:
            typer.echo(str(error), err=True)
        raise fail(f"{len(exc.errors)} error(s) in rule files") from None


def _console(**options: Any):  # noqa: ANN202 - a rich Console, imported lazily
    """A console for a report: no highlighting, lines kept whole, and no ``:name:`` emoji codes (a message may
    quote a log holding one; looking them up also cost 6 ms of every report's start-up)."""
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True, emoji=False, **options)


def _version(value: bool) -> None:
    if value:
        from zerodoctor import __version__

        typer.echo(f"zerodoctor {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """zerodoctor: findings with evidence and a config patch for each."""


@app.command()
def diagnose(
    paths: List[Path] = typer.Argument(..., help="Run directories (runs/<id>/), events JSONL files or console logs; "
                                       "'-' reads a log from standard input."),
    db: Optional[str] = typer.Option(None, help="Store to use (SQLAlchemy URL or SQLite path); "
                                     "default: none, nothing is written."),
    rules: Optional[List[Path]] = typer.Option(None, "--rules", help="Extra rule directory (repeatable)."),
    fmt: Format = typer.Option(Format.text, "--format", help="Output format (html: one self-contained page with plots; "
                               "concise: one line per finding; github: GitHub Actions annotations)."),
    output: Optional[Path] = typer.Option(None, "-o", "--output",
                                          help="Write the report to this file instead of stdout."),
    select: Optional[str] = typer.Option(None, "--select", help="Report only these rules: comma-separated codes or "
                                         "prefixes (ZD2,ZD401); default: [tool.zerodoctor] select, else all."),
    ignore: Optional[str] = typer.Option(None, "--ignore", help="Do not report these rules: codes or prefixes, "
                                         "comma-separated; default: [tool.zerodoctor] ignore."),
    explain: bool = typer.Option(False, "--explain", help="List every rule not judged and what would show it."),
    fail_on: FailOn = typer.Option(FailOn.error, help="Exit 1 when a finding is at or above this severity."),
    input_format: Optional[str] = typer.Option(None, help="Force the input format instead of detecting it."),
    jobs: Optional[int] = typer.Option(None, "--jobs", "-j", min=1,
                                       help="Processes parsing large JSONL files (default: one per core; 1: none)."),
) -> None:
    """Diagnose finished (or running) training from its events; exit 1 on findings at --fail-on."""
    from zerodoctor.pipeline.diagnose import diagnose as run_diagnosis
    from zerodoctor.pipeline import InputError
    from zerodoctor.report.progress import ingest_progress
    from zerodoctor.report.selection import SelectionError, apply, resolve

    loaded = _load_rules(rules)
    try:
        selection = resolve(select, ignore, Path.cwd())
        selection.check(r.code for r in loaded)
    except SelectionError as exc:
        raise fail(str(exc)) from None
    try:
        with ingest_progress() as on_progress:
            report = run_diagnosis(paths, db=db, rules=loaded, input_format=input_format, on_progress=on_progress,
                                   plots=fmt is Format.html, jobs=jobs)
    except (InputError, OSError) as exc:
        raise fail(str(exc)) from None
    apply(report, selection)
    if fmt is Format.text:
        _write_text(report, output, explain)
    else:
        _emit(_rendered(report, fmt, explain), output)
    _exit_on(report.findings, fail_on)


def _rendered(report, fmt: Format, explain: bool) -> str:  # noqa: ANN001 - a report.model Report
    if fmt is Format.json:
        from zerodoctor.report.json import to_json

        return json.dumps(to_json(report), indent=2)
    if fmt is Format.markdown:
        from zerodoctor.report.markdown import to_markdown

        return to_markdown(report, explain=explain)
    if fmt in (Format.concise, Format.github):
        from zerodoctor.report import ci

        return ci.concise(report) if fmt is Format.concise else ci.github(report)
    from zerodoctor.report.html import to_html

    return to_html(report)


def _write_text(report, output: Optional[Path], explain: bool) -> None:  # noqa: ANN001 - a report.model Report
    from zerodoctor.report.text import render

    if output is None:
        render(report, _console(), explain=explain)
        return
    try:
        with output.open("w", encoding="utf-8") as f:
            render(report, _console(file=f), explain=explain)
    except OSError as exc:
        raise fail(f"{output}: {exc}") from None
    typer.echo(f"wrote {output}", err=True)


def _emit(text: str, output: Optional[Path]) -> None:
    if output is None:
        typer.echo(text)
        return
    try:
        output.write_text(text + "\n", encoding="utf-8")
    except OSError as exc:
        raise fail(f"{output}: {exc}") from None
    typer.echo(f"wrote {output}", err=True)


@app.command()
def compare(
    run_a: Path = typer.Argument(..., help="The run that went well: a run directory, an events JSONL or "
                                 "a console log."),
    run_b: Path = typer.Argument(..., help="The run to explain, in any of the same forms."),
    rules: Optional[List[Path]] = typer.Option(None, "--rules", help="Extra rule directory (repeatable)."),
    fmt: Page = typer.Option(Page.text, "--format", help="Output format (html: one self-contained page with plots)."),
    output: Optional[Path] = typer.Option(None, "-o", "--output",
                                          help="Write the comparison to this file instead of stdout."),
) -> None:
    """What differs between two runs: config, per-step numbers side by side, rules that fire in one only."""
    from zerodoctor.pipeline.diagnose import diagnose as run_diagnosis
    from zerodoctor.pipeline import InputError
    from zerodoctor.report.compare import compare as compare_runs, side, to_json
    from zerodoctor.report.compare_view import lines, to_html

    loaded = _load_rules(rules)
    try:
        a, b = (side(str(p), run_diagnosis([p], rules=loaded, plots=True)) for p in (run_a, run_b))
    except (InputError, OSError) as exc:
        raise fail(str(exc)) from None
    comparison = compare_runs(a, b)
    if fmt is Page.json:
        _emit(json.dumps(to_json(comparison), indent=2), output)
    elif fmt is Page.html:
        _emit(to_html(comparison), output)
    else:
        text = "\n".join(lines(comparison))
        if output is None:
            _console().print(text)
        else:
            _emit(_console(no_color=True).render_str(text).plain, output)


@app.command(context_settings={"ignore_unknown_options": True})
def run(
    command: List[str] = typer.Argument(..., help="The training command, after '--': deepspeed/torchrun/python ..."),
    runs_dir: Path = typer.Option(Path("runs"), "--runs-dir", help="Where run directories are created."),
    name: Optional[str] = typer.Option(None, "--name", help="Run id (default: time + random); reuse it on every node."),
    append: bool = typer.Option(False, "--append", help="Join a run directory other nodes of the same job write to."),
    mode: str = typer.Option("700", "--mode", help="Permissions of a new run directory, in octal (files get them "
                             "without x): 700 keeps the run to you, 750 shares it with your group."),
    fix_and_resume: Optional[str] = typer.Option(
        None, "--fix-and-resume", metavar="[=safe|unsafe-ok]",
        help="When the job fails, relaunch it from its last good checkpoint with the fix of its error finding: "
             "only safe fixes, or also unsafe-ok ones (lr, loss scale, bf16). See docs/run.md."),
    max_restarts: int = typer.Option(2, "--max-restarts", min=0, help="With --fix-and-resume: relaunches at most."),
    on: Optional[str] = typer.Option(None, "--on", help="With --fix-and-resume: act only on these rules "
                                     "(comma-separated codes or prefixes, e.g. ZD201,ZD4)."),
    resume_arg: Optional[str] = typer.Option(
        None, "--resume-arg", help="With --fix-and-resume: the arguments that make the job resume, appended on a "
        "relaunch; {ckpt} the checkpoint's directory, {dir} its save_dir, {tag} its tag, {step} its step."),
    config_arg: Optional[str] = typer.Option(
        None, "--config-arg", help="With --fix-and-resume: the flag that takes the DeepSpeed config, when not "
        "--deepspeed or --deepspeed_config."),
    allow_scratch: bool = typer.Option(False, "--allow-restart-from-scratch",
                                       help="With --fix-and-resume: relaunch from step 0 when no checkpoint was saved "
                                       "before the fault."),
    profile: Optional[str] = typer.Option(
        None, "--profile", metavar="STEPS", help="Profile these optimizer steps (e.g. 10-12) with torch.profiler on "
        "every rank: one trace per rank in the run directory, read back by diagnose."),
) -> None:
    """Run a training command with the probe injected; exit with the command's own status."""
    from zerodoctor.launch.wrapper import RunError, new_run_id, run as run_command

    if profile is not None:
        from zerodoctor.probe.profile import PROFILE_ENV, parse_steps

        try:
            parse_steps(profile)
        except ValueError as exc:
            raise fail(f"--profile {exc}") from None
        os.environ[PROFILE_ENV] = profile  # the job's environment is built from ours

    try:
        bits = int(mode, 8)
    except ValueError:
        bits = -1
    if not 0o700 <= bits <= 0o777:  # the owner must keep rwx: the probe writes there
        raise fail(f"--mode {mode}: give octal permissions that let you read and write the run, e.g. 700 or 750")
    run_id = name or new_run_id()
    try:
        if fix_and_resume is None:
            code = run_command(list(command), runs_dir, run_id, append=append, mode=bits)
        else:
            code = _fix_and_resume(list(command), runs_dir, run_id, fix_and_resume, append=append, mode=bits,
                                   max_restarts=max_restarts, on=on, resume_arg=resume_arg, config_arg=config_arg,
                                   allow_scratch=allow_scratch)
    except RunError as exc:
        raise fail(str(exc)) from None
    # the next step, on stderr: the job's stdout stays byte for byte its own
    shown = runs_dir / run_id
    typer.echo(f"zerodoctor: run {run_id} ended, exit code {code}; what happened in it: zerodoctor diagnose "
               f"{shlex.quote(str(shown))}", err=True)
    raise typer.Exit(code)


def _fix_and_resume(command: list[str], runs_dir: Path, name: Optional[str], policy: str, *, append: bool,
                    mode: int, max_restarts: int, on: Optional[str], resume_arg: Optional[str],
                    config_arg: Optional[str], allow_scratch: bool) -> int:
    from zerodoctor.resume.loop import Options, fix_and_resume
    from zerodoctor.resume.policy import POLICIES, Policy

    if policy not in POLICIES:
        raise fail(f"--fix-and-resume={policy}: choose one of {', '.join(POLICIES)}")
    only = tuple(code.strip().upper() for code in (on or "").split(",") if code.strip())
    options = Options(Policy(policy, only), max_restarts, resume_arg, config_arg, allow_scratch)
    return fix_and_resume(command, runs_dir, name, options, append=append, mode=mode)


@app.command()
def watch(
    dirs: List[Path] = typer.Argument(..., help="Directories of runs (runs/) or run directories to tail."),
    db: Optional[str] = typer.Option(None, help="Store (SQLAlchemy URL or SQLite path); "
                                     "default: <first DIR>/zerodoctor.db."),
    rules: Optional[List[Path]] = typer.Option(None, "--rules", help="Extra rule directory (repeatable)."),
    once: bool = typer.Option(False, "--once", help="Ingest what is there, print new findings and exit (cron, CI)."),
    poll: bool = typer.Option(False, "--poll", help="Poll instead of inotify (network filesystems; keep --db local)."),
    full: bool = typer.Option(False, "--full", help="Print each new finding as diagnose's full block, not one line."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Log only problems (quarantined lines, errors)."),
    table: bool = typer.Option(False, "--table", help="On a terminal, keep a live table of runs below the findings."),
    html: Optional[Path] = typer.Option(None, "--html", help="Keep a live HTML page per run and an index.html here."),
    metrics: Optional[str] = typer.Option(None, "--metrics", metavar="HOST:PORT",
                                          help="Serve Prometheus metrics on http://HOST:PORT/metrics (findings, "
                                          "per-rank step numbers, ingest health; docs/prometheus.md)."),
) -> None:
    """Tail run directories into the store; print each new finding once, as the run goes."""
    import logging

    from zerodoctor.report.terminal import escape, wrap_width
    from zerodoctor.report.text import finding_block, finding_line
    from zerodoctor.store.db import DEFAULT_DB_NAME, open_engine, url_for
    from zerodoctor.watch.daemon import Watcher, stop_on_signals
    from zerodoctor.watch.localfs import network_store_error
    from zerodoctor.watch.lock import writer_lock

    for d in dirs:
        if not d.is_dir():
            raise fail(f"{d}: no such directory")
    if html is not None:
        try:
            html.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise fail(f"{html}: cannot keep pages there: {exc.strerror}") from None
    served = _metrics_address(metrics, once=once)
    from zerodoctor.report.terminal import PlainFormatter

    handler = logging.StreamHandler()
    handler.setFormatter(PlainFormatter("zerodoctor: %(message)s"))
    logging.basicConfig(level=logging.WARNING if quiet else logging.INFO, handlers=[handler])
    loaded = _load_rules(rules)
    url = url_for(db or dirs[0] / DEFAULT_DB_NAME)
    if problem := network_store_error(url):
        raise fail(problem)
    console = _console()

    def announce(finding, config: dict, change: str | None) -> None:  # noqa: ANN001 - a rulebook Finding
        said = finding_block(finding, config, wrap_width(console)) if full else finding_line(finding.to_json())
        if change is not None:  # said before, with other numbers or severity: say what it was
            said = (f"[bold]changed[/] [dim]({escape(change)})[/]\n{said}" if full
                    else f"{said} [dim]({escape(change)})[/]")
        console.print(said)

    engine = open_engine(url)
    with writer_lock(engine) as lock:
        from zerodoctor.plugins.hookspecs import SettingsError
        from zerodoctor.watch.notify import notifiers

        try:
            targets = notifiers()
        except SettingsError as exc:
            raise fail(str(exc)) from None
        roots = list(dict.fromkeys(d.resolve() for d in dirs))  # DIR and DIR/../DIR are one root
        watcher = Watcher(engine, roots, loaded, announce, notifiers=targets, lock=lock)
        lock.stop = watcher.stop  # a stop signal also ends a wait for a dead watcher's lock
        server = _serve_metrics(watcher, served) if served is not None else None
        pages = None
        if html is not None:
            from zerodoctor.report.live import LivePages

            pages = LivePages(html, watcher.pipeline.series)
            watcher.on_judged = pages.judged
        stop_on_signals(watcher)
        try:
            _watch_loop(watcher, console, once=once, poll=poll, table=table,
                        flush=pages.flush if pages is not None else None)
        finally:
            if pages is not None:
                pages.flush(force=True)  # the last judgements, whatever their wait
            if server is not None:
                server.close()
        if once and watcher.skipped:
            raise fail(f"{len(watcher.skipped)} file(s) could not be read and were skipped (see above)")


def _metrics_address(text: Optional[str], *, once: bool) -> tuple[str, int] | None:
    """``--metrics HOST:PORT`` checked before anything starts: a typo is exit 2, not a watch with no metrics."""
    if text is None:
        return None
    if once:
        raise fail("--metrics serves a watch that keeps running; --once exits after one look (drop one of them)")
    try:
        from zerodoctor.watch.metrics import address
    except ImportError as exc:
        raise fail(f"--metrics needs prometheus-client ({exc}): pip install 'zerodoctor[metrics]'") from None

    try:
        return address(text)
    except ValueError as exc:
        raise fail(str(exc)) from None


def _serve_metrics(watcher, where: tuple[str, int]):  # noqa: ANN001, ANN202 - a Watcher; a metrics Server
    """The exporter bound before the first look, so a port in use is exit 2 before any line is read."""
    import logging

    from zerodoctor.watch.metrics import LiveMetrics, serve

    watcher.metrics = LiveMetrics()
    try:
        server = serve(watcher.metrics, *where)
    except OSError as exc:
        raise fail(f"--metrics {where[0]}:{where[1]}: cannot serve there: {exc.strerror or exc}") from None
    host, port = server.address
    shown_host = f"[{host}]" if ":" in host else host
    logging.getLogger("zerodoctor.watch").info("serving Prometheus metrics on http://%s:%d/metrics", shown_host, port)
    return server


def _watch_loop(watcher, console, *, once: bool, poll: bool, table: bool, flush) -> None:  # noqa: ANN001
    """``once``, the live table, or plain serving; ``flush`` (live pages) rides on the watcher's tick."""
    if once:
        watcher.once()
    elif table and console.is_terminal:
        from rich.live import Live

        from zerodoctor.report.status import table as runs_table
        from zerodoctor.store.status import collect

        with Live(console=console, auto_refresh=False) as live:

            def redraw() -> None:
                with watcher.engine.connect() as conn:
                    live.update(runs_table(collect(conn)), refresh=True)
                if flush is not None:
                    flush()

            watcher.serve(polling=poll, every_tick=redraw)
    else:
        watcher.serve(polling=poll, every_tick=flush)


@app.command()
def ack(
    run: str = typer.Argument(..., help="The run, as watch and status name it, or the Slurm job id or pod name "
                              "it ran as."),
    rules: List[str] = typer.Argument(..., help="The rules whose findings you know of (ZD404 ...)."),
    db: Optional[str] = typer.Option(None, help="Store (SQLAlchemy URL or SQLite path); default: runs/zerodoctor.db."),
) -> None:
    """Acknowledge findings: watch does not say them again, whatever their numbers do; status marks them."""
    import time

    from zerodoctor.store import findings as stored_findings
    from zerodoctor.store import runs as stored_runs
    from zerodoctor.store.db import DEFAULT_DB_NAME, open_engine, url_for

    url = url_for(db or Path("runs") / DEFAULT_DB_NAME)
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).is_file():
        raise fail(f"{url.removeprefix('sqlite:///')}: no store there (start 'zerodoctor watch DIR' or pass --db)")
    codes = [rule.strip().upper() for rule in rules]
    engine = open_engine(url)
    try:
        with engine.begin() as conn:
            run = _one_run(stored_runs.known_as(conn, run), run)
            run_id = stored_runs.named(conn, run)
            unknown = stored_findings.acknowledge(conn, run_id, codes, time.time())
            if unknown:
                raise fail(f"run {run} has no finding of {', '.join(unknown)}; nothing acknowledged")
    finally:
        engine.dispose()
    typer.echo(f"acknowledged {', '.join(codes)} of run {run}: watch will not say them again")


def _one_run(found: list[str], name: str) -> str:
    """The one run ``name`` means (``store.runs.known_as``); exit 2 where it means none, or several."""
    if not found:
        raise fail(f"{name}: no such run in the store (nor one run as Slurm job {name}, or on a host or pod so named)")
    if len(found) > 1:
        raise fail(f"{name} names {len(found)} runs: {', '.join(found)}; give one of them")
    return found[0]


@app.command()
def status(
    names: Optional[List[str]] = typer.Argument(None, help="Only these runs: their names, or the Slurm job ids "
                                                "(4242, array task 4242_3) or pod names they ran as."),
    db: Optional[str] = typer.Option(None, help="Store to read (SQLAlchemy URL or SQLite path); "
                                     "default: runs/zerodoctor.db."),
    fmt: Output = typer.Option(Output.text, "--format", help="Output format."),
) -> None:
    """Per run and file: events stored, lines quarantined, byte offset, findings, time of the last event."""
    from zerodoctor.report.status import render, to_json
    from zerodoctor.store import runs as stored_runs
    from zerodoctor.store.status import collect
    from zerodoctor.store.db import DEFAULT_DB_NAME, open_engine, url_for

    url = url_for(db or Path("runs") / DEFAULT_DB_NAME)
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).is_file():
        raise fail(f"{url.removeprefix('sqlite:///')}: no store there (start 'zerodoctor watch DIR' or pass --db)")
    engine = open_engine(url, read_only=True)
    try:
        with engine.connect() as conn:
            wanted = set()
            for name in names or ():
                found = stored_runs.known_as(conn, name)
                if not found:
                    _one_run(found, name)  # exit 2, naming it
                wanted.update(found)  # an array job's id: every task's run
            statuses = [s for s in collect(conn) if not names or s.run in wanted]
    finally:
        engine.dispose()
    if fmt.value == "json":
        typer.echo(json.dumps(to_json(statuses), indent=2))
    else:
        render(statuses, _console())


def _quantity(text: str | None, what: str) -> int | None:
    from zerodoctor.config.memory_plan import parse_quantity

    try:
        return None if text is None else parse_quantity(text, what)
    except ValueError as exc:
        raise fail(str(exc)) from None


def _fix_config(config: Path, findings: list, world_size: int | None, *, unsafe: bool, output: Optional[Path],
                in_place: bool, err: bool = False) -> None:
    """Apply findings' fixes to CONFIG, print the diff and what happened (to stderr when ``err``), write where asked."""
    from zerodoctor.config.static import ConfigError, load_config
    from zerodoctor.fixes.apply import FixError, apply_fixes, summary_lines, write_config

    try:
        result = apply_fixes(load_config(config), findings, unsafe=unsafe, world_size=world_size)
    except ConfigError as exc:
        raise fail(str(exc)) from None
    target = config if in_place else output
    if not result.applied:
        typer.echo("\n".join(["nothing to change in the config", *summary_lines(result)[:-1]]), err=err)
        return
    will_write = target is not None and (result.verdict is None or result.verdict.accepted)
    typer.echo(result.diff(config.name), nl=False, err=err)
    typer.echo("\n".join(summary_lines(result, written=will_write)), err=err)
    if target is None:
        typer.echo("not written (pass -o FILE, or --in-place to patch the input)", err=err)
        return
    try:
        write_config(result, target, source=config, in_place=in_place)
    except FixError as exc:
        typer.echo(f"zerodoctor: {exc}", err=True)
        raise typer.Exit(1) from None
    except OSError as exc:
        raise fail(f"{target}: {exc}") from None
    typer.echo(f"wrote {target}", err=err)


@app.command()
def check(
    config: Path = typer.Argument(..., help="DeepSpeed config (JSON) to check before launch."),
    world_size: Optional[int] = typer.Option(
        None, "--world-size", min=1, max=MAX_RANKS, show_default=False,
        help="Ranks the job will run on (data x sequence parallel); default: what train_batch_size / "
             "(micro-batch x grad-accum) gives, else 1."),
    params: Optional[str] = typer.Option(
        None, "--params", help="Model parameters, e.g. 7e9 or 7B: enables the plan of memory and step time."),
    gpu_mem: Optional[str] = typer.Option(None, "--gpu-mem",
                                          help="Memory of one GPU, e.g. 80GiB or 80GB: picks a ZeRO option."),
    host_mem: Optional[str] = typer.Option(
        None, "--host-mem", help="Host memory of one node, e.g. 1TB: an option that offloads must fit it too."),
    seq_len: Optional[int] = typer.Option(
        None, "--seq-len", min=1, max=MAX_RANKS,
        help="Tokens per sample, for the step times (default: 2048, assumed)."),
    gpu: Optional[str] = typer.Option(
        None, "--gpu", help="GPU kind for the step times' nominal FLOPS and links: V100, A100, H100, H200 or "
                            "TITAN-RTX (default: A100, assumed)."),
    gpus_per_node: Optional[int] = typer.Option(
        None, "--gpus-per-node", min=1, max=MAX_RANKS, help="GPUs in one node (default: 8, assumed)."),
    inter_node: Optional[str] = typer.Option(
        None, "--inter-node", help="Network out of one node: hdr, ndr, dgx-a100, dgx-h100, p3dn, p4d, 100gbe, or "
                                   "bytes per second such as 50GB (default: dgx-a100, assumed)."),
    source: Optional[List[Path]] = typer.Option(
        None, "--from", help="Run directory or log whose measured step times calibrate the plan (repeatable)."),
    model: Optional[Path] = typer.Option(
        None, "--model", help="The model's Hugging Face config.json: prices activations, so the plan says which "
                              "micro-batch fits under each option and its throughput."),
    fmt: Output = typer.Option(Output.text, "--format", help="Output format."),
    fail_on: FailOn = typer.Option(FailOn.error, help="Exit 1 when a finding is at or above this severity."),
    rules: Optional[List[Path]] = typer.Option(None, "--rules", help="Extra rule directory (repeatable)."),
    use_deepspeed: bool = typer.Option(True, "--deepspeed/--no-deepspeed",
                                       help="Also run DeepSpeed's own config parser and memory estimators, "
                                       "if installed."),
    fix: bool = typer.Option(False, "--fix", help="Apply the findings' safe fixes (see 'zerodoctor fix')."),
    unsafe: bool = typer.Option(False, "--unsafe", help="With --fix: apply unsafe fixes too (batch, lr, precision)."),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="With --fix: write the patched config here."),
    in_place: bool = typer.Option(False, "--in-place", help="With --fix: overwrite CONFIG itself."),
) -> None:
    """Find config mistakes before launch and plan memory and step time per ZeRO stage and offload."""
    from zerodoctor.config.model_shape import read_shape
    from zerodoctor.config.static import ConfigError, check as run_check
    from zerodoctor.deepspeed.stepinputs import Hardware
    from zerodoctor.deepspeed.steptime import NODE_LINKS

    try:
        shape = read_shape(model) if model else None
    except ValueError as exc:
        raise fail(str(exc)) from None
    loaded = _load_rules(rules)
    run, run_name = _measured_run(source, loaded) if source else (None, None)
    link = inter_node if inter_node is None or inter_node.lower() in NODE_LINKS else _link_rate(inter_node)
    hardware = Hardware(seq_len=seq_len, gpu=gpu, gpus_per_node=gpus_per_node, inter_node=link)
    try:
        report = run_check(config, loaded, world_size=world_size, params=_quantity(params, "--params"),
                           gpu_mem=_quantity(gpu_mem, "--gpu-mem"), use_deepspeed=use_deepspeed,
                           hardware=hardware, run=run, run_name=run_name, model=shape,
                           host_mem=_quantity(host_mem, "--host-mem"))
    except (ConfigError, ValueError) as exc:
        raise fail(str(exc)) from None
    if fmt.value == "json":
        from zerodoctor.report.check import to_json

        typer.echo(json.dumps(to_json(report), indent=2))
    else:
        from zerodoctor.report.check import render

        render(report, _console())
    if fix:
        _fix_config(config, report.findings, report.world_size if use_deepspeed else None, unsafe=unsafe, output=output,
                    in_place=in_place, err=fmt.value == "json")
    _exit_on(report.findings, fail_on, rejected=report.deepspeed is not None and not report.deepspeed.accepted)


def _link_rate(text: str) -> int:
    from zerodoctor.config.memory_plan import parse_quantity
    from zerodoctor.deepspeed.steptime import NODE_LINKS

    try:
        return parse_quantity(text, "--inter-node")
    except ValueError:
        raise fail(f"--inter-node {text!r}: expected one of {', '.join(NODE_LINKS)}, or bytes per second out of "
                   "one node such as 50GB") from None


def _measured_run(paths: List[Path], rules: list) -> tuple[dict, str]:
    """The signals of the run in ``paths`` whose step times ``check --from`` calibrates with, and its name."""
    from zerodoctor.pipeline import InputError
    from zerodoctor.pipeline.diagnose import diagnose as run_diagnosis

    try:
        report = run_diagnosis(paths, rules=rules)
    except (InputError, OSError) as exc:
        raise fail(str(exc)) from None
    timed = [(name, facts) for name, facts in report.facts.items() if facts.get("run.step_s")]
    if not timed:
        raise fail(f"{', '.join(map(str, paths))}: no step times to calibrate from (a DeepSpeed log shows them "
                   "with wall_clock_breakdown or steps_per_print; a run under 'zerodoctor run' always has them)")
    name, facts = max(timed, key=lambda t: len(t[1]))  # the run that showed the most
    return facts, name


@app.command("fix")
def fix_command(
    config: Path = typer.Argument(..., help="DeepSpeed config (JSON) to patch."),
    source: List[Path] = typer.Option(..., "--from", help="Run directory or log whose findings to fix (repeatable)."),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="Write the patched config here."),
    unsafe: bool = typer.Option(False, "--unsafe", help="Apply unsafe fixes too (batch, lr, precision)."),
    in_place: bool = typer.Option(False, "--in-place", help="Overwrite CONFIG itself."),
    world_size: Optional[int] = typer.Option(None, "--world-size", min=1, max=MAX_RANKS,
                                             help="Validate at this world size (default: the run's)."),
    rules: Optional[List[Path]] = typer.Option(None, "--rules", help="Extra rule directory (repeatable)."),
) -> None:
    """Apply the fixes of a run's findings to CONFIG; DeepSpeed must accept the result before it is written."""
    from zerodoctor.pipeline.diagnose import diagnose as run_diagnosis
    from zerodoctor.pipeline import InputError

    loaded = _load_rules(rules)
    try:
        report = run_diagnosis(source, rules=loaded)
    except (InputError, OSError) as exc:
        raise fail(str(exc)) from None
    findings = report.findings
    # DeepSpeed validates the fix at the world size the run stated, never at the ranks a log happened to show
    run_world = max((n for n in report.world_sizes.values() if n), default=None)
    if world_size is None and run_world is None:
        raise fail("the run does not say how many ranks it had: pass --world-size N, the size DeepSpeed "
                   "should validate the patched config at")
    _fix_config(config, findings, world_size or run_world, unsafe=unsafe, output=output, in_place=in_place)


@rules_app.command("list")
def rules_list(
    rules: Optional[List[Path]] = typer.Option(None, "--rules", help="Extra rule directory (repeatable)."),
    fmt: Output = typer.Option(Output.text, "--format", help="Output format."),
) -> None:
    """List every rule: code, name, category, severity, status."""
    loaded = _load_rules(rules)
    if fmt.value == "json":
        typer.echo(json.dumps([{"code": r.code, "name": r.spec.name, "category": r.spec.category,
                                "severity": r.spec.severity, "status": r.spec.status,
                                "signals": list(r.signals)} for r in loaded], indent=2))
        return
    rows = [("code", "name", "category", "severity", "status")] + [
        (r.code, r.spec.name, r.spec.category, r.spec.severity, r.spec.status) for r in loaded]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]  # the longest name sets its column
    for row in rows:
        typer.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[4])


@rules_app.command("show")
def rules_show(
    code: str = typer.Argument(..., help="Rule code, e.g. ZD201, or its name."),
    rules: Optional[List[Path]] = typer.Option(None, "--rules", help="Extra rule directory (repeatable)."),
) -> None:
    """Explain one rule: what it checks, why it matters, an example and the fix."""
    loaded = _load_rules(rules)
    match = [r for r in loaded if code.upper() == r.code or code == r.spec.name]
    if not match:
        raise fail(f"no rule '{code}' (see 'zerodoctor rules list')")
    r = match[0]
    typer.echo(f"# {r.code} {r.spec.name} ({r.spec.category}, {r.spec.severity}, {r.spec.status})\n")
    typer.echo(f"Condition: {r.condition.text}" + (f"  for {r.spec.hold} steps" if r.spec.hold else "") + "\n")
    typer.echo(r.spec.doc.rstrip())


@plugins_app.command("list")
def plugins_list(
    fmt: Output = typer.Option(Output.text, "--format", help="Output format."),
) -> None:
    """List loaded plugins (built-ins first), where each comes from and the hooks it implements."""
    from zerodoctor import plugins

    infos = plugins.listing()
    if fmt.value == "json":
        typer.echo(json.dumps([{"name": i.name, "origin": i.origin, "hooks": list(i.hooks)} for i in infos], indent=2))
        return
    for i in infos:
        typer.echo(f"{i.name:<28} {i.origin:<32} {', '.join(i.hooks)}")


def main() -> None:
    """The console script. An unexpected error exits 3, never 1: 1 means "findings at --fail-on"."""
    from zerodoctor import plugins

    plugins.hook().register_commands(app=app)
    try:
        from zerodoctor.cli.helptext import readable

        readable(typer.main.get_command(app)).main(args=_optional_values(sys.argv[1:]), prog_name="zerodoctor",
                                                   standalone_mode=True)
    except Exception as exc:
        from zerodoctor.store.db import describe

        if (problem := _environment_problem(exc)) and not os.environ.get("ZERODOCTOR_DEBUG"):
            typer.echo(f"zerodoctor: error: {problem}", err=True)
            sys.exit(2)
        if os.environ.get("ZERODOCTOR_DEBUG"):
            raise
        typer.echo(f"zerodoctor: internal error: {describe(exc)} "
                   "(a bug: please report it; ZERODOCTOR_DEBUG=1 shows the traceback)", err=True)
        sys.exit(3)


OPTIONAL_VALUES = {"--fix-and-resume": ("safe", "unsafe-ok")}  # option: its values, the first when none is given


def _optional_values(argv: list[str]) -> list[str]:
    """``--fix-and-resume`` alone → ``--fix-and-resume=safe`` (``--fix-and-resume unsafe-ok`` → ``=unsafe-ok``).

    Typer has no option whose value may be left out; this spells it out, up to the ``--`` before the
    training command, whose own arguments are never touched.
    """
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            return out + argv[i:]
        if arg in OPTIONAL_VALUES:
            values = OPTIONAL_VALUES[arg]
            given = i + 1 < len(argv) and argv[i + 1] in values
            arg = f"{arg}={argv[i + 1] if given else values[0]}"
            i += given
        out.append(arg)
        i += 1
    return out


# What the machine refuses, not a bug: a full disk or quota, a read-only filesystem, permissions,
# no descriptors left. Anything else escaping a command is one (exit 3).
_ENVIRONMENT_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EMFILE, errno.ENFILE,
                       errno.EIO}
_STORE_REFUSALS = ("database or disk is full", "disk I/O error", "attempt to write a readonly database",
                   "unable to open database file")


def _environment_problem(exc: Exception) -> str | None:
    """One line for an error the environment caused, or None for a bug."""
    from zerodoctor.store.db import StoreError

    if isinstance(exc, StoreError):  # a bad --db, a refused login, an unreachable server, another writer
        return str(exc)
    if isinstance(exc, OSError) and exc.errno in _ENVIRONMENT_ERRNOS:
        return f"{exc.filename}: {exc.strerror}" if exc.filename else f"{exc.strerror} ({errno.errorcode[exc.errno]})"
    orig = getattr(exc, "orig", None)  # SQLAlchemy's wrapper around the driver's error
    if orig is not None and any(text in str(orig) for text in _STORE_REFUSALS):
        return f"the store refused to write: {str(orig).splitlines()[0]}"
    return None


if __name__ == "__main__":
    sys.exit(main())

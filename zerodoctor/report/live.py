"""Report: each judgement ``watch`` makes → one live HTML page per run, beside an index of runs and their worst finding.

Pages are written atomically (a temporary file, then ``os.replace``), so a browser never
loads half a page. Each page has a script beside it (``<page>.live.js``, rewritten with the page)
that the open page loads again every few seconds to put the new findings and plots in place of
its own, so a reader keeps their place, zoom and open sections (``report/html.live_script``). A run's page is written
only after it was judged, and at most once per ``every_s`` (stretched to ten times the last
write's cost): a judgement every 0.2 s on a busy run costs one store query and one page
every few seconds, never one per judgement. ``index.json`` keeps what the index shows, so a
restarted ``watch`` lists the runs it has not judged again yet.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Callable

from zerodoctor.report.html import document, live_script, page_parts, worst
from zerodoctor.report.model import Report
from zerodoctor.rulebook.finding import Judgement
from zerodoctor.signals.plots import RunSeries

EVERY_S = 3.0


PLAIN_NAME = 100  # characters of a run's name a page's file name keeps (a file name holds 255 bytes)


def page_name(run: str) -> str:
    """A run's page: its name where that is a plain file name, else its safe characters (at most
    ``PLAIN_NAME``) and 8 hex of the name's sha256, so no two runs share a page: ``训练-7b`` and
    ``测试-7b`` both make ``__-7b``, a run named ``index`` would be the index, a 300-character name
    no file system holds, a leading dot hides the page (and is how temporary files start)."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", run)
    if safe == run and 0 < len(run) <= PLAIN_NAME and run != "index" and not run.startswith("."):
        return run + ".html"
    return f"{safe.lstrip('.')[:PLAIN_NAME]}-{hashlib.sha256(run.encode()).hexdigest()[:8]}.html"


def live_name(page: str) -> str:
    """The script beside ``page`` that the open page loads to update itself."""
    return page.removesuffix(".html") + ".live.js"


def write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


@dataclass
class _Run:
    judgement: Judgement | None = None  # the latest one not yet written
    written_at: float = -1e9
    every_s: float = EVERY_S
    shown: dict = field(default_factory=dict)  # what the index says: worst finding, count, time judged


class LivePages:
    """Keeps ``directory`` holding ``index.html`` and one page per judged run.

    Args:
        series: reads a run's plot series from the store (``Pipeline.series``).
    """

    def __init__(self, directory: Path, series: Callable[[str], RunSeries], *, every_s: float = EVERY_S) -> None:
        self.directory, self.series, self.every_s = directory, series, every_s
        directory.mkdir(parents=True, exist_ok=True)
        self.runs: dict[str, _Run] = {}
        for name, entry in _kept_index(directory / "index.json").items():
            self.runs[name] = _Run(every_s=every_s, shown=entry)

    def judged(self, judgement: Judgement) -> None:
        """A run was judged: its page is due now, or at the end of its wait (``flush``)."""
        run = self.runs.setdefault(judgement.run, _Run(every_s=self.every_s))
        run.judgement = judgement
        self.flush()

    def flush(self, *, force: bool = False) -> None:
        """Write the pages whose run was judged since its last write and whose wait is over."""
        now = time.monotonic()
        wrote = False
        for name, run in self.runs.items():
            if run.judgement is None or (not force and now < run.written_at + run.every_s):
                continue
            started = time.monotonic()
            self._write_run(name, run)
            run.every_s = max(self.every_s, 10 * (time.monotonic() - started))
            run.written_at = time.monotonic()
            wrote = True
        if wrote:
            self._write_index()

    def _write_run(self, name: str, run: _Run) -> None:
        j, run.judgement = run.judgement, None
        report = Report(findings=j.findings, unevaluated=j.unevaluated, configs={name: j.config},
                        series={name: self.series(name)})
        top = worst(j.findings)
        run.shown = {"findings": len(j.findings), "updated": time.time(),
                     "worst": {k: getattr(top, k) for k in ("severity", "rule", "name", "message")} if top else None}
        self._write_page(page_name(name), *page_parts(report))

    def _write_index(self) -> None:
        rows = []
        for name, run in sorted(self.runs.items()):
            top, count, when = run.shown.get("worst"), run.shown.get("findings", 0), run.shown.get("updated")
            line = f"{top['rule']} {top['name']}: {top['message']}" if top else "no findings"
            more = f" (+{count - 1} more)" if count > 1 else ""
            rows.append(f'<tr><td><a href="{escape(page_name(name))}">{escape(name)}</a></td>'
                        f'<td class="sev-{top["severity"] if top else "ok"}">{escape(line + more)}</td>'
                        f'<td>{time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(when)) if when else "–"}</td></tr>')
        body = ("<h1>zerodoctor watch</h1><table><tr><th>run</th><th>worst finding</th><th>judged at</th></tr>"
                + "".join(rows) + "</table>")
        write_atomically(self.directory / "index.json", json.dumps({n: r.shown for n, r in self.runs.items()}))
        self._write_page("index.html", "zerodoctor watch", body, [])

    def _write_page(self, page: str, title: str, body: str, runs: list[dict]) -> None:
        """The page and its live script: the script first, so a page never loads an older one than itself."""
        script = live_name(page)
        write_atomically(self.directory / script, live_script(body, runs))
        write_atomically(self.directory / page, document(title, body, runs, live=script))


def _kept_index(path: Path) -> dict[str, dict]:
    """What an earlier watch's index showed, run by run: an entry of another shape (a hand edit, a disk fault, an
    older writer) is left out, so the index is written again with the runs judged from now on, never stopped by it."""
    try:
        shown = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(shown, dict):
        return {}
    return {name: entry for name, entry in shown.items() if _entry_shape(entry)}


def _entry_shape(entry: object) -> bool:
    if not isinstance(entry, dict) or not isinstance(entry.get("findings", 0), int):
        return False
    if not isinstance(entry.get("updated"), (int, float, type(None))):
        return False
    top = entry.get("worst")
    return top is None or isinstance(top, dict) and all(isinstance(top.get(k), str)
                                                         for k in ("severity", "rule", "name", "message"))

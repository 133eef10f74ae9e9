"""Headless Chromium driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``).

No websocket client and no browser download: Debian's chromium reads NUL-separated JSON
commands on fd 3 and answers on fd 4. ``render`` loads one file, waits for its load event,
collects every console error and uncaught exception, runs one expression in the page and
takes a screenshot.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--remote-debugging-pipe"]


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@dataclass
class Rendered:
    value: Any  # what the expression returned
    errors: list[str] = field(default_factory=list)  # console errors and uncaught exceptions
    requests: list[str] = field(default_factory=list)  # every URL the page asked for
    load_s: float = 0.0


class Browser:
    def __init__(self, timeout_s: float = 60.0) -> None:
        self.timeout_s = timeout_s
        self.profile = tempfile.mkdtemp(prefix="zerodoctor-chromium-")
        to_chrome, self._out = os.pipe()
        self._in, from_chrome = os.pipe()

        def _fds() -> None:  # the child's fds 3 and 4, inheritable (a dup2 onto itself would keep CLOEXEC)
            a, b = os.dup(to_chrome), os.dup(from_chrome)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen([chromium(), *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
                                     preexec_fn=_fds, close_fds=False, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_chrome)
        os.close(from_chrome)
        self._buf = b""
        self._id = 0
        self._events: list[dict] = []

    def close(self) -> None:
        for fd in (self._out, self._in):
            os.close(fd)
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- the protocol ---------------------------------------------------------------

    def _recv(self, deadline: float) -> dict:
        while b"\0" not in self._buf:
            if time.monotonic() > deadline:
                raise TimeoutError("chromium did not answer in time")
            chunk = os.read(self._in, 1 << 16)
            if not chunk:
                raise RuntimeError("chromium closed the pipe")
            self._buf += chunk
        message, self._buf = self._buf.split(b"\0", 1)
        return json.loads(message)

    def call(self, method: str, session: str | None = None, **params: Any) -> dict:
        self._id += 1
        message = {"id": self._id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self._out, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout_s
        while True:
            reply = self._recv(deadline)
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self._events.append(reply)

    def _wait_for(self, method: str, session: str) -> None:
        deadline = time.monotonic() + self.timeout_s
        while not any(e.get("method") == method and e.get("sessionId") == session for e in self._events):
            self._events.append(self._recv(deadline))

    # -- what a test does -----------------------------------------------------------

    def render(self, page: Path, expression: str, screenshot: Path | None = None,
               size: tuple[int, int] = (1280, 2400)) -> Rendered:
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable", session)
        self.call("Emulation.setDeviceMetricsOverride", session, width=size[0], height=size[1],
                  deviceScaleFactor=1, mobile=False)
        self._events.clear()
        started = time.monotonic()
        self.call("Page.navigate", session, url=page.absolute().as_uri())
        self._wait_for("Page.loadEventFired", session)
        out = Rendered(value=None, load_s=time.monotonic() - started)
        result = self.call("Runtime.evaluate", session, expression=expression, returnByValue=True, awaitPromise=True)
        out.value = result.get("result", {}).get("value")
        if screenshot is not None:
            shot = self.call("Page.captureScreenshot", session, format="png", captureBeyondViewport=True)
            screenshot.write_bytes(base64.b64decode(shot["data"]))
        for e in self._events:
            if e.get("sessionId") != session:
                continue
            method, params = e.get("method"), e.get("params", {})
            if method == "Runtime.exceptionThrown":
                details = params["exceptionDetails"]
                out.errors.append(details.get("exception", {}).get("description") or details.get("text", "?"))
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                out.errors.append(" ".join(str(a.get("value", a.get("description"))) for a in params["args"]))
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                out.errors.append(params["entry"].get("text", "?"))
            elif method == "Network.requestWillBeSent":
                out.requests.append(params["request"]["url"])
        self.call("Target.closeTarget", targetId=target)
        return out

"""Notifier: one finding → one HTTP POST, with a timeout, bounded retries with backoff and an overall deadline.

The per-read timeout alone does not bound a send: an endpoint that trickles one byte every
few seconds never lets a read time out. The deadline does: when it passes, the request's
socket is shut down, which ends the blocked read at once. Only a 2xx answer counts as delivered; anything else raises ``DeliveryError`` after the last
retry, and ``watch`` keeps the finding pending for a later pass. A webhook URL is a secret
(Slack's path is the credential), so the URL never leaves this module: the notifier's name
(logs, the deliveries table) and its errors carry the host and a short hash of the URL.
"""

from __future__ import annotations

import functools
import hashlib
import http.client
import json
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Callable

STYLES = ("json", "slack")


class DeliveryError(RuntimeError):
    """The endpoint did not accept the finding after every retry."""


class WebhookNotifier:
    def __init__(self, url: str, *, style: str = "json", timeout_s: float = 5.0, retries: int = 3,
                 backoff_s: float = 0.5, deadline_s: float = 30.0, sleep: Callable[[float], None] = time.sleep) -> None:
        if style not in STYLES:
            raise ValueError(f"webhook format must be one of {STYLES}, not {style!r}")
        self.where = redacted(url)
        self.name = f"webhook:{self.where}"
        self.url, self.style, self.timeout_s, self.deadline_s = url, style, timeout_s, deadline_s
        self.retries, self.backoff_s, self._sleep = retries, backoff_s, sleep

    def send(self, finding: dict[str, Any]) -> None:
        """POST the finding; DeliveryError when no attempt got a 2xx within ``deadline_s`` in all."""
        body = json.dumps(slack_message(finding) if self.style == "slack" else finding).encode()
        request = urllib.request.Request(self.url, data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
        deadline = time.monotonic() + self.deadline_s
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                self._sleep(min(self.backoff_s * 2 ** (attempt - 1), max(0.0, deadline - time.monotonic())))
            left = deadline - time.monotonic()
            if left <= 0:
                last = f"no answer within the {self.deadline_s:g} s deadline"
                break
            try:
                with _Deadline(left) as watch, watch.opener().open(request, timeout=min(self.timeout_s, left)) as answer:
                    if 200 <= answer.status < 300:
                        return
                    last = f"HTTP {answer.status}"
            except urllib.error.HTTPError as exc:
                last = f"HTTP {exc.code}"
                if 400 <= exc.code < 500 and exc.code not in (408, 429):
                    break  # the request itself is wrong: retrying cannot help
            except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
                last = str(getattr(exc, "reason", exc)) or type(exc).__name__
                if time.monotonic() >= deadline:
                    last = f"no answer within the {self.deadline_s:g} s deadline ({last})"
                    break
        raise DeliveryError(f"{self.where}: {last} after {attempt + 1} attempt(s)")


class _Deadline:
    """Shuts down the sockets of one request when ``seconds`` have passed, ending any read blocked on them."""

    def __init__(self, seconds: float) -> None:
        self._sockets: list[socket.socket] = []
        self._expired = False
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def __enter__(self) -> _Deadline:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()

    def opener(self) -> urllib.request.OpenerDirector:
        """urllib as usual (proxies from the environment included), through connections this deadline watches."""
        return urllib.request.build_opener(_HTTPHandler(self), _HTTPSHandler(self))

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            if self._expired:
                raise TimeoutError("the delivery deadline passed")
            self._sockets.append(sock)

    def _expire(self) -> None:
        with self._lock:
            self._expired = True
            for sock in self._sockets:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass  # already closed


class _Watched:
    """An ``http.client`` connection whose socket, once connected, is handed to a ``_Deadline``."""

    def __init__(self, *args: Any, deadline: _Deadline, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline = deadline

    def connect(self) -> None:
        super().connect()
        self._deadline.watch(self.sock)


class _HTTPConnection(_Watched, http.client.HTTPConnection):
    pass


class _HTTPSConnection(_Watched, http.client.HTTPSConnection):
    pass


class _HTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, deadline: _Deadline) -> None:
        super().__init__()
        self._deadline = deadline

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(functools.partial(_HTTPConnection, deadline=self._deadline), req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, deadline: _Deadline) -> None:
        super().__init__()
        self._deadline = deadline

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(functools.partial(_HTTPSConnection, deadline=self._deadline), req, context=self._context)


def redacted(url: str) -> str:
    """'https://hooks.slack.com/services/T0/B0/secret' → 'hooks.slack.com#<8 hex of the URL's sha256>'.

    The host says where findings go; the hash tells two URLs on one host apart (and keeps a
    finding's delivery record tied to its URL) without revealing the path or any credentials.
    """
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or "?"
    if parts.port:
        host += f":{parts.port}"
    return f"{host}#{hashlib.sha256(url.encode()).hexdigest()[:8]}"


def slack_message(finding: dict[str, Any]) -> dict[str, str]:
    """A Slack incoming-webhook payload: the fault, where, and the first fix, in plain mrkdwn."""
    where = f"run `{finding.get('run', '?')}`"
    if finding.get("steps"):
        where += f", steps {finding['steps'][0]}–{finding['steps'][1]}"
    lines = [f"*{finding['severity'].upper()} {finding['rule']} {finding['name']}* ({where})", finding["message"]]
    if finding.get("fixes"):
        fix = finding["fixes"][0]
        lines.append(f"fix ({fix['safety']}): {fix['title']}")
    return {"text": "\n".join(lines)}

"""Notifier: one finding → one HTTP POST, with a timeout, bounded retries with backoff and an overall deadline.

The per-read timeout alone does not bound a send: an endpoint that trickles one byte every
few seconds never lets a read time out. The deadline does: when it passes, the request's
socket is shut down, which ends the blocked read at once. Only a 2xx answer counts as delivered (a
redirect is not followed: a POST redirected to a login page reached no endpoint); anything else raises
``DeliveryError`` after the last retry, and ``watch`` keeps the finding pending for a later pass. A webhook URL is a
secret (Slack's path is the credential), so the URL never leaves this module: the notifier's name
(logs, the deliveries table) and its errors carry the host and a short hash of the URL.
"""

from __future__ import annotations

import hashlib
import json
import time
import urllib.parse
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
        import http.client
        import urllib.error
        import urllib.request

        from zerodoctor_webhook.transport import Deadline

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
                with Deadline(left) as watch, watch.opener().open(request, timeout=min(self.timeout_s, left)) as answer:
                    answer.read()  # the whole answer within the deadline: a 2xx whose body trickles past it is none
                    if 200 <= answer.status < 300 and not watch.expired:
                        return
                    last = f"HTTP {answer.status}" if not watch.expired else "the answer trickled past the deadline"
            except urllib.error.HTTPError as exc:
                last = f"HTTP {exc.code}"
                if 300 <= exc.code < 400:
                    last += " (a redirect, not followed: the endpoint did not take the finding; check the URL)"
                    break  # an SSO login page, a moved hook: the same answer at every retry
                if 400 <= exc.code < 500 and exc.code not in (408, 429):
                    break  # the request itself is wrong: retrying cannot help
            except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
                last = str(getattr(exc, "reason", exc)) or type(exc).__name__
                if time.monotonic() >= deadline:
                    last = f"no answer within the {self.deadline_s:g} s deadline ({last})"
                    break
        raise DeliveryError(f"{self.where}: {last} after {attempt + 1} attempt(s)")


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
    """A Slack incoming-webhook payload: the fault, where, and the first fix, in plain mrkdwn, every text
    from the run (its name, a message quoting a log) escaped: a run cannot ping a channel."""
    where = f"run `{finding.get('run', '?')}`"
    if finding.get("steps"):
        where += f", steps {finding['steps'][0]}–{finding['steps'][1]}"
    lines = [f"*{finding['severity'].upper()} {finding['rule']} {finding['name']}* ({where})", finding["message"]]
    if finding.get("fixes"):
        fix = finding["fixes"][0]
        lines.append(f"fix ({fix['safety']}): {fix['title']}")
    return {"text": slack_escaped("\n".join(lines))}


def slack_escaped(text: str) -> str:
    """Text as Slack shows it literally: ``&``, ``<`` and ``>`` are its control characters (``<!channel>``
    pings everyone, ``<https://x|label>`` hides a link), escaped as Slack's message formatting says."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")

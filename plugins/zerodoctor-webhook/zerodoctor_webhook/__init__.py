"""zerodoctor plugin: a webhook notifier for ``zerodoctor watch``, configured from the environment."""

from __future__ import annotations

import math
import os
import urllib.parse
from typing import Callable, TypeVar

from zerodoctor.plugins.hookspecs import SettingsError, hookimpl
from zerodoctor_webhook.notifier import STYLES, WebhookNotifier

T = TypeVar("T")


@hookimpl
def register_notifiers() -> list[WebhookNotifier]:
    url = os.environ.get("ZERODOCTOR_WEBHOOK_URL")
    if not url:
        return []
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        # The URL is a secret (Slack's path is the credential): say what is wrong, not what it is.
        raise SettingsError("ZERODOCTOR_WEBHOOK_URL is not an http:// or https:// URL with a host")
    style = os.environ.get("ZERODOCTOR_WEBHOOK_FORMAT", "json")
    if style not in STYLES:
        raise SettingsError(f"ZERODOCTOR_WEBHOOK_FORMAT={style!r}: must be one of {', '.join(STYLES)}")
    return [WebhookNotifier(
        url,
        style=style,
        timeout_s=_setting("ZERODOCTOR_WEBHOOK_TIMEOUT", "5", float, lambda v: 0 < v < math.inf, "seconds > 0"),
        retries=_setting("ZERODOCTOR_WEBHOOK_RETRIES", "3", int, lambda v: 0 <= v <= 10, "a count from 0 to 10"),
        deadline_s=_setting("ZERODOCTOR_WEBHOOK_DEADLINE", "30", float, lambda v: 0 < v < math.inf, "seconds > 0"),
    )]


def _setting(name: str, default: str, parse: Callable[[str], T], valid: Callable[[T], bool], what: str) -> T:
    text = os.environ.get(name, default)
    try:
        value = parse(text)
    except ValueError:
        raise SettingsError(f"{name}={text!r}: must be {what}") from None
    if not valid(value):
        raise SettingsError(f"{name}={text!r}: must be {what}")
    return value

"""zerodoctor plugin: a webhook notifier for ``zerodoctor watch``, configured from the environment."""

from __future__ import annotations

import os

from zerodoctor.hookspecs import hookimpl
from zerodoctor_webhook.notifier import WebhookNotifier


@hookimpl
def register_notifiers() -> list[WebhookNotifier]:
    url = os.environ.get("ZERODOCTOR_WEBHOOK_URL")
    if not url:
        return []
    return [WebhookNotifier(
        url,
        style=os.environ.get("ZERODOCTOR_WEBHOOK_FORMAT", "json"),
        timeout_s=float(os.environ.get("ZERODOCTOR_WEBHOOK_TIMEOUT", "5")),
        retries=int(os.environ.get("ZERODOCTOR_WEBHOOK_RETRIES", "3")),
    )]

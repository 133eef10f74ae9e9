"""Transport: one HTTP request under a deadline that ends even a read an endpoint trickles out.

Kept apart from ``notifier`` so that loading the plugin (every zerodoctor command, ``--help``
included) imports no ``http.client``, ``ssl`` or ``urllib.request``: only a send does.
"""

from __future__ import annotations

import functools
import http.client
import socket
import threading
import urllib.request
from typing import Any


class Deadline:
    """Shuts down the sockets of one request when ``seconds`` have passed, ending any read blocked on them."""

    def __init__(self, seconds: float) -> None:
        self._sockets: list[socket.socket] = []
        self._expired = False
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def __enter__(self) -> Deadline:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()

    def opener(self) -> urllib.request.OpenerDirector:
        """urllib as usual (proxies from the environment included), through connections this deadline watches,
        never following a redirect: urllib turns a POST answered 302 into a GET of the new place (an SSO
        login page answering 200), which no endpoint received; the 3xx is the answer, and no delivery."""
        return urllib.request.build_opener(_HTTPHandler(self), _HTTPSHandler(self), _NoRedirect())

    @property
    def expired(self) -> bool:
        with self._lock:
            return self._expired

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


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # urllib then raises HTTPError with the 3xx


class _Watched:
    """An ``http.client`` connection whose socket, once connected, is handed to a ``Deadline``."""

    def __init__(self, *args: Any, deadline: Deadline, **kwargs: Any) -> None:
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
    def __init__(self, deadline: Deadline) -> None:
        super().__init__()
        self._deadline = deadline

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(functools.partial(_HTTPConnection, deadline=self._deadline), req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, deadline: Deadline) -> None:
        super().__init__()
        self._deadline = deadline

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(functools.partial(_HTTPSConnection, deadline=self._deadline), req, context=self._context)

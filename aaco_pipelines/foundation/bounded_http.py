"""One HTTP POST to a stranger's endpoint, bounded in every way it controls: a total deadline,
a cap on the answer's size, and no redirect followed.

`requests` bounds each socket read, not the exchange: an endpoint that answers one byte every
few seconds holds it for ever, an endless answer fills the memory, and a 301/302 turns the
POST into an empty GET (the notification silently lost) while a 307 re-sends the body and its
signature to another origin. So the exchange is http.client's (the standard library's, which
follows no redirect) under a watchdog that shuts the socket down at the deadline, which wakes
any read blocked on it. Proxies are honoured as `requests` did: HTTP(S)_PROXY and NO_PROXY.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import ssl
import threading
import urllib.request
from dataclasses import dataclass
from urllib.parse import urlsplit

MAX_ANSWER_BYTES = 64 * 1024  # a webhook's answer is a word ("ok") or a short JSON


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes  # at most MAX_ANSWER_BYTES
    location: str | None  # a redirect's target


class ExchangeFailed(Exception):
    """No whole answer: the reason, in words (never the URL's path or query)."""


def post(url: str, body: bytes, headers: dict[str, str], deadline_s: float) -> Answer:
    """POST `body`; the answer as it came within `deadline_s` in all (connect, send, read)."""
    parts = urlsplit(url)
    proxy = _proxy(parts)
    connection = _connection(parts, proxy, deadline_s)
    expired = threading.Event()

    def cut() -> None:
        expired.set()
        if connection.sock is not None:
            with contextlib.suppress(OSError):
                connection.sock.shutdown(socket.SHUT_RDWR)

    watchdog = threading.Timer(deadline_s, cut)
    watchdog.daemon = True
    watchdog.start()
    try:
        # a plain-HTTP request through a proxy names the whole URL
        proxied_plain = proxy is not None and parts.scheme == "http"
        target = (
            url
            if proxied_plain
            else (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        )
        connection.request("POST", target, body=body, headers=headers)
        answer = connection.getresponse()
        read = answer.read(MAX_ANSWER_BYTES + 1)
        if len(read) > MAX_ANSWER_BYTES:
            raise ExchangeFailed(f"answered more than {MAX_ANSWER_BYTES // 1024} KiB")
        return Answer(answer.status, read, answer.getheader("Location"))
    except (OSError, http.client.HTTPException) as exc:
        if expired.is_set() or isinstance(exc, TimeoutError):
            raise ExchangeFailed(f"no whole answer within {deadline_s:g} s") from None
        raise ExchangeFailed(f"could not be reached ({type(exc).__name__})") from None
    finally:
        watchdog.cancel()
        connection.close()


def _connection(parts, proxy, deadline_s: float) -> http.client.HTTPConnection:
    """A connection to the endpoint, or to its proxy (tunnelled for https)."""
    host, port = parts.hostname, parts.port
    if parts.scheme == "https":
        context = ssl.create_default_context()
        if proxy is None:
            return http.client.HTTPSConnection(host, port, timeout=deadline_s, context=context)
        connection = http.client.HTTPSConnection(
            proxy.hostname, proxy.port or 8080, timeout=deadline_s, context=context
        )
        connection.set_tunnel(host, port or 443)
        return connection
    if proxy is None:
        return http.client.HTTPConnection(host, port, timeout=deadline_s)
    return http.client.HTTPConnection(proxy.hostname, proxy.port or 8080, timeout=deadline_s)


def _proxy(parts):
    """The proxy for this URL from the environment, or None (NO_PROXY honoured)."""
    proxies = urllib.request.getproxies_environment()
    address = proxies.get(parts.scheme)
    if not address or urllib.request.proxy_bypass_environment(parts.hostname or "", proxies):
        return None
    return urlsplit(address if "://" in address else f"http://{address}")

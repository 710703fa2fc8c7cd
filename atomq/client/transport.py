"""The client's HTTP: urllib3's connection pools, the library requests itself runs on.

A consumer's get of 100 messages that acks the batch before cost the caller
0.9 ms of CPU through a ``requests.Session`` and 0.4 ms through urllib3 with
orjson reading the answer (one client, one node on the same machine): the
rest was requests' own work on each call (its hooks, prepared requests,
cookies and adapters), which this client never uses. What requests gave the
client is kept: the proxy the environment names (``HTTP_PROXY``,
``HTTPS_PROXY``, ``ALL_PROXY``, ``NO_PROXY``; a user and password in its URL
sign in to it), the CA bundle it names
(``REQUESTS_CA_BUNDLE``, ``CURL_CA_BUNDLE``) or certifi's, no retry (a
request that may have reached the node is never sent twice), redirects
followed, and a keep-alive connection per thread.
"""

from __future__ import annotations

import os
import urllib.request
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

import certifi
import urllib3
from urllib3.util import Retry, Timeout

NO_RETRY = Retry(total=None, connect=0, read=0, status=0, other=0, redirect=10, raise_on_redirect=True)
"""As requests does it: nothing is sent again, redirects are followed (up to 10)."""


class TransportError(Exception):
    """The node could not be reached, or the connection broke before its answer came."""


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    headers: Any
    data: bytes


def proxy_for(url: str) -> str | None:
    """The proxy the environment names for ``url``, as requests finds it (``<SCHEME>_PROXY``, else
    ``ALL_PROXY``): none for a host that ``NO_PROXY`` names."""
    parts = urlsplit(url)
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if not proxy or urllib.request.proxy_bypass(parts.hostname or ""):
        return None
    return proxy


def proxy_manager(proxy: str, **options: Any) -> urllib3.ProxyManager:
    """A pool manager through ``proxy``, which signs in with the user and password its URL
    carries, as requests does (urllib3 itself leaves them out)."""
    auth = urllib3.util.parse_url(proxy).auth
    headers = urllib3.make_headers(proxy_basic_auth=unquote(auth)) if auth else None
    return urllib3.ProxyManager(proxy, proxy_headers=headers, **options)


def ca_bundle() -> str:
    return os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE") or certifi.where()


class Transport:
    """Requests to one node, over keep-alive connections (up to 10 kept a host, as requests keeps them)."""

    def __init__(self, url: str) -> None:
        proxy = proxy_for(url)
        options: dict[str, Any] = {"retries": NO_RETRY, "ca_certs": ca_bundle(), "maxsize": 10}
        self._unusable: str | None = None
        try:
            self._pools = proxy_manager(proxy, **options) if proxy else urllib3.PoolManager(**options)
        except urllib3.exceptions.ProxySchemeUnknown as exc:
            # A SOCKS proxy, say: every call fails saying so, as it did through requests without PySocks.
            self._pools, self._unusable = urllib3.PoolManager(**options), f"the proxy cannot be used: {exc}"

    def request(self, method: str, url: str, body: bytes | None, headers: dict[str, str],
                timeout: float) -> Answer:
        if self._unusable is not None:
            raise TransportError(self._unusable)
        try:
            response = self._pools.request(method, url, body=body, headers=headers,
                                           timeout=Timeout(connect=timeout, read=timeout))
        except urllib3.exceptions.HTTPError as exc:
            raise TransportError(_reason(exc)) from None
        return Answer(response.status, response.headers, response.data)

    def close(self) -> None:
        self._pools.clear()


def _reason(exc: urllib3.exceptions.HTTPError) -> str:
    """What went wrong, without urllib3's wrapping (a MaxRetryError names the cause it wraps)."""
    cause = getattr(exc, "reason", None)
    return str(cause or exc)

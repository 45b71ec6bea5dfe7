"""httpx's ``get``, ``post`` and ``request`` for the plain-HTTP servers the tests start.

httpx's own functions make a client for every request, and every client loads the certificate
bundle for TLS (docs/BENCHMARKS.md, the test suite), which a request to an ``http://`` address
never uses; these skip it (``verify=False``). Each request still opens a connection of its own.
"""

from __future__ import annotations

from typing import Any

import httpx


def request(method: str, url: str, **options: Any) -> httpx.Response:
    return httpx.request(method, url, verify=False, **options)


def get(url: str, **options: Any) -> httpx.Response:
    return request("GET", url, **options)


def post(url: str, **options: Any) -> httpx.Response:
    return request("POST", url, **options)

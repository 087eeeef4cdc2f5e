"""The served page's one lock: a random token, asked of every request before any route runs.

The URL printed at start carries the token once (`/?token=…`); the first request with it gets
it back as a cookie (HttpOnly, SameSite=Strict, named after the port) and is sent on to the same
address without it, so the token leaves the address bar, the history and any Referer. Every
later request (the page, its websocket, the static files) is let through on the cookie; any
other gets 401 and a body that says nothing about the batch. A websocket from a page of
another origin (another port of this host, say) is refused even with the cookie.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from aiohttp import hdrs, web
from aiohttp.typedefs import Middleware

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# On every answer: no page of ours is kept, framed, or named to another site.
HEADERS = {
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
}


class Token:
    """A random secret, compared in constant time; its repr never shows it (tracebacks)."""

    def __init__(self, value: str | None = None) -> None:
        self._value = value or secrets.token_urlsafe(32)

    @property
    def value(self) -> str:
        return self._value

    def matches(self, given: str | None) -> bool:
        """Whether `given` is the token."""
        return given is not None and hmac.compare_digest(given.encode(), self._value.encode())

    def __repr__(self) -> str:
        return "Token(<hidden>)"


def cookie_name(port: int) -> str:
    """The cookie of the server on `port`: cookies ignore ports, so two servers on one host
    would otherwise overwrite each other's."""
    return f"flightdeck-{port}"


def guard(token: Token, port: int) -> Middleware:
    """The aiohttp middleware that lets through only requests that carry the token."""
    name = cookie_name(port)

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        if token.matches(request.query.get("token")):
            # Kept as a cookie; the address without it is where the browser goes next.
            query = request.rel_url.query.copy()
            del query["token"]
            # A path on this server: one that starts `//` or `/\` is another site's address.
            where = "/" + str(request.rel_url.with_query(query)).lstrip("/\\")
            answer = web.Response(status=303, headers={**HEADERS, hdrs.LOCATION: where})
            answer.set_cookie(
                name,
                token.value,
                httponly=True,
                samesite="Strict",
                path="/",
                secure=secure(request),
            )
            return answer
        if not token.matches(request.cookies.get(name)):
            return web.Response(status=401, text="401: Unauthorized\n", headers=HEADERS)
        if request.headers.get(hdrs.UPGRADE, "").lower() == "websocket" and not same_origin(
            request
        ):
            return web.Response(status=403, text="403: Forbidden\n", headers=HEADERS)
        try:
            response = await handler(request)
        except web.HTTPException as error:  # a 404 or 405 is an answer too: the same headers
            error.headers.update(HEADERS)
            raise
        if not response.prepared:  # a websocket has sent its headers already
            response.headers.update(HEADERS)
        return response

    return check


def secure(request: web.Request) -> bool:
    """Whether the browser reached us over TLS (directly, or through a proxy that says so)."""
    forwarded = request.headers.get("X-Forwarded-Proto", "").lower()
    return request.secure or forwarded == "https"


def same_origin(request: web.Request) -> bool:
    """Whether the request's Origin (if a browser sent one) is the host it asked for."""
    origin = request.headers.get(hdrs.ORIGIN)
    if origin is None:  # not a browser: the cookie was all there was to check
        return True
    return urlsplit(origin).netloc.lower() == request.host.lower()

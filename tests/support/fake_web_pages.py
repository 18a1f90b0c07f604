"""A scripted web site for fetch_url: pages of every content type, redirects, errors and a big page.

``ScriptedSite().app`` serves ``pages`` (path -> (content type, body)); ``/redirect?to=URL``
answers 302 to ``URL``; an unknown path is a 404. ``requests`` records ``(path, Host header)``.
Serve ``.app`` with ``support.servers.serve_app``.
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

__all__ = ["ARTICLE_HTML", "ScriptedSite"]

ARTICLE_HTML = """<!DOCTYPE html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>Pinning resolved addresses | Loopsuite engineering</title>
  <meta name="description" content="Why an SSRF guard must connect to the address it checked.">
</head>
<body>
  <header><nav><a href="/">Home</a> <a href="/blog">Blog</a> <a href="/about">About</a></nav></header>
  <main>
    <article>
      <h1>Pinning resolved addresses</h1>
      <p>An SSRF guard that checks a host name and then lets the HTTP client resolve it again has a gap:
      the second answer may differ. This is called <strong>DNS rebinding</strong>, and it is the reason
      the guard must connect to the very address it checked.</p>
      <h2>What the guard checks</h2>
      <p>Every address the name resolves to is compared with the blocked ranges: loopback, private
      networks, link-local addresses such as the cloud metadata endpoint, and their IPv6 forms.</p>
      <ul>
        <li>Loopback: 127.0.0.0/8 and ::1</li>
        <li>Private: 10.0.0.0/8, 172.16.0.0/12 and 192.168.0.0/16</li>
      </ul>
      <p>Read more in <a href="https://owasp.org/www-community/attacks/Server_Side_Request_Forgery">the OWASP
      page on server-side request forgery</a>.</p>
    </article>
  </main>
  <footer><p>Copyright 2025 Loopsuite. All rights reserved.</p></footer>
</body>
</html>
"""

_PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89"


class ScriptedSite:
    """A web site whose pages a test sets (a realistic set by default)."""

    def __init__(self) -> None:
        self.pages: dict[str, tuple[str, bytes]] = {
            "/article": ("text/html; charset=utf-8", ARTICLE_HTML.encode()),
            "/notes.md": ("text/markdown; charset=utf-8", b"# Release notes\n\n- fetch_url reads Markdown as is.\n"),
            "/plain.txt": ("text/plain", "Plain text, caf\u00e9 included.\n".encode()),
            "/data.json": ("application/json", b'{"name":"loopsuite","tools":["web_search","fetch_url"]}'),
            "/logo.png": ("image/png", _PNG),
            "/paper.pdf": ("application/pdf", b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj\n<<>>\nendobj\n"),
            "/big.txt": ("text/plain; charset=utf-8", b"0123456789" * 100_000),
        }
        self.requests: list[tuple[str, str]] = []
        self.app = Starlette(
            routes=[Route("/redirect", self._redirect), Route("/{path:path}", self._page)],
        )

    async def _redirect(self, request: Request) -> Response:
        self.requests.append((request.url.path, request.headers.get("host", "")))
        return RedirectResponse(request.query_params["to"], status_code=302)

    async def _page(self, request: Request) -> Response:
        self.requests.append((request.url.path, request.headers.get("host", "")))
        page = self.pages.get(request.url.path)
        if page is None:
            return PlainTextResponse("Not Found", status_code=404)
        content_type, body = page
        return Response(body, media_type=None, headers={"Content-Type": content_type})

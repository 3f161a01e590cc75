"""The operator console at /ui/ and the Swagger UI at /docs, served by the API process from files
shipped in this package.

Production clusters have no internet, so nothing is loaded from another host: the console is plain
JavaScript written here (ui/), and Swagger UI is the npm package swagger-ui-dist, vendored byte for
byte by vendor.sh from the version pinned in package.json and package-lock.json (vendor/, with its
licence). The pages are public; the console's API calls carry the operator's tenant token.

Every servable file is read once, when the routes are added, into a table keyed by its path: a
request can only name a key of that table, so no path (`..`, an encoded slash, a symlink) reaches
the file system. HTML is `Cache-Control: no-cache`, and so is everything else (with an ETag, so a
revalidation is a 304): an upgrade of the server shows at the next reload. A Content-Security-Policy
on each page lets the browser itself refuse any other host.
"""

from __future__ import annotations

import gzip
import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

from shared.domain.errors import NotFound

HERE = Path(__file__).resolve().parent
UI_DIR = HERE / "ui"
DOCS_DIR = HERE / "docs"
SWAGGER_DIR = HERE / "vendor" / "swagger-ui-dist"

CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".txt": "text/plain; charset=utf-8",
}
# Licence files without an extension are served as text, so that they can be read where they ship.
PLAIN_TEXT_NAMES = {"LICENSE", "NOTICE"}
COMPRESSIBLE = ("text/", "image/svg+xml")

# The console: scripts, styles and API calls from this server only; no inline script, no eval.
CONSOLE_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'"
)
# Swagger UI sets style attributes and uses data: images in its stylesheet.
DOCS_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'"
)


@dataclass
class Asset:
    body: bytes
    content_type: str
    etag: str = ""
    _gzipped: bytes | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.etag = '"' + hashlib.sha256(self.body).hexdigest()[:32] + '"'

    @property
    def compressible(self) -> bool:
        return self.content_type.startswith(COMPRESSIBLE) and len(self.body) > 1024

    def gzipped(self) -> bytes:
        if self._gzipped is None:  # once, on first use (the Swagger bundle is 1.7 MB)
            self._gzipped = gzip.compress(self.body, compresslevel=6, mtime=0)
        return self._gzipped


def _content_type(path: Path) -> str | None:
    if path.name in PLAIN_TEXT_NAMES:
        return CONTENT_TYPES[".txt"]
    return CONTENT_TYPES.get(path.suffix)


def load_assets(directory: Path) -> dict[str, Asset]:
    """Every file of a known type directly in `directory`, keyed by its name."""
    assets: dict[str, Asset] = {}
    for path in sorted(directory.iterdir()):
        content_type = _content_type(path)
        if path.is_file() and content_type is not None:
            assets[path.name] = Asset(path.read_bytes(), content_type)
    return assets


def _serve(request: web.Request, asset: Asset, csp: str | None = None) -> web.Response:
    headers = {
        "Cache-Control": "no-cache",
        "ETag": asset.etag,
        "X-Content-Type-Options": "nosniff",
        "Vary": "Accept-Encoding",
    }
    if csp is not None:
        headers["Content-Security-Policy"] = csp
        headers["Referrer-Policy"] = "no-referrer"
        headers["X-Frame-Options"] = "DENY"
    if asset.etag in request.headers.get("If-None-Match", ""):
        return web.Response(status=304, headers=headers)
    body = asset.body
    if asset.compressible and "gzip" in request.headers.get("Accept-Encoding", ""):
        body = asset.gzipped()
        headers["Content-Encoding"] = "gzip"
    headers["Content-Type"] = asset.content_type
    return web.Response(body=body, headers=headers)


def add_console_routes(app: web.Application) -> None:
    """Public routes: /ui -> /ui/ (the console), /ui/{file}, /docs (Swagger UI) and /docs/{file}."""
    ui = load_assets(UI_DIR)
    docs = {**load_assets(SWAGGER_DIR), **load_assets(DOCS_DIR)}
    console_page = ui.pop("index.html")
    docs_page = docs.pop("index.html")

    def lookup(table: dict[str, Asset], request: web.Request) -> Asset:
        asset = table.get(request.match_info["path"])
        if asset is None:
            raise NotFound("file", request.path)
        return asset

    async def to_console(request: web.Request) -> web.Response:
        raise web.HTTPMovedPermanently("/ui/")

    async def console(request: web.Request) -> web.Response:
        return _serve(request, console_page, CONSOLE_CSP)

    async def console_file(request: web.Request) -> web.Response:
        return _serve(request, lookup(ui, request))

    async def swagger(request: web.Request) -> web.Response:
        return _serve(request, docs_page, DOCS_CSP)

    async def to_swagger(request: web.Request) -> web.Response:
        raise web.HTTPMovedPermanently("/docs")

    async def swagger_file(request: web.Request) -> web.Response:
        return _serve(request, lookup(docs, request))

    app.router.add_get("/ui", to_console)
    app.router.add_get("/ui/", console)
    app.router.add_get("/ui/{path}", console_file)
    app.router.add_get("/docs", swagger)
    app.router.add_get("/docs/", to_swagger)
    app.router.add_get("/docs/{path}", swagger_file)

"""The console's and Swagger UI's static routes over plain HTTP: public, the right content types,
no-cache HTML, ETags, gzip, no way out of the package's files, and nothing that names another host."""

from __future__ import annotations

import asyncio
import gzip
import re
from html.parser import HTMLParser
from urllib.parse import urljoin, urlsplit

import pytest

from services.api.console import SWAGGER_DIR

STRICT = {"dev": False, "worker_token": "w", "api_keys": "k:acme"}

URL = re.compile(r"https?://[^\s\"'`<>()\\\]}]+")
# Licence comments (`/*! ... */`, `/** @license ... */`) may name their project's home page.
LICENCE_COMMENT = re.compile(r"/\*(?:!|\*?\s*@license).*?\*/", re.S)
# An XML namespace declaration names, it does not refer to: a standalone SVG file needs one.
SVG_NAMESPACE_DECLARATION = 'xmlns="http://www.w3.org/2000/svg"'

# Hosts named by string literals inside the vendored Swagger UI bundle and stylesheet, reviewed
# for swagger-ui-dist 5.35.0. None is fetched: the CSP on /docs allows connections to this server
# only, and the browser test records every request the page makes.
REVIEWED_VENDOR_HOSTS = {
    # identifiers compared as strings: XML/SVG namespaces, JSON Schema dialects, OpenAPI spec ids
    "www.w3.org",
    "json-schema.org",
    "spec.openapis.org",
    # base URLs handed to `new URL()` to parse relative references, never requested
    "base${String",  # the template literal `https://base${String(Math.random())...}`
    "vladimirgorej.com",
    "example.com",
    "실례.com",  # an internationalised example host in the URL parser's code
    # links in error messages and rendered descriptions, followed only if a person clicks them
    "datatracker.ietf.org",
    "www.rfc-editor.org",
    "github.com",
    "reactjs.org",
    "redux.js.org",
    "fb.me",
    "swagger.io",
    "spdx.org",
    # the markdown autolinker's hashtag and mention targets (links, never requested)
    "twitter.com",
    "www.facebook.com",
    "instagram.com",
    "www.tiktok.com",
    "soundcloud.com",
    # the validator badge's default, switched off by our initializer (validatorUrl: null)
    "validator.swagger.io",
}

CONSOLE_FILES = {
    "/ui/app.js": "text/javascript",
    "/ui/app.css": "text/css",
    "/ui/favicon.svg": "image/svg+xml",
}
DOCS_FILES = {
    "/docs/swagger-ui-bundle.js": "text/javascript",
    "/docs/swagger-ui.css": "text/css",
    "/docs/swagger-initializer.js": "text/javascript",
    "/docs/swagger-page.css": "text/css",
    "/docs/favicon-32x32.png": "image/png",
    "/docs/favicon-16x16.png": "image/png",
    "/docs/LICENSE": "text/plain",
    "/docs/NOTICE": "text/plain",
    "/docs/swagger-ui-bundle.js.LICENSE.txt": "text/plain",
}


class _Refs(HTMLParser):
    """Every src and href of an HTML page."""

    def __init__(self) -> None:
        super().__init__()
        self.refs: list[str] = []
        self.scripts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("src", "href") and value:
                self.refs.append(value)
                if tag == "script" and name == "src":
                    self.scripts.append(value)


def refs_of(html: str) -> _Refs:
    parser = _Refs()
    parser.feed(html)
    return parser


def external_urls(text: str) -> list[str]:
    return URL.findall(LICENCE_COMMENT.sub("", text).replace(SVG_NAMESPACE_DECLARATION, ""))


@pytest.fixture
async def client(api):
    """The API app with real credentials configured, and no token sent by the tests."""
    return await api(**STRICT)


async def test_ui_without_a_slash_redirects_to_ui_with_one(client):
    resp = await client.get("/ui", allow_redirects=False)
    assert resp.status == 301
    assert resp.headers["Location"] == "/ui/"


async def test_console_page_is_public_uncached_html_whose_main_script_is_app_js(client):
    resp = await client.get("/ui/")
    assert resp.status == 200
    assert resp.content_type == "text/html"
    assert resp.charset == "utf-8"
    assert resp.headers["Cache-Control"] == "no-cache"
    csp = resp.headers["Content-Security-Policy"]
    assert "default-src 'self'" in csp and "connect-src 'self'" in csp and "script-src 'self'" in csp
    page = refs_of(await resp.text())
    assert [urljoin("/ui/", s) for s in page.scripts] == ["/ui/app.js"]


async def test_docs_page_is_public_uncached_html_running_the_vendored_swagger_ui(client):
    resp = await client.get("/docs")
    assert resp.status == 200
    assert resp.content_type == "text/html"
    assert resp.headers["Cache-Control"] == "no-cache"
    assert "connect-src 'self'" in resp.headers["Content-Security-Policy"]
    page = refs_of(await resp.text())
    assert [urljoin("/docs", s) for s in page.scripts] == [
        "/docs/swagger-ui-bundle.js",
        "/docs/swagger-initializer.js",
    ]
    initializer = await (await client.get("/docs/swagger-initializer.js")).text()
    assert 'new URL("openapi.json", base)' in initializer
    assert "validatorUrl: null" in initializer
    redirect = await client.get("/docs/", allow_redirects=False)
    assert (redirect.status, redirect.headers["Location"]) == (301, "/docs")


@pytest.mark.parametrize("path", ["/ui/", "/docs"])
async def test_every_file_a_page_refers_to_is_served_by_this_server(client, path):
    page = refs_of(await (await client.get(path)).text())
    assert page.refs
    for ref in page.refs:
        target = urlsplit(urljoin(path, ref))
        assert not target.netloc, f"{path} refers to another host: {ref}"
        if target.path.startswith("/api/"):
            continue
        resp = await client.get(target.path)
        assert resp.status == 200, f"{path} refers to {ref}, which is {resp.status}"


@pytest.mark.parametrize(("path", "content_type"), sorted({**CONSOLE_FILES, **DOCS_FILES}.items()))
async def test_static_files_have_their_content_type_and_are_revalidated(client, path, content_type):
    resp = await client.get(path)
    assert resp.status == 200, path
    assert resp.content_type == content_type
    assert resp.headers["Cache-Control"] == "no-cache"
    assert resp.headers["X-Content-Type-Options"] == "nosniff"
    again = await client.get(path, headers={"If-None-Match": resp.headers["ETag"]})
    assert again.status == 304


async def test_the_swagger_bundle_is_sent_gzipped_to_a_client_that_accepts_it(client):
    resp = await client.get(
        "/docs/swagger-ui-bundle.js", headers={"Accept-Encoding": "gzip"}, auto_decompress=False
    )
    assert resp.headers["Content-Encoding"] == "gzip"
    body = gzip.decompress(await resp.read())
    assert body == (SWAGGER_DIR / "swagger-ui-bundle.js").read_bytes()
    plain = await client.get("/docs/swagger-ui-bundle.js", headers={"Accept-Encoding": "identity"})
    assert "Content-Encoding" not in plain.headers


async def raw_get(client, path: str) -> tuple[int, bytes]:
    """GET `path` exactly as written (an HTTP client library would normalise `..` away)."""
    reader, writer = await asyncio.open_connection(client.server.host, client.server.port)
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        response = await reader.read()
    finally:
        writer.close()
        await writer.wait_closed()
    head, _, body = response.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


@pytest.mark.parametrize(
    "path",
    [
        "/ui/nothing.js",
        "/ui/index.html/../__init__.py",
        "/ui/./../services/api/app.py",
        "/ui/../app.py",
        "/ui/..%2f__init__.py",
        "/ui/%2e%2e/__init__.py",
        "/ui/..%2F..%2Fapp.py",
        "/ui/vendor.sh",
        "/ui/package.json",
        "/ui/%2fetc%2fpasswd",
        "/ui/vendor%2fswagger-ui-dist%2fLICENSE",
        "/docs/../ui/app.js",
        "/docs/package.json",
        "/docs/..%2F__init__.py",
        "/docs/swagger-ui-bundle.js.map",
    ],
)
async def test_nothing_outside_the_served_files_can_be_reached(client, path):
    status, body = await raw_get(client, path)
    assert status == 404, f"{path}: {status} {body[:200]!r}"
    assert b"__future__" not in body and b"root:" not in body


async def test_our_html_js_and_css_name_no_other_host(client):
    for path in ["/ui/", "/docs", *CONSOLE_FILES, "/docs/swagger-initializer.js", "/docs/swagger-page.css"]:
        text = await (await client.get(path)).text()
        assert external_urls(text) == [], path


async def test_the_vendored_files_name_only_reviewed_hosts_that_are_never_fetched(client):
    for path in ("/docs/swagger-ui-bundle.js", "/docs/swagger-ui.css"):
        text = await (await client.get(path)).text()
        hosts = {urlsplit(url).netloc for url in external_urls(text)}
        assert hosts <= REVIEWED_VENDOR_HOSTS, (
            f"{path} names unreviewed hosts: {hosts - REVIEWED_VENDOR_HOSTS}"
        )

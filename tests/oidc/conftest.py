"""Fixtures of the single sign-on tests: one OpenID provider per module (tests/oidc/provider.py),
and QueueFlow servers configured for it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.console.conftest import (  # noqa: F401 (the console tests' browser fixtures and report hook)
    browser,
    chromium_profile,
    http,
    open_console,
    pytest_runtest_makereport,
    screenshot_dir,
)
from tests.oidc.provider import OidcProvider, provider_binary


@pytest.fixture(scope="module")
async def provider(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[OidcProvider]:
    started = await OidcProvider(provider_binary(), tmp_path_factory.mktemp("oidc-provider")).start()
    try:
        yield started
    finally:
        print(started.process.describe())
        await started.stop()


@pytest.fixture
def oidc_server(database_url, service, provider):
    """`server = await oidc_server(*extra_flags, client_id=...)`: a QueueFlow server (all modes, real
    credentials) signed in to through `provider`, its --public-url its own address."""

    async def start(*extra: str, client_id: str | None = None):
        args = provider.server_args(*([client_id] if client_id else []))
        proc = await service(
            database_url,
            mode="all",
            dev=False,
            extra_args=["--worker-token", "w", "--api-keys", "rw:acme", *args, *extra],
            start=False,
        )
        proc.argv += ["--public-url", proc.base_url]
        return await proc.start()

    return start

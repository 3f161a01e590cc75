"""The one patch of aiohttp (shared/web/protocol.py): applied by every service's app factory, so
in-process tests run with it as real processes do, and checked against the method it replaces."""

from __future__ import annotations

import pytest
from aiohttp import web_protocol

from services.serve import FACTORIES
from shared.config import Settings
from shared.web import protocol


def test_the_replaced_method_still_has_the_signature_the_patch_was_written_against():
    # Fails when an aiohttp release changes handle_error: read the new one, then update the patch.
    assert protocol.signature_of(protocol.ORIGINAL) == protocol.PATCHED_SIGNATURE
    assert protocol.signature_of(protocol._protocol_error) == protocol.PATCHED_SIGNATURE


@pytest.mark.parametrize("mode", sorted(FACTORIES))
def test_every_app_factory_installs_the_patch(mode, monkeypatch):
    monkeypatch.setattr(web_protocol.RequestHandler, "handle_error", protocol.ORIGINAL)
    assert not protocol.installed()
    FACTORIES[mode](Settings(database_url="postgresql://unused/none", mode=mode, dev=True))
    assert protocol.installed()

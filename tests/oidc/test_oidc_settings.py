"""--oidc-issuer's start-up checks: it needs a client id and the public URL, its role map must name
roles, and it stands in for --api-keys/--jwt-secret as the tenant credential."""

from __future__ import annotations

import pytest

from shared.config import ConfigError, Settings, parse_role_map

BASE = {"worker_token": "w", "oidc_issuer": "https://id.example.com", "oidc_client_id": "qf"}


def test_an_issuer_is_a_tenant_credential_of_its_own():
    Settings(**BASE, public_url="https://qf.example.com").check_credentials()


@pytest.mark.parametrize(
    ("settings", "says"),
    [
        ({**BASE, "oidc_client_id": None, "public_url": "https://qf"}, "--oidc-client-id"),
        ({**BASE}, "--public-url (QUEUEFLOW_PUBLIC_URL)"),
        ({**BASE, "public_url": "qf.example.com"}, "must be an http:// or https:// URL"),
        ({**BASE, "public_url": "https://qf", "oidc_role_map": "ops=root"}, "entry 'ops=root'"),
    ],
)
def test_an_incomplete_oidc_configuration_is_a_start_up_error(settings, says):
    with pytest.raises(ConfigError) as raised:
        Settings(**settings).check_credentials()
    assert says in str(raised.value)


def test_the_role_map_adds_to_the_role_names_themselves():
    assert parse_role_map(" ops = operator , x=y=admin,") == {
        "viewer": "viewer",
        "operator": "operator",
        "admin": "admin",
        "ops": "operator",
        "x=y": "admin",
    }

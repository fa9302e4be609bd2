"""Local stand-ins for the Google APIs ``tpu-training preflight`` reads, on loopback, for the
real client libraries (and google-auth's token refresh) to talk to.

One server answers, in each API's JSON shape:

- ``POST /token``: the OAuth token endpoint that Application Default Credentials refresh against
  (a credentials file's ``token_uri``);
- ``GET /v3/projects/P`` and ``POST /v3/projects/P:testIamPermissions`` (Resource Manager v3);
- ``GET /v1/projects/P/services:batchGet`` (Service Usage v1);
- ``GET /v2/projects/P/locations/Z/acceleratorTypes`` and ``.../runtimeVersions`` (Cloud TPU v2);
- ``GET /v1/projects/P/locations/L/serverConfig`` (GKE v1).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Optional
from urllib.parse import parse_qs

from support.fakes.loopback import LoopbackJsonServer, not_found
from support.harness.discovery import CheckedAgainstDiscovery

TOKEN = "loopback-access-token"

_PROJECT = re.compile(r"^/v3/projects/([^/:]+)$")
_TEST_PERMISSIONS = re.compile(r"^/v3/projects/([^/:]+):testIamPermissions$")
_SERVICES = re.compile(r"^/v1/projects/([^/]+)/services:batchGet$")
_TPU_LIST = re.compile(r"^/v2/projects/([^/]+)/locations/([^/]+)/(acceleratorTypes|runtimeVersions)$")
_SERVER_CONFIG = re.compile(r"^/v1/projects/([^/]+)/locations/([^/]+)/serverConfig$")


def _forbidden(what: str) -> tuple[int, Any]:
    return 403, {
        "error": {"code": 403, "message": f"Permission denied on {what}", "status": "PERMISSION_DENIED"}
    }


class FakeProjectApis(CheckedAgainstDiscovery, LoopbackJsonServer):
    """A project as the APIs describe it; tests change its fields to make a check fail. Every
    answer and request body is checked against the APIs' discovery documents."""

    APIS = (("cloudresourcemanager", "v3"), ("serviceusage", "v1"), ("tpu", "v2"), ("container", "v1"))
    UNCHECKED_PATHS = ("/token",)  # OAuth 2.0's token endpoint (RFC 6749), in no discovery document

    def __init__(self, project: str = "tpu-training-dev", tls: Optional[tuple[Path, Path]] = None) -> None:
        super().__init__(tls)
        self.project = project
        self.state = "ACTIVE"
        self.enabled_apis: set[str] = set()
        self.granted: Optional[set[str]] = None
        """The permissions the caller holds; None: every one asked for."""
        self.accelerator_types: dict[str, list[str]] = {}
        self.runtime_versions: dict[str, list[str]] = {}
        self.channels: dict[str, dict[str, list[str]]] = {}
        """location -> channel -> valid versions."""
        self.token_refused = False

    def user_credentials_file(self, folder: Path) -> Path:
        """An `authorized_user` file, as `gcloud auth application-default login` writes it, with
        a token that is still good: google-auth sends user credentials' refreshes to Google's own
        token endpoint whatever the file says, so this one must not need a refresh."""
        path = folder / "application_default_credentials.json"
        path.write_text(
            json.dumps(
                {
                    "type": "authorized_user",
                    "client_id": "loopback-client",
                    "client_secret": "loopback-secret",
                    "refresh_token": "loopback-refresh-token",
                    "token": TOKEN,
                    "expiry": "2999-01-01T00:00:00Z",
                }
            )
        )
        return path

    def authorized(self, index: int) -> bool:
        return self.headers[index].get("authorization") == f"Bearer {TOKEN}"

    def route(self, method: str, path: str, query: str, headers: dict[str, str]) -> tuple[int, Any]:
        if path == "/token" and method == "POST":
            if self.token_refused:
                return 400, {
                    "error": "invalid_grant",
                    "error_description": "Token has been expired or revoked.",
                }
            return 200, {"access_token": TOKEN, "expires_in": 3600, "token_type": "Bearer"}
        for pattern, answer in (
            (_PROJECT, self._project),
            (_TEST_PERMISSIONS, self._test_permissions),
            (_SERVICES, self._services),
            (_TPU_LIST, self._tpu_list),
            (_SERVER_CONFIG, self._server_config),
        ):
            match = pattern.match(path)
            if match:
                if match.group(1) != self.project:
                    return _forbidden(f"project {match.group(1)}")
                return answer(match, query)
        return not_found()

    def _project(self, match: re.Match[str], query: str) -> tuple[int, Any]:
        return 200, {"name": "projects/123456789", "projectId": self.project, "state": self.state}

    def _test_permissions(self, match: re.Match[str], query: str) -> tuple[int, Any]:
        asked = json.loads(self.bodies[-1] or b"{}").get("permissions", [])
        held = [p for p in asked if self.granted is None or p in self.granted]
        return 200, {"permissions": held} if held else {}

    def _services(self, match: re.Match[str], query: str) -> tuple[int, Any]:
        names = parse_qs(query).get("names", [])
        services = [
            {
                # The API answers with the project number, whatever the request named.
                "name": f"projects/123456789/services/{name.rsplit('/', 1)[-1]}",
                "state": "ENABLED" if name.rsplit("/", 1)[-1] in self.enabled_apis else "DISABLED",
            }
            for name in names
        ]
        return 200, {"services": services}

    def _tpu_list(self, match: re.Match[str], query: str) -> tuple[int, Any]:
        project, zone, kind = match.groups()
        parent = f"projects/{project}/locations/{zone}"
        if kind == "acceleratorTypes":
            types = self.accelerator_types.get(zone, [])
            return 200, {
                "acceleratorTypes": [{"name": f"{parent}/acceleratorTypes/{t}", "type": t} for t in types]
            }
        versions = self.runtime_versions.get(zone, [])
        return 200, {
            "runtimeVersions": [{"name": f"{parent}/runtimeVersions/{v}", "version": v} for v in versions]
        }

    def _server_config(self, match: re.Match[str], query: str) -> tuple[int, Any]:
        channels = self.channels.get(match.group(2), {})
        return 200, {
            "channels": [
                {"channel": channel, "validVersions": versions} for channel, versions in channels.items()
            ]
        }


def service_account_file(
    api: FakeProjectApis, folder: Path, email: str = "deployer@tpu-training-dev.iam.gserviceaccount.com"
) -> Path:
    """A service-account key file, as `gcloud iam service-accounts keys create` writes it, with a
    fresh RSA key and this server as its token endpoint: google-auth signs a JWT with the key and
    trades it for an access token there."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    path = folder / "deployer-key.json"
    path.write_text(
        json.dumps(
            {
                "type": "service_account",
                "project_id": api.project,
                "private_key_id": "loopback-key",
                "private_key": pem,
                "client_email": email,
                "client_id": "1",
                "token_uri": f"{api.endpoint}/token",
            }
        )
    )
    return path

"""Google's published API schemas, as JSON Schema: the discovery documents bundled with
google-api-python-client (pinned in requirements-dev.txt; ``googleapiclient/discovery_cache/
documents/NAME.VERSION.json``), converted here so ``jsonschema`` can check what a fake answers and
what the project sends (tests/project/test_fidelity.py, docs/fidelity.md).

The conversion follows the discovery format (https://developers.google.com/discovery/v1/reference/apis):
``$ref`` names another schema of the document; ``type`` is object, array, string, integer,
number, boolean or any; ``format`` int64 / uint64 values are JSON *strings* of digits (Google's
JSON mapping of 64-bit integers), google-datetime an RFC 3339 time; ``enum`` lists the allowed
strings; ``additionalProperties`` is a map's value schema. Strict where the API is: an object with
declared ``properties`` and no ``additionalProperties`` takes no other field, so a fake that
misspells one (``windowStartTIme``) fails. The document's ``annotations.required`` (request
bodies) become ``required``.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any, Callable, Iterable

import jsonschema

_DIGITS = r"^-?[0-9]+$"
_RFC3339 = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$"


def documents_folder() -> Path:
    import googleapiclient

    return Path(googleapiclient.__file__).parent / "discovery_cache" / "documents"


@functools.cache
def discovery_document(api: str, version: str) -> dict[str, Any]:
    """The bundled discovery document of ``api`` ``version`` (e.g. ``tpu``, ``v2``)."""
    return json.loads((documents_folder() / f"{api}.{version}.json").read_text())


def _convert(schema: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in schema:
        return {"$ref": f"#/$defs/{schema['$ref']}"}
    kind = schema.get("type", "any")
    converted: dict[str, Any]
    if kind == "object":
        converted = {"type": "object"}
        if "properties" in schema:
            converted["properties"] = {name: _convert(value) for name, value in schema["properties"].items()}
        if "additionalProperties" in schema:
            converted["additionalProperties"] = _convert(schema["additionalProperties"])
        elif "properties" in schema:
            converted["additionalProperties"] = False
        required = schema.get("annotations", {}).get("required")
        if required:
            converted["required"] = sorted(required)
    elif kind == "array":
        converted = {"type": "array", "items": _convert(schema.get("items", {}))}
    elif kind == "string":
        converted = {"type": "string"}
        if schema.get("format") in ("int64", "uint64"):
            converted["pattern"] = _DIGITS
        elif schema.get("format") == "google-datetime":
            converted["pattern"] = _RFC3339
    elif kind == "integer":
        converted = {"type": "integer"}
    elif kind == "number":
        converted = {"type": "number"}
    elif kind == "boolean":
        converted = {"type": "boolean"}
    elif kind == "any":
        converted = {}
    else:
        raise ValueError(f"a discovery schema of type {kind!r}: not in the discovery format")
    if "enum" in schema:
        converted["enum"] = list(schema["enum"])
    return converted


@functools.cache
def validator(api: str, version: str, name: str) -> jsonschema.Draft202012Validator:
    """A validator for the discovery document's schema ``name`` (e.g. ``ListNodesResponse``)."""
    schemas = discovery_document(api, version)["schemas"]
    if name not in schemas:
        raise KeyError(f"{api} {version} has no schema {name!r}")
    root = {"$defs": {key: _convert(value) for key, value in schemas.items()}, "$ref": f"#/$defs/{name}"}
    jsonschema.Draft202012Validator.check_schema(root)
    return jsonschema.Draft202012Validator(root)


def schema_errors(api: str, version: str, name: str, instance: Any) -> list[str]:
    """What ``name`` of ``api`` ``version`` finds wrong with ``instance``: one line per error,
    naming its place and the value, sorted; [] when it conforms."""
    errors = validator(api, version, name).iter_errors(instance)
    return sorted(f"{'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}" for e in errors)


def method(api: str, version: str, http_method: str, path: str) -> dict[str, Any]:
    """The method of the document that answers ``http_method`` at the request path ``path``
    (``/v2/projects/p/locations/z/nodes``): its id, request and response schemas. Matched on each
    method's ``flatPath`` (its ``path`` where it has none); of several, the most literal one.
    ``KeyError`` when no method of the document is there."""
    document = discovery_document(api, version)
    relative = path.lstrip("/")
    base = document.get("servicePath", "").strip("/")
    if base and relative.startswith(base + "/"):
        relative = relative[len(base) + 1 :]
    found = []
    for candidate in _methods(document.get("resources", {})):
        template = candidate.get("flatPath") or candidate["path"]
        if candidate["httpMethod"] == http_method and re.fullmatch(_template_pattern(template), relative):
            found.append((len(re.sub(r"\{[^}]+\}", "", template)), candidate))
    if not found:
        raise KeyError(f"{api} {version} has no method {http_method} {path}")
    return max(found, key=lambda pair: pair[0])[1]


def _methods(resources: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for resource in resources.values():
        out.extend(resource.get("methods", {}).values())
        out.extend(_methods(resource.get("resources", {})))
    return out


def _template_pattern(template: str) -> str:
    # {+name} spans slashes, {name} does not.
    parts = re.split(r"(\{\+?[^}]+\})", template)
    return "".join(
        "[^?]+" if part.startswith("{+") else "[^/?]+" if part.startswith("{") else re.escape(part)
        for part in parts
    )


class CheckedAgainstDiscovery:
    """A fake Google API (mixed into a ``LoopbackJsonServer``) whose every successful answer, and
    every request body it is sent, is checked against the discovery documents ``APIS``: the path
    must be a published method's, the body its response schema. What does not conform fails the
    test when the server closes (``BackgroundServer.off_schema_found``)."""

    APIS: tuple[tuple[str, str], ...] = ()
    UNCHECKED_PATHS: tuple[str, ...] = ()
    """Paths outside every discovery document (an OAuth token endpoint)."""

    off_schema_found: Callable[[str, Iterable[str]], None]  # BackgroundServer's

    def answered(self, http_method: str, path: str, status: int, body: Any, sent: bytes) -> None:
        if path in self.UNCHECKED_PATHS or not 200 <= status < 300:
            return
        for api, version in self.APIS:
            try:
                found = method(api, version, http_method, path)
            except KeyError:
                continue
            where = f"{http_method} {path} ({api} {version} {found['id']})"
            if "request" in found and sent:
                try:
                    request = json.loads(sent)
                except ValueError:
                    request = sent.decode(errors="replace")
                self.off_schema_found(
                    f"{where} request", schema_errors(api, version, found["request"]["$ref"], request)
                )
            if "response" in found:
                self.off_schema_found(
                    f"{where} answer", schema_errors(api, version, found["response"]["$ref"], body)
                )
            return
        self.off_schema_found(f"{http_method} {path}", [f"no method of {self.APIS} is there"])

"""Google's published API schemas, as JSON Schema: the discovery documents bundled with
google-api-python-client (pinned in requirements-dev.txt; ``googleapiclient/discovery_cache/
documents/NAME.VERSION.json``), converted here so ``jsonschema`` can check what a fake answers and
what the project sends (tests/test_fidelity.py, docs/fidelity.md).

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
from typing import Any

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


def method(api: str, version: str, path: str) -> dict[str, Any]:
    """The method of the document whose ``flatPath`` (or ``path``) matches the request path
    ``path`` (``/v2/projects/p/locations/z/nodes``): its id, request and response schemas."""
    document = discovery_document(api, version)
    base = "/" + document.get("servicePath", "").strip("/")
    relative = path[len(base) :].lstrip("/") if path.startswith(base) else path.lstrip("/")
    found = []
    for candidate in _methods(document.get("resources", {})):
        for template in (candidate.get("flatPath"), candidate.get("path")):
            if template and re.fullmatch(_template_pattern(template), relative):
                found.append(candidate)
                break
    if not found:
        raise KeyError(f"{api} {version} has no method at {path!r}")
    return found[0]


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

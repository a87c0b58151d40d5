"""The collector's OpenAPI 3.1 document, written by hand.

The handlers read raw bodies (streamed, size-limited, maybe gzip) instead of
pydantic models, so FastAPI cannot derive the document; it is kept here, next
to the code, and served at GET /openapi.json.  tests/collector/test_schema_collector.py
runs schemathesis against it: every answer must match what it declares.
"""

from __future__ import annotations

from typing import Any

from ldp_core.version import package_version

__all__ = ["openapi_document"]

_NAME = "^[a-z][a-z0-9_.-]{0,63}$"

_PROBLEM: dict[str, Any] = {
    "type": "object",
    "required": ["type", "title", "status", "detail", "code"],
    "properties": {
        "type": {"type": "string"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
        "code": {"type": "string"},
        "errors": {"type": "object", "additionalProperties": {"type": "string"}},
        "reason": {"type": "string"},
    },
}

_SPEC_OUT: dict[str, Any] = {
    "type": "object",
    "required": ["name", "version", "kind", "epsilon", "mechanism", "epoch", "unit",
                 "min_reports", "params"],
    "properties": {
        "name": {"type": "string", "pattern": _NAME},
        "version": {"type": "integer", "minimum": 1},
        "kind": {"enum": ["boolean", "categorical", "numeric", "string"]},
        "epsilon": {"type": "number"},
        "mechanism": {"type": "string"},
        "epoch": {"enum": ["hour", "day"]},
        "unit": {"type": "string"},
        "min_reports": {"type": "integer", "minimum": 0},
        "domain": {"type": "array", "items": {"type": "string"}},
        "lo": {"type": "number"},
        "hi": {"type": "number"},
        "max_length": {"type": "integer"},
        "alphabet": {"type": "string"},
        "casefold": {"type": "boolean"},
        "longitudinal": {"type": "object", "properties": {"epsilon_inf": {"type": "number"}}},
        "params": {"type": "object"},
    },
}

_SPEC_IN: dict[str, Any] = {
    "type": "object",
    "required": ["name", "kind", "epsilon"],
    "properties": {
        "name": {"type": "string", "pattern": _NAME},
        "kind": {"enum": ["boolean", "categorical", "numeric", "string"]},
        "epsilon": {"type": "number", "exclusiveMinimum": 0},
        "mechanism": {"type": "string"},
        # Read only for the kind they belong to (domain: categorical; lo, hi: numeric)
        # and ignored otherwise, so any value is accepted beside another kind.
        "domain": {"description": "categorical: 2 or more distinct non-empty strings"},
        "lo": {"description": "numeric: a finite number below hi"},
        "hi": {"description": "numeric: a finite number above lo"},
        "max_length": {"description": "string: the most symbols after normalisation (8)"},
        "alphabet": {"description": "string: symbols such as 'a-z0-9_', or 'bytes' (a-z)"},
        "casefold": {"description": "string: case-fold after NFC (true)"},
        "epoch": {"enum": ["hour", "day"]},
        "unit": {"type": "string"},
        "longitudinal": {"type": "object"},
        "min_reports": {"type": "integer", "minimum": 0},
    },
    "additionalProperties": False,
}

#: The batch schema is the shape only: six arrays of one length (1 to 1000).  The values
#: are checked report by report and a bad one is answered in ``results`` (status
#: "rejected" with its code), not by refusing the batch, so any JSON value is allowed.
_COLUMN: dict[str, Any] = {"type": "array", "minItems": 1, "maxItems": 1000}

_BATCH: dict[str, Any] = {
    "type": "object",
    "required": ["metric", "version", "epoch", "report_id", "token", "payload"],
    "properties": {
        "metric": {**_COLUMN, "description": "metric names"},
        "version": {**_COLUMN, "description": "metric versions (integers)"},
        "epoch": {**_COLUMN, "description": "epoch numbers (integers)"},
        "report_id": {**_COLUMN, "description": "32 lowercase hex characters each"},
        "token": {**_COLUMN, "description": "report tokens (ldp_core.tokens): base64url of"
                  " nonce || blind RSA signature of the report's unit, one per report"},
        "payload": {**_COLUMN, "description": "the mechanism's wire form of each report"},
    },
    "additionalProperties": False,
}

_RESULTS: dict[str, Any] = {
    "type": "object",
    "required": ["accepted", "duplicates", "rejected", "results"],
    "properties": {
        "accepted": {"type": "integer", "minimum": 0},
        "duplicates": {"type": "integer", "minimum": 0},
        "rejected": {"type": "integer", "minimum": 0},
        "results": {"type": "array", "items": {
            "type": "object",
            "required": ["status", "code"],
            "properties": {
                "status": {"enum": ["accepted", "duplicate", "rejected"]},
                "code": {"type": ["string", "null"]},
            },
        }},
    },
}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _problem(description: str, retry_after: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {
        "description": description,
        "content": {"application/problem+json": {
            "schema": {"$ref": "#/components/schemas/Problem"}}},
    }
    if retry_after:
        out["headers"] = {"Retry-After": {"required": True, "schema": {"type": "string",
                                                                        "pattern": "^[0-9]+$"}}}
    return out


def _auth_errors() -> dict[str, Any]:
    return {
        "401": _problem("no key, or a key that is not valid"),
        "403": _problem("a valid key of another role"),
        "429": _problem("rate limited (per key)", retry_after=True),
        "503": _problem("Redis is unreachable", retry_after=True),
    }


def _body_errors() -> dict[str, Any]:
    return {
        "400": _problem("not JSON, bad gzip, or a malformed batch"),
        "413": _problem("the body (or its gzip inflation) is too large"),
        "415": _problem("an unsupported Content-Type or Content-Encoding"),
    }


def openapi_document() -> dict[str, Any]:
    """The OpenAPI 3.1 document of the collector."""
    ok_json = _json({"type": "object"}, "ok")
    return {
        "openapi": "3.1.0",
        "info": {"title": "ldp-telemetry collector", "version": package_version()},
        "components": {
            "schemas": {"Problem": _PROBLEM, "Spec": _SPEC_OUT, "SpecIn": _SPEC_IN,
                        "Batch": _BATCH, "BatchResult": _RESULTS},
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "paths": {
            "/healthz": {"get": {
                "operationId": "healthz", "security": [],
                "responses": {"200": ok_json},
            }},
            "/readyz": {"get": {
                "operationId": "readyz", "security": [],
                "responses": {
                    "200": _json({"type": "object", "properties": {"ready": {"const": True}}},
                                 "ready"),
                    "503": {**_json({"type": "object"}, "Redis unreachable"),
                            "headers": {"Retry-After": {"schema": {"type": "string"}}}},
                },
            }},
            "/metrics": {"get": {
                "operationId": "prometheus", "security": [],
                "responses": {"200": {"description": "Prometheus text",
                                      "content": {"text/plain": {"schema": {"type": "string"}}}}},
            }},
            "/v1/metrics": {
                "get": {
                    "operationId": "listMetrics", "security": [{"bearer": []}],
                    "description": "ingest or admin key",
                    "responses": {
                        "200": _json({"type": "object", "required": ["metrics"], "properties": {
                            "metrics": {"type": "array",
                                        "items": {"$ref": "#/components/schemas/Spec"}}}},
                            "the latest version of every metric"),
                        "422": _problem("an unknown query parameter"),
                        **_auth_errors(),
                    },
                },
                "post": {
                    "operationId": "createMetric", "security": [{"bearer": []}],
                    "description": "admin key; 201 created, 200 identical to the latest version",
                    "requestBody": {"required": True, "content": {"application/json": {
                        "schema": {"$ref": "#/components/schemas/SpecIn"}}}},
                    "responses": {
                        "200": _json({"$ref": "#/components/schemas/Spec"}, "identical spec"),
                        "201": _json({"$ref": "#/components/schemas/Spec"}, "created"),
                        "422": _problem("an invalid spec (errors names each bad field)"),
                        **_body_errors(),
                        **_auth_errors(),
                    },
                },
            },
            "/v1/metrics/{name}": {"get": {
                "operationId": "getMetric", "security": [{"bearer": []}],
                "description": "ingest or admin key",
                "parameters": [
                    {"name": "name", "in": "path", "required": True,
                     "schema": {"type": "string"}},
                    {"name": "version", "in": "query", "required": False,
                     "schema": {"type": "integer"}},
                ],
                "responses": {
                    "200": _json({"$ref": "#/components/schemas/Spec"}, "the spec"),
                    "404": _problem("unknown metric or version"),
                    "422": _problem("version is not an integer, or an unknown query parameter"),
                    **_auth_errors(),
                },
            }},
            "/v1/reports": {"post": {
                "operationId": "postReports", "security": [{"bearer": []}],
                "description": "ingest key; a columnar batch of 1 to 1000 reports "
                               "(Content-Encoding gzip allowed), as JSON or in the "
                               "binary layout of ldp_core.wire (application/vnd.ldp.batch)",
                "requestBody": {"required": True, "content": {
                    "application/json": {"schema": {"$ref": "#/components/schemas/Batch"}},
                    "application/vnd.ldp.batch": {"schema": {"type": "string",
                                                             "format": "binary"}}}},
                "responses": {
                    "200": _json({"$ref": "#/components/schemas/BatchResult"},
                                 "one result per report, in order"),
                    **_body_errors(),
                    **_auth_errors(),
                },
            }},
        },
    }

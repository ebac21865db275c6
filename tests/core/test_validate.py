"""The manifest's and the catalogue's JSON Schemas: shipped as files, usable by any tooling, and in
agreement with the names and limits the code uses."""

from __future__ import annotations

import json

import jsonschema
import tomllib

from attention_ports.core import paths, validate
from attention_ports.fixtures.store import ALLOWED_DTYPES
from attention_ports.spec.conventions import CONVENTIONS


def _schema(name: str) -> dict:
    return json.loads((paths.FIXTURES / "schemas" / f"{name}.schema.json").read_text(encoding="utf-8"))


def test_the_shipped_schemas_are_the_ones_validate_checks_against() -> None:
    assert validate.MANIFEST_SCHEMA == _schema("manifest")
    assert validate.CATALOGUE_SCHEMA == _schema("catalogue")


def test_the_shipped_fixtures_validate_with_a_plain_json_schema_validator() -> None:
    manifest = json.loads((paths.FIXTURES / "manifest.json").read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator(_schema("manifest")).validate(manifest)
    catalogue = tomllib.loads((paths.FIXTURES / "catalogue.toml").read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator(_schema("catalogue")).validate(catalogue)


def test_the_schemas_name_the_codes_conventions_dtypes_and_limits() -> None:
    case = _schema("manifest")["properties"]["cases"]["items"]["properties"]
    masked = case["masked_query"]["properties"]
    assert masked["precision_bits"]["propertyNames"]["enum"] == list(CONVENTIONS)
    assert masked["expected"]["propertyNames"]["enum"] == list(CONVENTIONS)
    assert set(case["inputs"]["additionalProperties"]["properties"]["dtype"]["enum"]) == ALLOWED_DTYPES
    maker = _schema("catalogue")["$defs"]["input"]["properties"]
    assert set(maker["dtype"]["enum"]) == ALLOWED_DTYPES
    assert maker["normal"]["items"]["maximum"] == validate.MAX_CATALOGUE_ELEMENTS

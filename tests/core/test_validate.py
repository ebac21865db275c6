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


def test_the_shipped_schemas_are_the_ones_validate_checks_against_and_valid_schemas() -> None:
    assert validate.MANIFEST_SCHEMA == _schema("manifest")
    assert validate.CATALOGUE_SCHEMA == _schema("catalogue")
    assert validate.REPORT_SCHEMA == _schema("report")
    for name in ("manifest", "catalogue", "report"):  # checked here, not at each import (validate.py)
        jsonschema.Draft202012Validator.check_schema(_schema(name))


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


def _npy_with_header(header: str) -> bytes:
    text = header.ljust(((len(header) + 11) // 64 + 1) * 64 - 11) + "\n"  # numpy's 64-byte alignment
    return b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text.encode("latin1") + bytes(8 * 15)


def test_a_header_is_parsed_the_same_each_time_and_a_long_one_is_never_kept() -> None:
    short = "{'descr': '<f8', 'fortran_order': False, 'shape': (3, 5), }"
    padded = short + " " * 3000  # a valid header, padded far beyond numpy's own
    kept = validate._parsed_header.cache_info().currsize
    for header in (short, short, padded, padded):
        meta, offset = validate.npy_header(_npy_with_header(header))
        assert meta == {"descr": "<f8", "fortran_order": False, "shape": (3, 5)}
        meta["shape"] = (1,)  # the caller's copy: the next read sees the file's own
        assert offset % 64 == 0
    assert validate._parsed_header.cache_info().currsize <= kept + 1  # the short text at most

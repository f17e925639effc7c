"""Config and sample-sheet checks with one clear line per problem.

Snakemake's ``validate`` fills in the schema defaults; these checks run first so that a wrong
key, type or path is reported as ``config: trna.shards: ...`` rather than a schema dump.

``snakemake --config 'trna={"classify":{"min_confidence":100}}'`` hands nested values over as
strings (Snakemake parses them with YAML's BaseLoader), so :func:`coerce_config` first turns each
string into the type the schema asks for where it converts; what does not convert is left alone
and reported by :func:`check_config` like any other wrong type.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from kennel.errors import KennelError

TRNA_PATH_COLUMNS = ("pod5", "bam")
SNP_PATH_COLUMNS = ("vcf", "genome", "model", "targets", "params")


def load_schema(path: str | os.PathLike) -> dict[str, Any]:
    with open(path) as handle:
        return yaml.safe_load(handle)


def _where(error) -> str:
    return ".".join(str(part) for part in error.absolute_path)


def _explain(error) -> str:
    if error.validator == "additionalProperties":
        known = ", ".join(sorted(error.schema.get("properties", {})))
        return f"{error.message} (known keys: {known})"
    return error.message


# YAML 1.2 core-schema spellings: what a user types in a config file means the same on the CLI
_NULLS = {"null", "Null", "NULL", "~", ""}
_BOOLEANS = {"true": True, "True": True, "TRUE": True, "false": False, "False": False}


def _convert(text: str, kind: str) -> Any:
    """``text`` as a JSON-schema ``kind``, or raise ``ValueError``."""
    if kind == "null" and text in _NULLS:
        return None
    if kind == "boolean" and text in _BOOLEANS:
        return _BOOLEANS[text]
    if kind == "integer":
        return int(text)
    if kind == "number":
        number = float(text)
        return int(number) if number.is_integer() and "." not in text else number
    if kind == "string":
        return text
    raise ValueError(text)


def coerce_config(value: Any, schema: Mapping[str, Any]) -> Any:
    """``value`` with every string the schema types otherwise converted, recursively.

    Only strings are touched: ``null``/``~`` becomes None wherever the schema allows null (as
    YAML reads it in a config file), and other strings convert only where the schema does not
    accept a string there.
    """
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        return {
            key: coerce_config(item, properties.get(key, extra if isinstance(extra, dict) else {}))
            for key, item in value.items()
        }
    if isinstance(value, list):
        items = schema.get("items", {})
        return [coerce_config(item, items if isinstance(items, dict) else {}) for item in value]
    kinds = schema.get("type")
    if not isinstance(value, str) or kinds is None:
        return value
    kinds = [kinds] if isinstance(kinds, str) else list(kinds)
    if "null" in kinds and value.strip() in _NULLS:
        return None  # as in a YAML file, even where a string would also do
    if "string" in kinds:
        return value
    for kind in sorted(kinds, key=lambda k: k != "null"):
        try:
            return _convert(value.strip(), kind)
        except ValueError:
            continue
    return value


def check_config(config: Mapping[str, Any], schema: Mapping[str, Any]) -> None:
    """Raise a one-line :class:`KennelError` for the most relevant schema violation."""
    error = best_match(Draft202012Validator(schema).iter_errors(config))
    if error is not None:
        where = _where(error)
        raise KennelError(f"config: {where + ': ' if where else ''}{_explain(error)}")


def read_sample_sheet(path: str | os.PathLike, schema: Mapping[str, Any]) -> list[dict[str, str]]:
    """Read the TSV sample sheet: empty cells dropped, each row checked against ``schema``."""
    path = Path(path)
    if not path.is_file():
        raise KennelError(f"{path}: sample sheet not found")
    with open(path) as handle:
        lines = [line.rstrip("\n\r") for line in handle if line.strip()]
    if not lines:
        raise KennelError(f"{path}: sample sheet is empty")
    header = lines[0].split("\t")
    validator = Draft202012Validator(schema)
    rows, seen = [], {}
    for line_number, line in enumerate(lines[1:], start=2):
        cells = line.split("\t")
        if len(cells) > len(header):
            raise KennelError(
                f"{path}: line {line_number}: {len(cells)} cells but {len(header)} columns"
            )
        row = {
            column: cell.strip()
            for column, cell in zip(header, cells, strict=False)
            if cell.strip()
        }
        error = best_match(validator.iter_errors(row))
        if error is not None:
            where = _where(error)
            raise KennelError(
                f"{path}: line {line_number}: {where + ': ' if where else ''}{_explain(error)}"
            )
        if row["id"] in seen:
            raise KennelError(
                f"{path}: line {line_number}: duplicate id {row['id']!r} "
                f"(first on line {seen[row['id']]})"
            )
        seen[row["id"]] = line_number
        rows.append(row)
    return rows


def input_paths(row: Mapping[str, str]) -> list[str]:
    """Every input file a sheet row names (POD5 cells may list several)."""
    columns = TRNA_PATH_COLUMNS if row["arm"] == "trna" else SNP_PATH_COLUMNS
    paths = []
    for column in columns:
        paths.extend(p.strip() for p in row.get(column, "").split(",") if p.strip())
    return paths


def check_inputs_exist(
    rows: Iterable[Mapping[str, str]],
    config_paths: Mapping[str, str],
    generated_dir: str | os.PathLike,
    sheet: str | os.PathLike,
) -> None:
    """Fail on the first named input that is missing, unless a demo rule will generate it."""
    generated = Path(os.path.normpath(generated_dir))

    def will_exist(path: str) -> bool:
        normal = Path(os.path.normpath(path))
        return normal.exists() or generated in normal.parents

    for key, path in config_paths.items():
        if not will_exist(path):
            raise KennelError(f"config: {key}: file not found: {path}")
    for row in rows:
        for path in input_paths(row):
            if not will_exist(path):
                raise KennelError(f"{sheet}: sample {row['id']}: file not found: {path}")


PLACEHOLDER_PREFIX = "EDIT_"


def placeholder_resources(groups: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """``"slurm_account (default-resources)"`` for each resource still set to an ``EDIT_`` value.

    ``groups`` maps a profile section to its resources, as Snakemake parsed them (objects with
    the value as written in ``.raw``) or plain values.
    """
    unset = []
    for group, resources in groups.items():
        for name, resource in resources.items():
            raw = getattr(resource, "raw", resource)
            if isinstance(raw, str) and raw.startswith(PLACEHOLDER_PREFIX):
                unset.append(f"{name} ({group})")
    return unset

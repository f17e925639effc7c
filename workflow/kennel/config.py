"""Config and sample-sheet checks with one clear line per problem.

Snakemake's ``validate`` fills in the schema defaults; these checks run first so that a wrong
key, type or path is reported as ``config: trna.shards: ...`` rather than a schema dump.
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
SNP_PATH_COLUMNS = ("vcf", "genome", "model", "targets")


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
        paths.extend(p.strip() for p in row[column].split(",") if p.strip())
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

"""Config and sample-sheet checks: one clear line naming the key, line or path."""

from __future__ import annotations

import copy
import re

import pytest
import yaml
from kennel.config import (
    check_config,
    check_inputs_exist,
    coerce_config,
    load_schema,
    placeholder_resources,
    read_sample_sheet,
)
from kennel.errors import KennelError

from tests.conftest import REPO

CONFIG_SCHEMA = load_schema(REPO / "workflow/schemas/config.schema.yaml")
SAMPLES_SCHEMA = load_schema(REPO / "workflow/schemas/samples.schema.yaml")
SHIPPED = yaml.safe_load((REPO / "config/config.yaml").read_text())


def test_shipped_config_and_sheet_are_valid():
    check_config(SHIPPED, CONFIG_SCHEMA)
    rows = read_sample_sheet(REPO / "config/samples.tsv", SAMPLES_SCHEMA)
    assert {row["arm"] for row in rows} == {"trna", "snp"}


def _schema_keys(schema, prefix=""):
    for key, sub in schema.get("properties", {}).items():
        yield prefix + key, sub
        yield from _schema_keys(sub, prefix + key + ".")


def test_every_schema_key_has_default_and_description():
    for key, sub in _schema_keys(CONFIG_SCHEMA):
        assert "default" in sub, key
        assert sub.get("description"), key


def _schema_defaults():
    return {
        key: sub.get("default")
        for key, sub in _schema_keys(CONFIG_SCHEMA)
        if "properties" not in sub
    }


def _readme_defaults():
    """README's config table as {key: default}; None where the default is prose, not a value."""
    readme = (REPO / "README.md").read_text()
    table = readme.split("| key | default | meaning |\n| --- | --- | --- |\n")[1].split("\n\n")[0]
    found = {}
    for row in table.splitlines():
        keys_cell, default_cell, _ = (cell.strip() for cell in row.strip("|").split("|", 2))
        first, *siblings = (key.strip("` ") for key in keys_cell.split(" / "))
        keys = [first] + [f"{first.rpartition('.')[0]}.{key}" for key in siblings]
        values = default_cell.split(" / ") if len(keys) > 1 else [default_cell]
        for key, value in zip(keys, values, strict=True):
            literal = re.fullmatch(r"`([^`]*)`", value.strip())
            found[key] = yaml.safe_load(literal.group(1)) if literal else None
    return found


def _lookup(config, dotted):
    for part in dotted.split("."):
        config = config[part]
    return config


def test_schema_defaults_are_what_the_shipped_config_and_the_readme_say():
    defaults = _schema_defaults()
    assert {key: _lookup(SHIPPED, key) for key in defaults} == defaults
    documented = _readme_defaults()
    assert documented.keys() == defaults.keys()
    literal = {key: value for key, value in documented.items() if value is not None}
    assert literal == {key: defaults[key] for key in literal}


@pytest.mark.parametrize(
    "path, value, message",
    [
        (("trna", "shards"), 0, "config: trna.shards: 0 is less than the minimum of 1"),
        (("trna", "shards"), "two", "config: trna.shards: 'two' is not of type 'integer'"),
        (("trna", "sharts"), 2, "config: trna: Additional properties are not allowed ('sharts'"),
        (("bogus",), 1, "config: Additional properties are not allowed ('bogus' was unexpected)"),
        (("demo", "trna_samples"), ["bad name"], "config: demo.trna_samples.0: 'bad name'"),
    ],
)
def test_bad_config_one_line(path, value, message):
    config = copy.deepcopy(SHIPPED)
    node = config
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(KennelError) as caught:
        check_config(config, CONFIG_SCHEMA)
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)


HEADER = "id\tarm\tpod5\tbam\tvcf\tgenome\tmodel\ttargets\n"


@pytest.mark.parametrize(
    "body, message",
    [
        ("a\ttrna\tx.pod5\t\t\t\t\t\n", "line 2: 'bam' is a required property"),
        ("a\trna\tx.pod5\tx.bam\t\t\t\t\n", "line 2: arm: 'rna' is not one of"),
        ("a b\ttrna\tx.pod5\tx.bam\t\t\t\t\n", "line 2: id: 'a b' does not match"),
        (
            "a\ttrna\tx.pod5\tx.bam\t\t\t\t\na\ttrna\ty.pod5\ty.bam\t\t\t\t\n",
            "line 3: duplicate id 'a'",
        ),
        ("s\tsnp\t\t\tv.vcf\tg.fa\t\t\n", "line 2: 'model' is a required property"),
    ],
)
def test_bad_sample_sheet_one_line(tmp_path, body, message):
    sheet = tmp_path / "samples.tsv"
    sheet.write_text(HEADER + body)
    with pytest.raises(KennelError) as caught:
        read_sample_sheet(sheet, SAMPLES_SCHEMA)
    assert f"{sheet}: {message}" in str(caught.value)


def test_missing_inputs_named_unless_the_demo_generates_them(tmp_path):
    present = tmp_path / "x.bam"
    present.touch()
    rows = [{"id": "a", "arm": "trna", "pod5": "resources/demo/trna/a.pod5", "bam": str(present)}]
    check_inputs_exist(rows, {}, generated_dir="resources/demo", sheet="s.tsv")
    rows.append(
        {"id": "b", "arm": "trna", "pod5": f"{present},{tmp_path}/gone.pod5", "bam": str(present)}
    )
    with pytest.raises(KennelError, match=f"s.tsv: sample b: file not found: {tmp_path}/gone.pod5"):
        check_inputs_exist(rows, {}, generated_dir="resources/demo", sheet="s.tsv")
    with pytest.raises(KennelError, match="config: trna.reference: file not found: /no/ref.fa"):
        check_inputs_exist([], {"trna.reference": "/no/ref.fa"}, "resources/demo", "s.tsv")


def _snakemake_config_value(text: str):
    """What `snakemake --config key=TEXT` hands the workflow (its own parser, not a copy)."""
    from snakemake.cli import parse_config

    return parse_config([f"trna={text}"])["trna"]


def test_config_overrides_from_the_command_line_take_the_schema_types():
    given = _snakemake_config_value(
        '{"classify": {"min_confidence": 100, "raw_tags": true, "inductor_cache": null},'
        ' "features": {"dwell_weight": 0.5, "motif": "CCAGG"}, "shards": 3}'
    )
    assert given["classify"]["min_confidence"] == "100"  # the problem: Snakemake gives strings
    config = copy.deepcopy(SHIPPED)
    config["trna"] = {**config["trna"], **given}
    coerced = coerce_config(config, CONFIG_SCHEMA)
    check_config(coerced, CONFIG_SCHEMA)
    assert coerced["trna"]["classify"] == {
        "min_confidence": 100, "raw_tags": True, "inductor_cache": None
    }  # fmt: skip
    assert coerced["trna"]["features"] == {"dwell_weight": 0.5, "motif": "CCAGG"}
    assert coerced["trna"]["shards"] == 3
    shifts = coerce_config({"snp": {"score": {"shifts": ["0", "-1", "1"]}}}, CONFIG_SCHEMA)
    assert shifts["snp"]["score"]["shifts"] == [0, -1, 1]
    # a string where the schema wants a string stays one, even when it looks like a number
    assert coerce_config({"samples": "123"}, CONFIG_SCHEMA) == {"samples": "123"}


@pytest.mark.parametrize(
    "text, message",
    [
        ('{"classify": {"min_confidence": abc}}',
         "config: trna.classify.min_confidence: 'abc' is not of type 'integer'"),
        ('{"classify": {"raw_tags": maybe}}',
         "config: trna.classify.raw_tags: 'maybe' is not of type 'boolean'"),
        ('{"shards": 1.5}', "config: trna.shards: '1.5' is not of type 'integer'"),
        ('{"shards": 0}', "config: trna.shards: 0 is less than the minimum of 1"),
    ],
)  # fmt: skip
def test_config_overrides_that_do_not_convert_keep_the_one_line_error(text, message):
    config = copy.deepcopy(SHIPPED)
    config["trna"] = {**config["trna"], **_snakemake_config_value(text)}
    with pytest.raises(KennelError) as caught:
        check_config(coerce_config(config, CONFIG_SCHEMA), CONFIG_SCHEMA)
    assert str(caught.value).startswith(message)


def test_profile_placeholders_are_found_by_their_prefix():
    class Parsed:  # what Snakemake hands over: the value as written in .raw
        def __init__(self, raw):
            self.raw = raw

    groups = {
        "default-resources": {"slurm_account": Parsed("EDIT_account"), "runtime": Parsed(60)},
        "set-resources classify": {"slurm_partition": "EDIT_gpu_partition", "gpu": 1},
        "set-resources extract": {"slurm_partition": "short"},
    }
    assert placeholder_resources(groups) == [
        "slurm_account (default-resources)",
        "slurm_partition (set-resources classify)",
    ]

"""leech bundles that differ from one another only in their network or their file's layout,
through kennel's jobs, against the tags `leech predict` wrote with each: every bundle leech
0.16.0 trained on the fixture reads (leech_made/make.sh: its twenty architectures, and a
TCNDwell on a wide feature window), the fixture's ConvLSTMDwell, and two bundles made from the
fixture's as leech would write them.

The jobs are the commands the workflow's rules run, with the options they pass (a dry run
prints them; test_workflow checks the config reaches them), called in this process: one
snakemake run per bundle would pay for the same plumbing two dozen times. test_leech_workflow
runs the bundles whose kind or options change what the workflow plans through `snakemake`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kennel.cli import main
from leech_reference import (
    LEECH_SHARED,
    LSTM_BUNDLE,
    assert_tags_equal_leech,
    one_output_multiclass_bundle,
    wide_window_bundle,
)

from tests.conftest import SHARED_DATA

pytestmark = pytest.mark.slow

LEECH_MADE = Path(__file__).parent / "leech_made"
BUNDLES = sorted(path.name[len("fx_") : -len(".pt")] for path in LEECH_MADE.glob("fx_*.pt"))
DATA = LEECH_SHARED / "data"
REFERENCE = str(DATA / "reference.fa")
SHARDS = 2


def kennel(*arguments: object) -> None:
    assert main([str(argument) for argument in arguments]) == 0, arguments


def run_jobs(directory: Path, bundle: Path) -> Path:
    """The fixture reads through shard, extract, classify and merge-bam: the merged BAM."""
    shards = [directory / f"{index:03d}" for index in range(SHARDS)]
    kennel(
        "shard", "--bam", DATA / "fx.bam", "--pod5", DATA / "fx.pod5", "--reference", REFERENCE,
        "--shard-pod5", *(f"{s}.pod5" for s in shards),
        "--shard-bam", *(f"{s}.bam" for s in shards),
        "--passthrough", directory / "passthrough.bam", "--counts", directory / "counts.tsv",
        "--threads", 1, "--bundle", bundle, "--min-mapq", 0,
    )  # fmt: skip
    for shard in shards:
        kennel(
            "extract", "--bam", f"{shard}.bam", "--pod5", f"{shard}.pod5",
            "--reference", REFERENCE, "--kmer-table", SHARED_DATA / "rna004_9mer_levels_v1.txt.gz",
            "--output", f"{shard}.features.h5", "--threads", 1, "--bundle", bundle,
        )  # fmt: skip
        kennel(
            "classify", "--bam", f"{shard}.bam", "--bundle", bundle,
            "--features", f"{shard}.features.h5", "--output", f"{shard}.classified.bam",
            "--predictions", f"{shard}.predictions.tsv", "--stats", f"{shard}.stats.json",
            "--threads", 1, "--min-confidence", 0, "--min-margin", 0, "--batch-size", 100,
            "--device", "auto", "--compile", "auto", "--compile-threshold", 2_000_000,
            "--in-flight", 3,
        )  # fmt: skip
    merged = directory / "fx.classified.bam"
    kennel(
        "merge-bam", "--shards", *(f"{s}.classified.bam" for s in shards),
        "--passthrough", directory / "passthrough.bam", "--counts", directory / "counts.tsv",
        "--stats", *(f"{s}.stats.json" for s in shards), "--output", merged, "--threads", 1,
    )  # fmt: skip
    return merged


def test_leech_made_holds_every_architecture_and_its_tags():
    # a bundle whose tags were lost (or the reverse) would drop out of the test unnoticed
    assert len(BUNDLES) == 21
    assert all((LEECH_MADE / f"fx.{name}.default.bam").is_file() for name in BUNDLES)


@pytest.mark.parametrize("name", BUNDLES)
def test_every_bundle_leech_trained_gets_leechs_tags(leech_shared, tmp_path, name):
    merged = run_jobs(tmp_path, LEECH_MADE / f"fx_{name}.pt")
    assert_tags_equal_leech(merged, LEECH_MADE / f"fx.{name}.default.bam")


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda path: LSTM_BUNDLE, "fx.convlstmdwell.default.bam"),
        # leech model bundle --comparison-type multiclass of a binary model: leech predict
        # --all runs it as --pair runs the pair (run_inference, binary for num_out 1)
        (one_output_multiclass_bundle, "fx.gly_phe_pair.default.bam"),
        # a ConvLSTMDwell trained on bases -7..+7: leech predict cuts its features to the 11
        # bases from -5 (dwell_offset 0), the fixture model's own window
        (lambda path: wide_window_bundle(LSTM_BUNDLE, path), "fx.convlstmdwell.default.bam"),
    ],
    ids=["convlstmdwell", "multiclass_of_one_output", "convlstmdwell_wide_window"],
)
def test_bundles_of_the_fixtures_networks_get_leechs_tags(leech_shared, tmp_path, make, expected):
    merged = run_jobs(tmp_path, make(tmp_path / "bundle.pt"))
    assert_tags_equal_leech(merged, expected)

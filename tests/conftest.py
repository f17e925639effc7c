"""Shared fixtures: simulated inputs are built once per test session (2 cores, keep it fast)."""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn


# Compiler caches of this test session only, fresh and empty, set before anything imports torch
# (inductor and Triton read these at each use; the snakemake runs the tests start inherit them).
# A cache left on the machine by earlier runs would otherwise let a test pass here that fails on
# a fresh machine, so a CI run would not mean what a fresh clone means.
def _session_caches() -> Path:
    # conftest runs twice in one session (as pytest's conftest and as `tests.conftest` for the
    # tests that import from it): the owning pid tells the session's own directory apart from
    # one inherited by a pytest that a test starts, which gets fresh caches of its own
    owner, _, path = os.environ.get("KENNEL_TEST_CACHES", "").partition(":")
    if owner == str(os.getpid()):
        return Path(path)
    assert "torch" not in sys.modules, "torch was imported before the test caches were set"
    path = tempfile.mkdtemp(prefix="kennel-test-caches-")
    os.environ["KENNEL_TEST_CACHES"] = f"{os.getpid()}:{path}"
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(path, "inductor")
    os.environ["TRITON_CACHE_DIR"] = os.path.join(path, "triton")
    return Path(path)


SESSION_CACHES = _session_caches()

import pytest
from kennel.sim.trna import TrnaSimulation, simulate_trna
from kennel.trna.extract import extract_shard
from kennel.trna.shard import ShardOutputs, shard_sample
from kennel.trna.train import train_bundle

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
REAL_REFERENCE = SHARED_DATA / "sacCer3-mature-tRNAs-dual-adapt-v2.fa"
REAL_KMER_TABLE = SHARED_DATA / "rna004_9mer_levels_v1.txt.gz"


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def unavailable(reason: str, ci_provides: str) -> NoReturn:
    """Skip a test whose prerequisite is missing here; CI provides it, so there the test fails."""
    if in_ci():
        pytest.fail(f"CI must run this test, but {reason} ({ci_provides})", pytrace=False)
    pytest.skip(reason)


def require_tool(name: str) -> str:
    """The path of command-line tool ``name`` (skip here, fail in CI, when it is missing)."""
    path = shutil.which(name)
    if path is None:
        unavailable(f"{name} is not installed", ".ci/run installs it")
    return path


def require_module(name: str, install: str):
    """Module ``name``, imported (skip here, fail in CI, when it is missing)."""
    try:
        return importlib.import_module(name)
    except ImportError as error:
        unavailable(f"{name} is not importable ({error}; {install})", ".ci/run installs it")


def require_real_data(*paths: Path) -> None:
    """The real inputs beside the checkout (default: the yeast reference and 9-mer table)."""
    missing = [str(p) for p in paths or (REAL_REFERENCE, REAL_KMER_TABLE) if not p.is_file()]
    if missing:
        unavailable(f"real inputs missing: {', '.join(missing)}", "CI has ../shared/data")


def pytest_sessionfinish(session, exitstatus):
    shutil.rmtree(SESSION_CACHES, ignore_errors=True)


def pytest_collection_modifyitems(items):
    for item in items:
        if "integration" in item.keywords:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def trna_sim(tmp_path_factory) -> dict[str, Path]:
    """Two small simulated tRNA samples with the synthetic reference and 5-mer table."""
    out = tmp_path_factory.mktemp("trna_sim")
    return simulate_trna(out, TrnaSimulation(samples=("s1", "s2"), reads=300, seed=11))


@pytest.fixture(scope="session")
def real_trna_sim(tmp_path_factory) -> dict[str, Path]:
    """Simulated reads from the real yeast reference and RNA004 9-mer table."""
    require_real_data()
    out = tmp_path_factory.mktemp("real_trna_sim")
    return simulate_trna(
        out,
        TrnaSimulation(
            samples=("real",),
            reads=200,
            seed=5,
            reference=REAL_REFERENCE,
            kmer_table=REAL_KMER_TABLE,
        ),
    )


@pytest.fixture
def workflow_copy(tmp_path) -> Path:
    """The workflow as a fresh clone has it (tracked and untracked-but-not-ignored files)."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for relative in listed:
        source = REPO / relative
        target = tmp_path / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():  # e.g. ./slurm -> profiles/slurm, as a clone has it
            target.symlink_to(os.readlink(source))
        elif source.is_file():
            shutil.copy2(source, target)
    return tmp_path


def write_in_read_order(source: Path, target: Path, seed: int = 7, no_hd: bool = False) -> Path:
    """``source``'s records shuffled under a header without ``SO:coordinate``, unindexed: an
    aligned BAM as dorado writes it (read order, ``SO:unknown``), or with no ``@HD`` line."""
    import random

    import pysam

    with pysam.AlignmentFile(str(source), check_sq=False) as bam:
        header = bam.header.to_dict()
        records = [record.to_string() for record in bam.fetch(until_eof=True)]
    random.Random(seed).shuffle(records)
    header.setdefault("HD", {"VN": "1.6"})["SO"] = "unknown"
    if no_hd:
        del header["HD"]
    with pysam.AlignmentFile(str(target), "wb", header=header) as out:
        for line in records:
            out.write(pysam.AlignedSegment.fromstring(line, out.header))
    return target


def write_run_directory(pod5: Path, directory: Path) -> Path:
    """``pod5``'s reads as MinKNOW lays out a barcoded run: every third read in
    ``pod5_pass/`` itself, the rest in two files of ``pod5_pass/barcode01/``."""
    from kennel.io.pod5 import Pod5Set

    source = Pod5Set(pod5)
    reads = sorted(source.reads)
    top = directory / "pod5_pass"
    (top / "barcode01").mkdir(parents=True)
    source.write_subset(top / "run_0.pod5", reads[::3])
    source.write_subset(top / "barcode01" / "run_1.pod5", reads[1::3])
    source.write_subset(top / "barcode01" / "run_2.pod5", reads[2::3])
    (top / "sequencing_summary.txt").write_text("not a POD5: left out\n")
    return top


def shard_outputs(directory: Path, n_shards: int) -> ShardOutputs:
    return ShardOutputs(
        pod5s=[directory / f"{i:03d}.pod5" for i in range(n_shards)],
        bams=[directory / f"{i:03d}.bam" for i in range(n_shards)],
        passthrough=directory / "passthrough.bam",
        counts=directory / "counts.tsv",
    )


@pytest.fixture(scope="session")
def sharded(trna_sim, tmp_path_factory) -> ShardOutputs:
    outputs = shard_outputs(tmp_path_factory.mktemp("shards"), 3)
    shard_sample(trna_sim["s1.bam"], [trna_sim["s1.pod5"]], trna_sim["reference"], outputs)
    return outputs


def extract_shards(
    outputs: ShardOutputs,
    sim: dict[str, Path],
    directory: Path,
    threads: Sequence[int] = (),
    spec=None,
) -> tuple[list[Path], list[dict[str, int]]]:
    """Extract every shard into ``directory``: (features files, extract_shard's counts).

    ``threads`` gives each shard's worker count, in shard order (1 for shards it does not reach);
    ``spec`` the feature spec (default: the k-mer table's defaults).
    """
    directory.mkdir(parents=True, exist_ok=True)
    paths, counts = [], []
    for index, (bam, pod5) in enumerate(zip(outputs.bams, outputs.pod5s, strict=True)):
        path = directory / f"{index:03d}.features.h5"
        workers = threads[index] if index < len(threads) else 1
        counts.append(
            extract_shard(
                bam, [pod5], sim["reference"], sim["kmer_table"], path, threads=workers, spec=spec
            )
        )
        paths.append(path)
    return paths, counts


@pytest.fixture(scope="session")
def features(trna_sim, sharded, tmp_path_factory) -> list[Path]:
    """Features of every shard (shard 0 with two worker processes, to cover the pool path)."""
    paths, _ = extract_shards(sharded, trna_sim, tmp_path_factory.mktemp("features"), threads=[2])
    return paths


@pytest.fixture(scope="session")
def bundle(trna_sim, features, tmp_path_factory):
    """A small bundle trained briefly on shards 0 and 2 (accuracy is not the point here)."""
    path = tmp_path_factory.mktemp("bundle") / "bundle.pt"
    train_bundle(
        [features[0], features[2]], [trna_sim["s1.truth.tsv"]], path, epochs=1, seed=3, threads=1
    )
    return path


@pytest.fixture(scope="session")
def classified(sharded, features, bundle, tmp_path_factory):
    """Every shard classified (CPU, eager): (bams, stats jsons)."""
    from kennel.trna.classify import ClassifySettings, classify_shard

    directory = tmp_path_factory.mktemp("classified")
    bams, stats = [], []
    for index, (bam, feature_file) in enumerate(zip(sharded.bams, features, strict=True)):
        out = directory / f"{index:03d}"
        classify_shard(
            bam,
            bundle,
            f"{out}.bam",
            f"{out}.tsv",
            f"{out}.json",
            ClassifySettings(device="cpu", batch_size=128),
            features=feature_file,
        )
        bams.append(Path(f"{out}.bam"))
        stats.append(Path(f"{out}.json"))
    return bams, stats


def classify_and_merge(outputs: ShardOutputs, features, bundle, out: Path, settings=None):
    """Classify every shard (CPU, eager unless ``settings`` say otherwise) and merge:
    (merged BAM, accounting, stats files)."""
    from kennel.trna.classify import ClassifySettings, classify_shard
    from kennel.trna.merge import merge_sample

    if settings is None:
        settings = ClassifySettings(device="cpu")
    bams, stats = [], []
    for index, (bam, feature_file) in enumerate(zip(outputs.bams, features, strict=True)):
        prefix = out / f"c{index}"
        classify_shard(
            bam, bundle, f"{prefix}.bam", f"{prefix}.tsv", f"{prefix}.json",
            settings, features=feature_file,
        )  # fmt: skip
        bams.append(f"{prefix}.bam")
        stats.append(f"{prefix}.json")
    merged = out / "merged.bam"
    accounting = merge_sample(bams, outputs.passthrough, outputs.counts, stats, merged)
    return merged, accounting, stats

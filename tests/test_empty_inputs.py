"""Empty but valid inputs succeed with empty, well-formed outputs."""

from __future__ import annotations

import gzip

import h5py
import pysam
from kennel.snp.merge import merge_scores
from kennel.snp.scoring import ScoreOptions, score_snps
from kennel.snp.slices import slice_vcf
from kennel.trna.shard import read_counts, shard_sample
from kennel.trna.summary import summarize_sample

from tests.conftest import classify_and_merge, extract_shards, shard_outputs


def test_bam_with_no_classifiable_read(trna_sim, bundle, tmp_path):
    bam = tmp_path / "unmapped_only.bam"
    n_records = 0
    source = pysam.AlignmentFile(str(trna_sim["s1.bam"]))
    with source, pysam.AlignmentFile(str(bam), "wb", template=source) as out:
        for record in source.fetch(until_eof=True):
            if record.is_unmapped:
                out.write(record)
                n_records += 1
    pysam.index(str(bam))
    outputs = shard_outputs(tmp_path / "shards", 2)
    shard_sample(bam, [trna_sim["s1.pod5"]], trna_sim["reference"], outputs)
    features, counts = extract_shards(outputs, trna_sim, tmp_path / "features")
    assert counts == [{"extracted": 0}] * 2
    merged, accounting, stats = classify_and_merge(outputs, features, bundle, tmp_path)
    assert accounting == {
        "input": n_records, "merged": n_records, "classified": 0, "skipped": 0,
        "passthrough": n_records,
    }  # fmt: skip
    assert {r["name"]: r["records"] for r in read_counts(outputs.counts)}["unmapped"] == str(
        n_records
    )
    counts, classes, histograms = (tmp_path / n for n in ("n.tsv", "c.tsv", "d.tsv"))
    assert (
        summarize_sample("empty", merged, outputs.counts, stats, counts, classes, histograms) == {}
    )
    assert classes.read_text().splitlines()[1:] == []
    assert "passthrough\tunmapped\t" in counts.read_text()


def test_vcf_with_no_variants(tmp_path):
    from kennel.sim.snp import simulate_snp

    sim = simulate_snp(tmp_path / "sim", seed=4, n_variants=10)
    with gzip.open(sim["variants"], "rt") as handle:
        header = [line for line in handle if line.startswith("#")]
    empty = tmp_path / "empty.vcf"
    empty.write_text("".join(header))
    slices = [tmp_path / "s0.vcf.gz", tmp_path / "s1.vcf.gz"]
    assert slice_vcf(empty, slices, 2048, 0.1) == [0, 0]
    scores = []
    for index, piece in enumerate(slices):
        out = tmp_path / f"s{index}.scores.h5"
        score_snps(
            piece, sim["genome"], sim["model"], sim["targets"], out, ScoreOptions(device="cpu")
        )
        scores.append(out)
    merged = tmp_path / "scores.h5"
    assert merge_scores(scores, merged, tmp_path / "plot.png", tmp_path / "top.html").variants == 0
    with h5py.File(merged) as handle:
        assert handle["snp"].shape == (0,)
        assert handle["SUM"].shape[0] == 0 and handle["SUM"].shape[1] > 0
        assert len(handle["target_ids"]) == handle["SUM"].shape[1]

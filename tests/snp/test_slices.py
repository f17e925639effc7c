"""Slicing at cluster boundaries: near-equal slices whose scores do not depend on the count."""

from __future__ import annotations

from dataclasses import replace

import pysam
import pytest
from kennel.cli import main
from kennel.errors import KennelError
from kennel.snp.clusters import cluster_variants
from kennel.snp.slices import slice_boundaries, slice_vcf
from kennel.snp.vcf import read_variants
from snp_helpers import (
    OPTIONS,
    SEQ_LEN,
    assert_same_scores,
    read_scores,
    score_in_slices,
    vcf_lines,
    write_vcf,
)


def test_boundaries_are_nearest_to_equal_shares():
    assert slice_boundaries([1] * 10, 2) == [0, 5, 10]
    assert slice_boundaries([5, 1, 1, 1, 1, 1], 2) == [0, 1, 6]
    assert slice_boundaries([3, 3, 3], 1) == [0, 3]
    assert slice_boundaries([2, 2], 4) == [0, 0, 1, 1, 2]  # more slices than clusters: empties
    assert slice_boundaries([], 3) == [0, 0, 0, 0]
    with pytest.raises(KennelError, match="slices: 0"):
        slice_boundaries([1], 0)


def test_slices_partition_the_vcf_without_splitting_a_cluster(snp_sim, four_slices):
    everything = read_variants(snp_sim["variants"]).variants
    full = cluster_variants(everything, SEQ_LEN, OPTIONS.cluster_pct)
    windows = {(c.chrom, c.start, tuple(everything[i].id for i in c.members)) for c in full}
    pieces, sizes = [], []
    for path in four_slices["slices"]:
        part = read_variants(path).variants
        pieces += part
        sizes.append(len(part))
        for cluster in cluster_variants(part, SEQ_LEN, OPTIONS.cluster_pct):
            ids = tuple(part[i].id for i in cluster.members)
            assert (cluster.chrom, cluster.start, ids) in windows
    key = [(v.id, v.chrom, v.pos, v.ref, v.alt) for v in everything]
    assert [(v.id, v.chrom, v.pos, v.ref, v.alt) for v in pieces] == key
    largest_cluster = max(len(c.members) for c in full)
    assert max(sizes) - min(sizes) <= 2 * largest_cluster
    header, _ = vcf_lines(four_slices["slices"][0])
    assert header == vcf_lines(snp_sim["variants"])[0]  # the source header, contigs included


def test_one_and_four_slices_merge_to_identical_scores(one_slice, four_slices):
    assert_same_scores(one_slice["merged"], four_slices["merged"], skip_attrs=("slices", "model"))


def test_a_vcf_without_contig_lines_and_with_symbolic_alleles_scores_as_without_them(
    snp_sim, one_slice, tmp_path
):
    """The Borzoi tutorials' VCFs declare no contigs, and joint-called VCFs carry '*' and
    symbolic ALTs, which have no sequence: the rest scores as the clean VCF does."""
    header, records = vcf_lines(snp_sim["variants"])
    bare_header = [line for line in header if not line.startswith("##contig")]
    edited = []
    for number, line in enumerate(records):
        fields = line.split("\t")
        if number % 7 == 3:  # a last ALT gets no row; the others keep their numbers
            edited.append("\t".join([*fields[:4], fields[4] + ",*", *fields[5:]]))
        else:
            edited.append(line)
        if number % 50 == 10:  # whole records with nothing to score, wherever a slice ends
            edited.append("\t".join([*fields[:2], f"sv{number}", fields[3], "<DEL>", *fields[5:]]))
    assert len(edited) > len(records)
    sim = {**snp_sim, "variants": write_vcf(tmp_path / "bare.vcf", bare_header, edited)}
    sliced = score_in_slices(sim, tmp_path / "bare", 3)
    unscored = sum(line.split("\t")[4].endswith(("*", "<DEL>")) for line in edited)
    scores = read_scores(sliced["merged"])
    assert scores["attrs"]["unscored_alleles"] == unscored
    assert_same_scores(
        one_slice["merged"], sliced["merged"], skip_attrs=("slices", "model", "unscored_alleles")
    )


def test_alts_first_slices_as_it_scores(snp_sim, tmp_path):
    """With alts first, a record whose first ALT is '*' places no variant, which moves the
    clusters after it: slice-vcf must cluster as the scorer does. Here (clusters span 204 bp)
    counting the '*,G' record's G would cluster {a, b} and {c} and cut between them; the scorer
    clusters {b, c}, one window."""
    header, _ = vcf_lines(snp_sim["variants"])
    with pysam.FastaFile(str(snp_sim["genome"])) as genome:
        bases = genome.fetch("chr1", 0, 2000).upper()
    records = []
    for name, pos, alt in (
        ("a", 1000, "*,{other}"),
        ("b", 1150, "{other}"),
        ("c", 1250, "{other}"),
    ):
        ref = bases[pos - 1]
        other = "A" if ref != "A" else "C"
        records.append(
            "\t".join(["chr1", str(pos), name, ref, alt.format(other=other), ".", ".", "."])
        )
    sim = {**snp_sim, "variants": write_vcf(tmp_path / "star.vcf", header, records)}
    options = replace(OPTIONS, alts="first")
    whole = score_in_slices(sim, tmp_path / "one", 1, options)
    sliced = score_in_slices(sim, tmp_path / "two", 2, options)
    assert_same_scores(whole["merged"], sliced["merged"], skip_attrs=("slices", "model"))
    assert read_scores(whole["merged"])["attrs"]["unscored_alleles"] == 1


def test_a_vcf_in_hound_snps_looser_form_slices_into_vcfs_and_scores_as_the_strict_one(
    snp_sim, tmp_path
):
    """The Borzoi tutorials' form (seven columns, no #CHROM line), cut into three slices: each
    slice is a VCF htslib reads, and the scores equal the strict VCF's in one slice."""
    _, records = vcf_lines(snp_sim["variants"])
    seven = ["\t".join(record.split("\t")[:7]) for record in records]
    loose = write_vcf(tmp_path / "tutorial.vcf", ["##fileformat=VCFv4.2"], seven)
    whole = score_in_slices(snp_sim, tmp_path / "strict", 1)
    sliced = score_in_slices({**snp_sim, "variants": loose}, tmp_path / "loose", 3)
    for path in sliced["slices"]:
        with pysam.VariantFile(str(path)) as vcf:
            assert list(vcf.header.samples) == [] and vcf.header.version == "VCFv4.2"
    assert_same_scores(whole["merged"], sliced["merged"], skip_attrs=("slices", "model"))


def test_a_bcf_is_refused_with_one_line(snp_sim, tmp_path):
    bcf = tmp_path / "variants.bcf"
    with pysam.VariantFile(str(snp_sim["variants"])) as source:
        header = source.header.copy()
        records = list(source)
    with pysam.VariantFile(str(bcf), "wb", header=header) as out:
        for record in records:
            out.write(record)
    outputs = [tmp_path / "000.vcf.gz", tmp_path / "001.vcf.gz"]
    with pytest.raises(KennelError, match=rf"{bcf}: a BCF file; give a VCF"):
        slice_vcf(bcf, outputs, SEQ_LEN, OPTIONS.cluster_pct)
    assert not any(path.exists() for path in outputs)


def test_more_slices_than_clusters_leaves_empty_slices_that_still_merge(snp_sim, tmp_path):
    header, records = vcf_lines(snp_sim["variants"])
    small = tmp_path / "small.vcf"
    small.write_text("\n".join([*header, *records[:4]]) + "\n")
    sim = {**snp_sim, "variants": small}
    many = score_in_slices(sim, tmp_path / "many", 6)
    sizes = [len(read_variants(path).variants) for path in many["slices"]]
    assert 0 in sizes and sum(sizes) == len(read_variants(small).variants)
    single = score_in_slices(sim, tmp_path / "single", 1)
    assert_same_scores(many["merged"], single["merged"], skip_attrs=("slices", "model"))


def test_cli_writes_every_slice_or_none(snp_sim, tmp_path, capsys):
    outputs = [str(tmp_path / f"{i}.vcf.gz") for i in range(3)]
    arguments = ["slice-vcf", "--vcf", str(snp_sim["variants"]), "--model", str(snp_sim["model"])]
    assert main([*arguments, "--out", *outputs]) == 0
    assert all((tmp_path / f"{i}.vcf.gz").exists() for i in range(3))

    bad = tmp_path / "bad.vcf"
    header, records = vcf_lines(snp_sim["variants"])
    bad.write_text("\n".join([*header, *records[:3], "chr1\tnowhere\tx\tA\tC\t.\t.\t."]) + "\n")
    outputs = [str(tmp_path / "bad" / f"{i}.vcf.gz") for i in range(2)]
    arguments = ["slice-vcf", "--vcf", str(bad), "--model", str(snp_sim["model"])]
    assert main([*arguments, "--out", *outputs]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(errors) == 1 and f"{bad}: record 4" in errors[0]
    assert not (tmp_path / "bad").exists() or not any((tmp_path / "bad").iterdir())

    assert (
        main(
            [
                "slice-vcf",
                "--vcf",
                str(snp_sim["variants"]),
                "--model",
                str(snp_sim["model"]),
                "--seq-len",
                "2000",
                "--out",
                str(tmp_path / "x.vcf.gz"),
            ]
        )
        == 2
    )
    assert "not a positive multiple of the model's stride (32)" in capsys.readouterr().err


def test_with_no_clusters_a_multi_allelic_record_stays_in_one_slice(tmp_path):
    """At cluster_pct 0 each ALT is a cluster of its own, so a boundary can fall between the
    ALTs of one record: the slicer moves it to the record's end. A slice per variant: every
    record lands whole in one slice, in order, and the counts are its alleles."""
    header = ["##fileformat=VCFv4.2", "##contig=<ID=chr1,length=100000>",
              "#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO"]  # fmt: skip
    alts = ["G", "G,T", "C", "A,C,T", "T", "<DEL>", "G,C"]
    records = [f"chr1\t{1000 * (i + 1)}\tr{i}\tA\t{alt}\t.\t.\t." for i, alt in enumerate(alts)]
    vcf = tmp_path / "multi.vcf"
    vcf.write_text("\n".join([*header, *records]) + "\n")
    outputs = [tmp_path / f"{i:02d}.vcf.gz" for i in range(12)]
    counts = slice_vcf(vcf, outputs, SEQ_LEN, 0.0)
    written = []
    for path in outputs:
        with pysam.VariantFile(str(path)) as part:
            written.append([record.id for record in part])
    assert [r for part in written for r in part] == [f"r{i}" for i in range(len(alts))]
    assert all(len(part) <= 1 or part == ["r4", "r5"] for part in written)  # <DEL>: no variant
    scored = {f"r{i}": sum(a != "<DEL>" for a in alt.split(",")) for i, alt in enumerate(alts)}
    assert counts == [sum(scored[r] for r in part) for part in written]

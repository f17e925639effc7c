"""kennel's scorer equals hound_snp: every stat, against tests/snp/hound_reference.py.

The reference re-derives baskerville's score_snps step by step (checked once against
baskerville's own code, see its docstring); here both score the same VCF with the same model,
targets (the demo's: every track soft-clipped, a sqrt sum stat, scale != 1) and options, and
every (variant, track) value must agree within float16 rounding. The VCF holds SNVs,
insertions and deletions (left-aligned, as hound_snp needs), multi-variant clusters, records
at the chromosome start, and flipped records (REF and ALT swapped, an indel among them).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
from hound_reference import bundle_model, hound_scores
from kennel.snp.scoring import ScoreOptions, prepare, score_in_memory
from kennel.snp.stat_names import HOUND_STATS
from snp_helpers import vcf_lines, write_vcf

N_RECORDS = 70
FLIPPED = 4  # records whose REF and ALT are swapped: the genome holds their ALT


@pytest.fixture(scope="module")
def hound_vcf(snp_sim, tmp_path_factory):
    """The demo's first records, first ALT only (hound_snp scores ``alt_alleles[0]``), with a
    few single-ALT ones swapped so hound_snp's flip applies (one of them an indel)."""
    header, records = vcf_lines(snp_sim["variants"])
    chosen, swapped = [], {"snv": 0, "insertion": 0}
    for record in records[:N_RECORDS]:
        fields = record.split("\t")
        multi_allelic = "," in fields[4]
        fields[4] = fields[4].split(",")[0]
        kind = {True: "snv", False: "insertion"}.get(len(fields[3]) == len(fields[4]))
        if len(fields[4]) < len(fields[3]):
            kind = None  # a swapped deletion's REF still matches the genome: no flip
        wanted = {"snv": FLIPPED - 1, "insertion": 1}
        if kind and not multi_allelic and swapped[kind] < wanted[kind]:
            fields[3], fields[4] = fields[4], fields[3]
            swapped[kind] += 1
        chosen.append("\t".join(fields))
    assert sum(swapped.values()) == FLIPPED
    return write_vcf(tmp_path_factory.mktemp("hound") / "hound.vcf", header, chosen)


CASES = {
    # hound_snp's own defaults, every stat
    "defaults": dict(cluster_pct=0.0, rc=False, shifts=(0,)),
    "rc_shifts": dict(cluster_pct=0.0, rc=True, shifts=(-1, 0, 2)),
    "clusters_rc_shifts": dict(cluster_pct=0.1, rc=True, shifts=(-2, 1)),
    "stitch": dict(cluster_pct=0.0, rc=True, shifts=(0, 1), indel_stitch=True),
    "clusters_stitch_unscale": dict(cluster_pct=0.1, rc=False, shifts=(0,), indel_stitch=True,
                                    unscale=True),
    "no_untransform": dict(cluster_pct=0.0, rc=True, shifts=(0,), untransform=False),
    # hound_snp -u, as the published Borzoi models are scored
    "untransform_old": dict(cluster_pct=0.1, rc=True, shifts=(0, 1), untransform_old=True),
    "untransform_old_unscale": dict(cluster_pct=0.0, rc=False, shifts=(0,), untransform_old=True,
                                    unscale=True),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_every_stat_equals_hound_snp(snp_sim, hound_vcf, case):
    settings = CASES[case]
    options = ScoreOptions(
        device="cpu",
        compile="off",
        stats=HOUND_STATS,
        alts="first",
        ref_mismatch="flip",
        batch_size=7,
        **settings,
    )
    inputs = (hound_vcf, snp_sim["genome"], snp_sim["model"], snp_sim["targets"])
    _assert_scores_equal_hound(inputs, options, settings)


def test_a_targets_table_without_strand_pairs_scores_as_hound_snp_scores_it(
    snp_sim, hound_vcf, tmp_path
):
    """No strand_pair column: hound_snp neither swaps partners in the rc ensemble nor sums
    strands, so every track is scored on its own."""
    table = pd.read_csv(snp_sim["targets"], sep="\t", index_col=0)
    targets = tmp_path / "unstranded.tsv"
    table.drop(columns="strand_pair").to_csv(targets, sep="\t")
    settings = dict(cluster_pct=0.0, rc=True, shifts=(0, 1))
    options = ScoreOptions(
        device="cpu", compile="off", stats=HOUND_STATS, alts="first", ref_mismatch="flip",
        batch_size=7, **settings,
    )  # fmt: skip
    inputs = (hound_vcf, snp_sim["genome"], snp_sim["model"], targets)
    prepared = _assert_scores_equal_hound(inputs, options, settings)
    assert prepared.score_track_ids == list(table.identifier)  # all four, strands apart


def test_chromosomes_named_without_chr_are_named_as_hound_snp_names_them(
    snp_sim, hound_vcf, tmp_path
):
    """hound_snp prefixes ``chr`` to a VCF's ``1``: the genome's ``chr1`` is scored, and the
    ``chr`` column and the IDs made for ``.`` say ``chr1``."""
    header, records = vcf_lines(hound_vcf)
    header = [line.replace("##contig=<ID=chr", "##contig=<ID=") for line in header]
    bare = []
    for number, record in enumerate(records):
        fields = record.removeprefix("chr").split("\t")
        if number % 3 == 0:
            fields[2] = "."
        bare.append("\t".join(fields))
    vcf = write_vcf(tmp_path / "bare.vcf", header, bare)
    settings = dict(cluster_pct=0.1, rc=True, shifts=(0,))
    options = ScoreOptions(
        device="cpu", compile="off", stats=HOUND_STATS, alts="first", ref_mismatch="flip",
        batch_size=7, **settings,
    )  # fmt: skip
    inputs = (vcf, snp_sim["genome"], snp_sim["model"], snp_sim["targets"])
    prepared = _assert_scores_equal_hound(inputs, options, settings)
    variants = [prepared.variants[i] for i in prepared.rows]
    assert {v.chrom[:3] for v in variants} == {"chr"}
    assert variants[0].row_id == f"{variants[0].chrom}:{variants[0].pos}"


def test_the_borzoi_tutorials_vcf_form_scores_as_hound_snp_scores_it(snp_sim, hound_vcf, tmp_path):
    """The Borzoi tutorials give hound_snp VCFs of seven columns under only ##fileformat (no
    #CHROM line, which htslib needs) or with no header at all: kennel reads them as hound_snp
    does and gives its scores."""
    _, records = vcf_lines(hound_vcf)
    seven = ["\t".join(record.split("\t")[:7]) for record in records]
    settings = dict(cluster_pct=0.1, rc=True, shifts=(0,))
    options = ScoreOptions(
        device="cpu", compile="off", stats=HOUND_STATS, alts="first", ref_mismatch="flip",
        batch_size=7, **settings,
    )  # fmt: skip
    for header in (["##fileformat=VCFv4.2"], []):
        vcf = write_vcf(tmp_path / f"tutorial{len(header)}.vcf", header, seven)
        inputs = (vcf, snp_sim["genome"], snp_sim["model"], snp_sim["targets"])
        _assert_scores_equal_hound(inputs, options, settings)


def _assert_scores_equal_hound(inputs, options, settings):
    prepared = prepare(*inputs, options)
    kennel = score_in_memory(prepared)
    model, geometry = bundle_model(inputs[2])
    reference = hound_scores(
        *inputs[:2], model, inputs[3], stats=HOUND_STATS, **geometry, **settings
    )

    variants = [prepared.variants[i] for i in prepared.rows]
    assert [v.row_id for v in variants] == list(reference["snp"])
    assert [v.chrom for v in variants] == list(reference["chr"])
    assert [v.flipped for v in variants] == list(reference["flipped"])
    assert sum(v.flipped for v in variants) == FLIPPED
    assert prepared.score_track_ids == list(reference["target_ids"])
    indels = np.array([len(v.ref) != len(v.alt) for v in variants])
    assert indels.any() and (~indels).any()
    for stat in HOUND_STATS:
        _assert_within_a_unit(kennel[stat], reference[stat], stat)
    return prepared


def _assert_within_a_unit(kennel: np.ndarray, reference: np.ndarray, stat: str) -> None:
    ours, theirs = kennel.astype(np.float64), reference.astype(np.float64)
    assert ours.shape == theirs.shape, stat
    finite = np.isfinite(theirs)
    assert np.array_equal(finite, np.isfinite(ours)), stat  # logJS: NaN where 0/0
    # the same float32 predictions through float64 maths to float16: bit for bit here;
    # a unit in the last float16 place allowed for a CPU whose batched kernels round
    # differently from single-row ones (small scores get no looser bound than large ones)
    larger = np.maximum(np.abs(ours[finite]), np.abs(theirs[finite]))
    unit = np.spacing(larger.astype(np.float16)).astype(np.float64)
    difference = np.abs(ours[finite] - theirs[finite])
    assert (difference <= unit).all(), (stat, float((difference / unit).max()))


@pytest.mark.parametrize("stitch", [False, True])
def test_each_alt_of_a_lone_multi_allelic_record_scores_as_hound_snp_scores_it_first(
    snp_sim, tmp_path, stitch
):
    """hound_snp scores a record's first ALT, alone in its window: a deletion then shifts the
    reference. With every ALT scored (``alts: all``) the record is still alone, so each of
    its deletions must get what hound_snp gives it as the first ALT, with its own shifted
    reference rows (two sizes here)."""
    import pysam

    header, _ = vcf_lines(snp_sim["variants"])
    with pysam.FastaFile(str(snp_sim["genome"])) as fasta:
        chrom, pos = fasta.references[1], 12_345
        ref = fasta.fetch(chrom, pos - 1, pos + 2).upper()
    alts = [ref[0], ref[:2]]  # deletions of two bases and of one
    settings = dict(cluster_pct=0.1, rc=True, shifts=(0, 1), indel_stitch=stitch)
    options = ScoreOptions(
        device="cpu", compile="off", stats=HOUND_STATS, alts="all", batch_size=5, **settings
    )
    record = f"{chrom}\t{pos}\tmulti\t{ref}\t{{}}\t.\t.\t."
    both = write_vcf(tmp_path / "both.vcf", header, [record.format(",".join(alts))])
    inputs = (snp_sim["genome"], snp_sim["model"], snp_sim["targets"])
    kennel = score_in_memory(prepare(both, *inputs, options))
    model, geometry = bundle_model(snp_sim["model"])
    for row, alt in enumerate(alts):
        alone = write_vcf(tmp_path / f"alone{row}.vcf", header, [record.format(alt)])
        reference = hound_scores(
            alone, inputs[0], model, inputs[2], stats=HOUND_STATS, **geometry, **settings
        )
        for stat in HOUND_STATS:
            _assert_within_a_unit(kennel[stat][row : row + 1], reference[stat], stat)


def test_the_comparison_can_fail(snp_sim, hound_vcf):
    """kennel's previous choices (0-based midpoint, alt-side deletion shifts, scale divided)
    each move scores beyond the tolerance above; here: dividing by the targets' scale."""
    inputs = (hound_vcf, snp_sim["genome"], snp_sim["model"], snp_sim["targets"])
    options = ScoreOptions(
        device="cpu", compile="off", stats=("SUM",), alts="first", ref_mismatch="flip",
        cluster_pct=0.0, rc=False, unscale=True,
    )  # fmt: skip
    kennel = score_in_memory(prepare(*inputs, options))["SUM"].astype(np.float64)
    model, geometry = bundle_model(snp_sim["model"])
    reference = hound_scores(*inputs[:2], model, inputs[3], stats=("SUM",), **geometry)
    assert not np.allclose(kennel, reference["SUM"].astype(np.float64), rtol=2e-3, atol=1e-3)
    unscaled = dataclasses.replace(options, unscale=False)
    kennel = score_in_memory(prepare(*inputs, unscaled))["SUM"].astype(np.float64)
    np.testing.assert_allclose(kennel, reference["SUM"].astype(np.float64), rtol=2e-3, atol=1e-3)

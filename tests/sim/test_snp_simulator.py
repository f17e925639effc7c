"""The SNP-arm simulator and its analytic motif model, checked with independent readers."""

from __future__ import annotations

import gzip
import random

import pandas as pd
import pysam
import pytest
import torch
from kennel.cli import main
from kennel.errors import KennelError
from kennel.models.bundle import build_model, load_bundle
from kennel.models.motif import make_motif_model
from kennel.sim import snp
from kennel.sim.snp import simulate_snp

SEED = 7
OUTPUT_NAMES = {
    "genome.fa",
    "genome.fa.fai",
    "variants.vcf.gz",
    "variants.vcf.gz.tbi",
    "targets.tsv",
    "model.pt",
    "truth.tsv",
}
EFFECTS = {"motif_break", "motif_create", "neutral"}
PAIRED = {"A": "T", "C": "G", "G": "C", "T": "A", "N": "N"}


def reverse_complement(sequence: str) -> str:
    return "".join(PAIRED[base] for base in reversed(sequence))


ONE_HOT_ROWS = {
    "A": [1.0, 0.0, 0.0, 0.0],
    "C": [0.0, 1.0, 0.0, 0.0],
    "G": [0.0, 0.0, 1.0, 0.0],
    "T": [0.0, 0.0, 0.0, 1.0],
    "N": [0.0, 0.0, 0.0, 0.0],
}


def one_hot(sequence: str) -> torch.Tensor:
    return torch.tensor([ONE_HOT_ROWS[base] for base in sequence.upper()])


def window(fasta: pysam.FastaFile, chrom: str, centre: int, seq_len: int) -> str:
    """``seq_len`` bases centred on 0-based ``centre``, padded with N past the chromosome ends."""
    start = centre - seq_len // 2
    length = fasta.get_reference_length(chrom)
    inside = fasta.fetch(chrom, max(0, start), min(length, start + seq_len)).upper()
    return "N" * max(0, -start) + inside + "N" * max(0, start + seq_len - length)


def expected_coverage(sequence: str, hyperparameters: dict) -> torch.Tensor:
    """Plain-loop version of the model: each exact occurrence adds 1 to every base it covers."""
    bin_size, crop = hyperparameters["bin_size"], hyperparameters["crop_bins"]
    tracks = []
    for motif in hyperparameters["motifs"]:
        for pattern in (motif, reverse_complement(motif)):
            per_base = [0] * len(sequence)
            for start in range(len(sequence) - len(pattern) + 1):
                if sequence[start : start + len(pattern)] == pattern:
                    for position in range(start, start + len(pattern)):
                        per_base[position] += 1
            bins = [
                sum(per_base[b * bin_size : (b + 1) * bin_size])
                for b in range(len(sequence) // bin_size)
            ]
            tracks.append(bins[crop : len(bins) - crop])
    return torch.tensor(tracks, dtype=torch.float32).T + hyperparameters["baseline"]


def rc_one_hot(batch: torch.Tensor) -> torch.Tensor:
    return batch.flip(1)[..., [3, 2, 1, 0]]


@pytest.fixture(scope="module")
def simulation(tmp_path_factory):
    return simulate_snp(tmp_path_factory.mktemp("snp"), seed=SEED)


@pytest.fixture(scope="module")
def fasta(simulation):
    with pysam.FastaFile(str(simulation["genome"])) as handle:
        yield handle


@pytest.fixture(scope="module")
def records(simulation):
    with pysam.VariantFile(str(simulation["variants"])) as vcf:
        return [(r.chrom, r.pos, r.id, r.ref, tuple(r.alts), r.start, r.stop) for r in vcf.fetch()]


@pytest.fixture(scope="module")
def truth(simulation):
    return pd.read_csv(simulation["truth"], sep="\t", dtype={"pos": int})


@pytest.fixture(scope="module")
def bundle(simulation):
    return load_bundle(simulation["model"])


@pytest.fixture(scope="module")
def model(bundle, simulation):
    return build_model(bundle, simulation["model"])


def test_writes_every_output_and_nothing_else(simulation):
    assert {path.name for path in simulation.values()} == OUTPUT_NAMES
    directory = simulation["genome"].parent
    assert {path.name for path in directory.iterdir()} == OUTPUT_NAMES


def test_genome_has_named_chromosomes_soft_masking_and_n(fasta):
    assert list(fasta.references) == ["chr1", "chr2", "chr3"]
    assert list(fasta.lengths) == [50_000] * 3
    chromosome = fasta.fetch("chr1")
    assert any(base.islower() for base in chromosome)
    assert "N" * 50 in chromosome
    assert set(chromosome) <= set("ACGTacgtN")


def test_vcf_declares_contigs_with_lengths(simulation, fasta):
    with pysam.VariantFile(str(simulation["variants"])) as vcf:
        contigs = {name: contig.length for name, contig in vcf.header.contigs.items()}
        assert str(vcf.header).startswith("##fileformat=VCFv4.2")
    assert contigs == dict(zip(fasta.references, fasta.lengths, strict=True))


def test_ref_alleles_match_the_genome(records, fasta):
    for chrom, pos, record_id, ref, _alts, start, stop in records:
        assert fasta.fetch(chrom, start, stop).upper() == ref, (record_id, chrom, pos)
        assert start == pos - 1


def test_records_sorted_with_unique_rs_ids(records, fasta):
    order = [(fasta.references.index(chrom), pos) for chrom, pos, *_ in records]
    assert order == sorted(order)
    ids = [record[2] for record in records]
    assert ids == [f"rs{i}" for i in range(1, len(records) + 1)]
    assert len(records) == 300


def test_variant_mix(records, fasta):
    snvs = [r for r in records if len(r[3]) == 1 and all(len(alt) == 1 for alt in r[4])]
    deletions = [r for r in records if len(r[3]) > 1]
    insertions = [r for r in records if any(len(alt) > len(r[3]) for alt in r[4])]
    multiallelic = [r for r in records if len(r[4]) == 2]
    assert len(snvs) > 0.8 * len(records)
    assert len(deletions) >= 3 and len(insertions) >= 3 and len(multiallelic) >= 3
    assert all(len(alts) in (1, 2) for *_, alts, _start, _stop in records)

    near_ends = [r for r in records if r[1] <= 100 or r[1] > fasta.get_reference_length(r[0]) - 100]
    assert len(near_ends) >= 4
    assert ("chr1", 1) in {(r[0], r[1]) for r in near_ends}
    assert ("chr1", 50_000) in {(r[0], r[1]) for r in near_ends}


def test_variants_cluster(records):
    gaps = [b[1] - a[1] for a, b in zip(records, records[1:], strict=False) if a[0] == b[0]]
    close = sum(gap <= 300 for gap in gaps)
    far = sum(gap > 2_000 for gap in gaps)
    assert close > 0.4 * len(gaps)
    assert far >= 10


def test_vcf_is_bgzipped_and_tabix_indexed(simulation, records):
    raw = simulation["variants"].read_bytes()
    assert raw[:2] == b"\x1f\x8b" and raw[12:14] == b"BC"  # gzip member with BGZF extra field
    assert gzip.decompress(raw).startswith(b"##fileformat=VCFv4.2")
    assert simulation["variants_index"].stat().st_size > 0
    chrom, start, stop = "chr2", 10_000, 30_000
    with pysam.TabixFile(str(simulation["variants"])) as tabix:
        fetched = [line.split("\t")[2] for line in tabix.fetch(chrom, start, stop)]
    expected = [r[2] for r in records if r[0] == chrom and r[6] > start and r[5] < stop]
    assert fetched == expected and fetched


def test_truth_covers_every_alt_allele(records, truth):
    assert list(truth.columns) == ["id", "chrom", "pos", "ref", "alt", "effect"]
    alleles = [
        (record_id, chrom, pos, ref, alt)
        for chrom, pos, record_id, ref, alts, _start, _stop in records
        for alt in alts
    ]
    assert list(truth[["id", "chrom", "pos", "ref", "alt"]].itertuples(index=False)) == alleles
    assert set(truth["effect"]) == EFFECTS
    counts = truth["effect"].value_counts()
    assert counts["motif_break"] >= 20 and counts["motif_create"] >= 20


def test_targets_table_pairs_strands(simulation, bundle):
    targets = pd.read_csv(simulation["targets"], sep="\t", index_col=0)
    assert list(targets.columns) == [
        "identifier",
        "file",
        "clip",
        "clip_soft",
        "scale",
        "sum_stat",
        "strand_pair",
        "description",
    ]
    assert list(targets.index) == list(range(len(targets)))
    assert list(targets["identifier"]) == bundle["metadata"]["target_ids"]
    pairs = targets["strand_pair"].tolist()
    assert all(pairs[pairs[i]] == i and pairs[i] != i for i in range(len(pairs)))
    assert list(targets["identifier"].str[-1]) == ["+", "-"] * (len(targets) // 2)
    assert (targets["scale"] > 0).all() and (targets["clip_soft"] < targets["clip"]).all()


def test_bundle_metadata_describes_the_contract(bundle, model):
    metadata = bundle["metadata"]
    assert metadata["kind"] == "sequence_to_coverage"
    assert metadata["layout"] == "length_tracks"
    assert metadata["seq_len"] == 2048 and metadata["bin_size"] == 32
    assert metadata["n_targets"] == len(metadata["target_ids"]) == 4
    assert metadata["strand_pair"] == [1, 0, 3, 2]
    expected_length = metadata["seq_len"] // metadata["bin_size"] - 2 * metadata["crop_bins"]
    output = model(torch.zeros(2, metadata["seq_len"], 4))
    assert output.shape == (2, expected_length, metadata["n_targets"])
    assert (output > 0).all()


def test_model_matches_a_plain_loop(model, bundle, fasta, truth):
    seq_len = bundle["metadata"]["seq_len"]
    breaking = truth[truth["effect"] == "motif_break"].iloc[0]
    sequences = [
        window(fasta, breaking["chrom"], breaking["pos"] - 1, seq_len),
        window(fasta, "chr1", 0, seq_len),  # left half is padding
    ]
    with torch.no_grad():
        for sequence in sequences:
            predicted = model(one_hot(sequence)[None])[0]
            expected = expected_coverage(sequence, bundle["hyperparameters"])
            torch.testing.assert_close(predicted, expected)
    assert expected_coverage(sequences[0], bundle["hyperparameters"]).sum() > 0


def test_snv_coverage_change_follows_the_truth(model, bundle, fasta, records, truth):
    seq_len = bundle["metadata"]["seq_len"]
    effects = dict(zip(zip(truth["id"], truth["alt"], strict=True), truth["effect"], strict=True))
    refs, alts, labels = [], [], []
    for chrom, _pos, record_id, ref, record_alts, start, _stop in records:
        if len(ref) != 1 or any(len(alt) != 1 for alt in record_alts):
            continue
        reference = one_hot(window(fasta, chrom, start, seq_len))
        for alt in record_alts:
            alternate = reference.clone()
            alternate[seq_len // 2] = one_hot(alt)[0]
            refs.append(reference)
            alts.append(alternate)
            labels.append(effects[(record_id, alt)])
    with torch.no_grad():
        change = (model(torch.stack(alts)) - model(torch.stack(refs))).sum(dim=(1, 2))
    by_effect = {
        effect: torch.tensor(
            [c for c, label in zip(change, labels, strict=True) if label == effect]
        )
        for effect in EFFECTS
    }
    assert (by_effect["motif_break"] < 0).all()
    assert (by_effect["motif_create"] > 0).all()
    assert by_effect["motif_break"].abs().min() > by_effect["neutral"].abs().max()
    assert torch.allclose(by_effect["neutral"], torch.zeros(()), atol=1e-4)


def test_model_is_reverse_complement_equivariant(model, bundle, fasta, truth):
    seq_len = bundle["metadata"]["seq_len"]
    strand_pair = bundle["metadata"]["strand_pair"]
    centres = truth[truth["effect"] != "neutral"].head(4)
    batch = torch.stack(
        [
            one_hot(window(fasta, row.chrom, row.pos - 1, seq_len))
            for row in centres.itertuples(index=False)
        ]
    )
    with torch.no_grad():
        forward = model(batch)
        reverse = model(rc_one_hot(batch))
    assert forward[..., :4].sum() > forward.shape[0] * forward.shape[1] * 4 * 0.05
    torch.testing.assert_close(reverse, forward.flip(1)[..., strand_pair], rtol=0, atol=0)


def test_reverse_complement_equivariance_with_inexact_matches():
    model, _ = make_motif_model(256, bin_size=16, crop_bins=3, threshold=3.0)
    generator = random.Random(0)
    sequence = "".join(generator.choice("ACGTN") for _ in range(256))
    sequence = "GGAATTCCA" + sequence[9:120] + "TGACTGAG" + sequence[128:251] + "TGACT"
    batch = one_hot(sequence)[None]
    with torch.no_grad():
        forward = model(batch)
        reverse = model(rc_one_hot(batch))
    torch.testing.assert_close(reverse, forward.flip(1)[..., model.strand_pair])


def test_same_seed_same_files_other_seed_other_files(simulation, tmp_path):
    again = simulate_snp(tmp_path / "again", seed=SEED)
    for key in ("genome", "genome_index", "targets", "truth"):
        assert again[key].read_bytes() == simulation[key].read_bytes(), key
    with (
        pysam.VariantFile(str(simulation["variants"])) as first,
        pysam.VariantFile(str(again["variants"])) as second,
    ):
        assert [str(r) for r in first] == [str(r) for r in second]
    first_weights = load_bundle(simulation["model"])["state_dict"]
    second_weights = load_bundle(again["model"])["state_dict"]
    assert first_weights.keys() == second_weights.keys()
    assert all(torch.equal(first_weights[k], second_weights[k]) for k in first_weights)

    other = simulate_snp(tmp_path / "other", seed=SEED + 1)
    assert other["genome"].read_bytes() != simulation["genome"].read_bytes()
    assert other["truth"].read_bytes() != simulation["truth"].read_bytes()


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ({"n_chromosomes": 0}, "n_chromosomes"),
        ({"chromosome_length": -5}, "chromosome_length"),
        ({"chromosome_length": 500}, "chromosome_length"),
        ({"n_variants": 0}, "n_variants"),
        ({"seq_len": 0}, "seq_len"),
        ({"seq_len": 1000}, "seq_len"),
        ({"n_chromosomes": 1, "chromosome_length": 1_000, "n_variants": 30}, "n_variants"),
        ({"n_chromosomes": 1, "n_variants": 10**6}, "n_variants"),
    ],
)
def test_bad_arguments_raise_one_line_naming_the_argument(tmp_path, arguments, named):
    out_dir = tmp_path / "out"
    with pytest.raises(KennelError, match=named) as raised:
        simulate_snp(out_dir, **arguments)
    assert "\n" not in str(raised.value)
    assert not out_dir.exists()


def test_smallest_genome_holds_exactly_its_capacity(tmp_path):
    paths = simulate_snp(tmp_path, chromosome_length=1_000, n_chromosomes=1, n_variants=29)
    with pysam.VariantFile(str(paths["variants"])) as vcf:
        assert len(list(vcf)) == 29


def test_failure_leaves_no_files(tmp_path, monkeypatch):
    def fail(*_args, **_kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(snp, "write_truth", fail)
    with pytest.raises(RuntimeError, match="disk full"):
        simulate_snp(tmp_path / "out", chromosome_length=2_000, n_variants=20)
    assert list((tmp_path / "out").iterdir()) == []


def test_cli_rejects_bad_argument_without_writing(tmp_path, capsys):
    out_dir = tmp_path / "out"
    status = main(["simulate", "snp", "--out-dir", str(out_dir), "--seq-len", "1000"])
    assert status == 2
    assert "seq_len" in capsys.readouterr().err
    assert not out_dir.exists()


def test_cli_writes_a_small_simulation(tmp_path):
    arguments = ["--chromosomes", "2", "--chromosome-length", "3000", "--variants", "40"]
    assert main(["simulate", "snp", "--out-dir", str(tmp_path), "--seed", "3", *arguments]) == 0
    assert {path.name for path in tmp_path.iterdir()} == OUTPUT_NAMES

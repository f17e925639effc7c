"""`kennel score-snps` on bad inputs: one line naming the file and record, exit 2, no output."""

from __future__ import annotations

import re

import h5py
import numpy as np
import pysam
import pytest
from kennel.cli import main
from kennel.models.bundle import build_model, load_bundle, save_bundle
from kennel.snp.scoring import partial_path
from snp_helpers import vcf_lines, write_vcf


def run_cli(snp_sim, tmp_path, capsys, vcf=None, targets=None, model=None, extra=()):
    out = tmp_path / "out" / "scores.h5"
    arguments = [
        "score-snps",
        "--vcf", str(vcf or snp_sim["variants"]),
        "--genome", str(snp_sim["genome"]),
        "--model", str(model or snp_sim["model"]),
        "--targets", str(targets or snp_sim["targets"]),
        "--out", str(out),
        "--device", "cpu",
        "--no-rc",
        *extra,
    ]  # fmt: skip
    status = main(arguments)
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    return status, errors, out


def small_vcf(snp_sim, tmp_path, change=None, extra_header=(), append=()):
    header, records = vcf_lines(snp_sim["variants"])
    records = records[:6]
    if change is not None:
        records[3] = change(records[3].split("\t"))
    records += list(append)
    header = [*header[:-1], *extra_header, header[-1]]
    return write_vcf(tmp_path / "small.vcf", header, records)


def other_base(snp_sim, fields):
    with pysam.FastaFile(str(snp_sim["genome"])) as fasta:
        base = fasta.fetch(fields[0], int(fields[1]) - 1, int(fields[1])).upper()
    return next(b for b in "ACGT" if b != base)


def mismatched(snp_sim):
    def change(fields):
        wrong = other_base(snp_sim, fields)
        return "\t".join([*fields[:3], wrong, "T" if wrong != "T" else "G", *fields[5:]])

    return change


def targets_with(tmp_path, snp_sim, edit):
    lines = snp_sim["targets"].read_text().splitlines()
    path = tmp_path / "targets.tsv"
    path.write_text("\n".join(edit(lines)) + "\n")
    return path


def drop_column(name):
    def edit(lines):
        column = lines[0].split("\t").index(name)
        return [
            "\t".join(c for i, c in enumerate(line.split("\t")) if i != column) for line in lines
        ]

    return edit


def set_pair(lines):
    cells = lines[2].split("\t")
    cells[7] = "9"
    return [lines[0], lines[1], "\t".join(cells), *lines[3:]]


def tampered_model(snp_sim, tmp_path):
    bundle = load_bundle(snp_sim["model"])
    metadata = {**bundle["metadata"], "target_length": bundle["metadata"]["target_length"] + 2}
    path = tmp_path / "tampered.pt"
    save_bundle(path, build_model(bundle), bundle["hyperparameters"], metadata=metadata)
    return path


CASES = {
    "ref mismatch": (
        lambda sim, tmp: {"vcf": small_vcf(sim, tmp, mismatched(sim))},
        r"small.vcf: record 4 \(chr1:\d+ rs4\): REF [ACGT] does not match the genome",
    ),
    "chromosome absent from the genome": (
        lambda sim, tmp: {
            "vcf": small_vcf(
                sim,
                tmp,
                extra_header=["##contig=<ID=chrX,length=100>"],
                append=["chrX\t20\tx1\tA\tC\t.\t.\t."],
            )
        },
        r"small.vcf: record 7 \(chrX:20 x1\): chromosome chrX is not in the genome",
    ),
    "malformed VCF": (
        lambda sim, tmp: {"vcf": small_vcf(sim, tmp, lambda f: "\t".join(f[:1] + ["4.5"] + f[2:]))},
        r"small.vcf: record 4 \(after chr1:\d+ rs3\): malformed VCF record",
    ),
    "targets without description": (
        lambda sim, tmp: {"targets": targets_with(tmp, sim, drop_column("description"))},
        r"targets.tsv: missing column\(s\) description",
    ),
    "strand_pair out of range": (
        lambda sim, tmp: {"targets": targets_with(tmp, sim, set_pair)},
        r"targets.tsv: row 2 \(motif0-\): strand_pair 9 is out of range",
    ),
    "model output length not as promised": (
        lambda sim, tmp: {"model": tampered_model(sim, tmp)},
        r"tampered.pt: model output length 48 bins does not match the expected 50",
    ),
    "seq_len not a multiple of the stride": (
        lambda sim, tmp: {"extra": ("--seq-len", "2000")},
        r"model.pt: seq_len=2000 is not a positive multiple of the model's stride \(32\)",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_one_line_exit_2_and_no_output(snp_sim, tmp_path, capsys, case):
    make, expected = CASES[case]
    status, errors, out = run_cli(snp_sim, tmp_path, capsys, **make(snp_sim, tmp_path))
    assert status == 2
    assert len(errors) == 1, errors
    assert errors[0].startswith("kennel score-snps: error: ")
    assert re.search(expected, errors[0]), errors[0]
    assert not out.exists() and not partial_path(out).exists()


def test_ref_mismatch_can_be_skipped_and_counted(snp_sim, tmp_path, capsys):
    vcf = small_vcf(snp_sim, tmp_path, mismatched(snp_sim))
    status, errors, out = run_cli(
        snp_sim, tmp_path, capsys, vcf=vcf, extra=("--ref-mismatch", "skip")
    )
    assert status == 0 and not errors
    with h5py.File(out, "r") as handle:
        assert handle.attrs["ref_mismatch_skipped"] == 1
        assert "rs4" not in [s.decode() for s in handle["snp"][:]]
        assert handle["SUM"].shape == (len(vcf_lines(vcf)[1]) - 1 + _extra_alts(vcf), 2)


def _extra_alts(vcf) -> int:
    with pysam.VariantFile(str(vcf)) as handle:
        return sum(len(record.alts) - 1 for record in handle)


def test_an_unwritable_output_is_one_line(snp_sim, tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    arguments = [
        "score-snps",
        "--vcf", str(snp_sim["variants"]),
        "--genome", str(snp_sim["genome"]),
        "--model", str(snp_sim["model"]),
        "--targets", str(snp_sim["targets"]),
        "--out", str(blocker / "scores.h5"),
    ]  # fmt: skip
    assert main(arguments) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    expected = f"kennel score-snps: error: {blocker / 'scores.h5'}: cannot write here ("
    assert len(errors) == 1 and errors[0].startswith(expected)


def _snv_record(records: list[str]) -> int:
    """Index of the first single-ALT substitution among ``records``."""
    for index, record in enumerate(records):
        fields = record.split("\t")
        if len(fields[3]) == 1 and len(fields[4]) == 1:
            return index
    raise AssertionError("no single-ALT substitution")


def test_flip_scores_a_swapped_record_with_the_opposite_sign(snp_sim, tmp_path, capsys):
    """hound_snp's flip: a record whose ALT, not REF, is the genome's base is scored with the
    alleles swapped back, so its signed scores are the original record's negated."""
    header, records = vcf_lines(snp_sim["variants"])
    records = records[:12]
    index = _snv_record(records)
    fields = records[index].split("\t")
    swapped = "\t".join([*fields[:3], fields[4], fields[3], *fields[5:]])
    original = write_vcf(tmp_path / "original.vcf", header, records)
    flipped = write_vcf(
        tmp_path / "flipped.vcf", header, [*records[:index], swapped, *records[index + 1 :]]
    )
    stats = ("--stats", "SUM,logSUM,D1,SAX")
    status, errors, first = run_cli(snp_sim, tmp_path / "a", capsys, vcf=original, extra=stats)
    assert status == 0 and not errors
    status, errors, _ = run_cli(snp_sim, tmp_path / "b", capsys, vcf=flipped, extra=stats)
    assert status == 2 and "set ref_mismatch to 'skip' or 'flip'" in errors[0]
    status, errors, second = run_cli(
        snp_sim, tmp_path / "c", capsys, vcf=flipped, extra=(*stats, "--ref-mismatch", "flip")
    )
    assert status == 0 and not errors
    with h5py.File(first, "r") as a, h5py.File(second, "r") as b:
        row = [s.decode() for s in a["snp"][:]].index(fields[2])
        assert b["flipped"][:].tolist() == [r == row for r in range(len(b["flipped"]))]
        assert b.attrs["flipped"] == 1
        assert b["ref_allele"][row].decode() == fields[4]  # the VCF's alleles, as written
        assert b["alt_allele"][row].decode() == fields[3]
        for stat in ("SUM", "logSUM", "SAX"):
            assert np.array_equal(b[stat][row], -a[stat][row]), stat
        assert np.array_equal(b["D1"][row], a["D1"][row])
        others = [r for r in range(len(a["snp"])) if r != row]
        assert np.array_equal(b["SUM"][others], a["SUM"][others])


def test_flip_still_refuses_a_record_matching_neither_allele(snp_sim, tmp_path, capsys):
    vcf = small_vcf(snp_sim, tmp_path, mismatched(snp_sim))
    status, errors, out = run_cli(
        snp_sim, tmp_path, capsys, vcf=vcf, extra=("--ref-mismatch", "flip")
    )
    assert status == 2 and len(errors) == 1
    assert "does not match the genome" in errors[0] and "neither does ALT" in errors[0]
    assert not out.exists()


def test_alts_first_scores_one_row_per_record_with_unique_ids(snp_sim, tmp_path, capsys):
    _, records = vcf_lines(snp_sim["variants"])
    status, errors, every = run_cli(snp_sim, tmp_path / "all", capsys, extra=("--stats", "SUM"))
    assert status == 0 and not errors
    status, errors, first = run_cli(
        snp_sim, tmp_path / "first", capsys, extra=("--stats", "SUM", "--alts", "first")
    )
    assert status == 0 and not errors
    with h5py.File(every, "r") as a, h5py.File(first, "r") as b:
        ids_all = [s.decode() for s in a["snp"][:]]
        assert len(set(ids_all)) == len(ids_all) > len(records)  # multi-allelic records exist
        assert sorted(set(a["allele"][:].tolist())) != [1]
        ids_first = [s.decode() for s in b["snp"][:]]
        assert ids_first == [record.split("\t")[2] for record in records]
        assert set(b["allele"][:].tolist()) == {1}
        # at cluster_pct 0.1 the windows are the same: the first ALTs score as they did
        keep = a["allele"][:] == 1
        assert np.array_equal(b["SUM"][:], a["SUM"][:][keep])


def test_threads_reach_torch_with_one_cpu_for_the_prefetch(snp_sim, tmp_path, monkeypatch, caplog):
    import logging

    import torch
    from kennel.models.motif import MotifCoverage

    threads = set()
    forward = MotifCoverage.forward

    def recording(self, one_hot):
        threads.add(torch.get_num_threads())
        return forward(self, one_hot)

    monkeypatch.setattr(MotifCoverage, "forward", recording)
    arguments = [
        "score-snps",
        "--vcf", str(snp_sim["variants"]),
        "--genome", str(snp_sim["genome"]),
        "--model", str(snp_sim["model"]),
        "--targets", str(snp_sim["targets"]),
        "--out", str(tmp_path / "scores.h5"),
        "--device", "cpu",
        "--threads", "3",
    ]  # fmt: skip
    before = torch.get_num_threads()
    try:
        with caplog.at_level(logging.INFO, logger="kennel.trna.threads"):
            assert main(arguments) == 0
    finally:
        torch.set_num_threads(before)
    assert threads == {2}  # one CPU stays with the prefetch thread
    assert "score-snps: 3 CPUs:" in caplog.text and "2 torch" in caplog.text

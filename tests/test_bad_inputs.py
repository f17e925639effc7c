"""The bad-input matrix: every row of the README's table, run as a user would meet it.

Each case builds one bad input and runs the `kennel` verb (or Snakemake, for config) that meets
it; the run must fail with exit code 2 (Snakemake: non-zero), print exactly one error line that
contains the README's message, and leave no output behind. The README table and this module are
checked against each other, so neither can drift.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pysam
import pytest
import torch
import yaml
from kennel.cli import main

from tests.conftest import REPO

README = REPO / "README.md"


def readme_rows() -> dict[str, tuple[str, str]]:
    """{case id: (what is wrong, message)} from the README's bad-input table."""
    text = README.read_text()
    section = text[text.index("## Bad inputs") :]
    section = section[: section.index("\n## ", 3)] if "\n## " in section[3:] else section
    rows = {}
    for line in section.splitlines():
        match = re.match(r"\|\s*`([a-z0-9_]+)`\s*\|(.*?)\|\s*`(.+?)`\s*\|\s*$", line)
        if match:
            rows[match.group(1)] = (match.group(2).strip(), match.group(3))
    return rows


# --- building blocks ---------------------------------------------------------------------------


def _rewrite_bam(source, target, edit=lambda records: records, header_edit=None):
    with pysam.AlignmentFile(str(source), check_sq=False) as bam:
        header = bam.header.to_dict()
        records = [r.to_dict() for r in bam.fetch(until_eof=True)]
    if header_edit:
        header_edit(header)
    new_header = pysam.AlignmentHeader.from_dict(header)
    with pysam.AlignmentFile(str(target), "wb", header=new_header) as out:
        for record in edit(records):
            out.write(pysam.AlignedSegment.from_dict(record, new_header))
    return target  # unindexed: the shard step reads the input front to back


def _drop_tag(tag):
    def edit(records):
        for record in records:
            record["tags"] = [t for t in record["tags"] if not t.startswith(f"{tag}:")]
        return records

    return edit


class Case:
    """One bad input: ``argv`` for `kennel`, and the directory that must stay empty."""

    def __init__(self, argv, out_dir):
        self.argv, self.out_dir = [str(a) for a in argv], out_dir


def shard_argv(sim, out, bam=None, pod5=None, reference=None):
    return [
        "shard",
        "--bam", bam or sim["s1.bam"],
        "--pod5", pod5 or sim["s1.pod5"],
        "--reference", reference or sim["reference"],
        "--shard-pod5", out / "0.pod5", "--shard-bam", out / "0.bam",
        "--passthrough", out / "p.bam", "--counts", out / "c.tsv",
    ]  # fmt: skip


def extract_argv(sim, sharded, out, kmer_table=None, reference=None, pod5=None):
    return [
        "extract",
        "--bam", sharded.bams[0],
        "--pod5", pod5 or sharded.pod5s[0],
        "--reference", reference or sim["reference"],
        "--kmer-table", kmer_table or sim["kmer_table"],
        "--output", out / "f.h5",
    ]  # fmt: skip


def classify_argv(sharded, features, bundle, out, extra=()):
    return [
        "classify",
        "--bam", sharded.bams[0],
        "--bundle", bundle,
        "--features", features,
        "--output", out / "c.bam", "--predictions", out / "c.tsv", "--stats", out / "c.json",
        *extra,
    ]  # fmt: skip


def _edited_bundle(bundle, path, edit):
    content = torch.load(bundle, weights_only=True)
    edit(content)
    torch.save(content, path)
    return path


class _Payload:
    def __reduce__(self):
        return (print, ("pwned",))


# --- the cases ---------------------------------------------------------------------------------


def _leech_case(case_id, tmp, sim, sharded, out) -> Case:
    """A broken leech model, met where a user meets it: bundle-info, or extract for its
    inputs (the leech fixtures beside the checkout; CI has them)."""
    from tests.conftest import SHARED_DATA, require_real_data

    models = SHARED_DATA.parent / "leech" / "models"
    require_real_data(
        models / "fx_tcndwell_multiclass.pt", models / "fx_tcndwell_checkpoint/model_best.pt"
    )
    tcn = models / "fx_tcndwell_multiclass.pt"
    if case_id == "leech_truncated":
        path = tmp / "truncated.pt"
        path.write_bytes(tcn.read_bytes()[: tcn.stat().st_size // 2])
        return Case(["bundle-info", path], out)
    if case_id == "leech_checkpoint_no_config":
        path = tmp / "checkpoint"
        path.mkdir()
        (path / "model_best.pt").write_bytes(
            (models / "fx_tcndwell_checkpoint/model_best.pt").read_bytes()
        )
        return Case(["bundle-info", path], out)
    edits = {
        "leech_architecture": lambda b: b["config"].update(model_name="ResNetX"),
        "leech_pickle": lambda b: b["metadata"].update(note=_Payload()),
        "leech_config_unsupported": lambda b: b["config"].update(seq_encoding="kmer_embedding"),
    }
    path = _edited_bundle(tcn, tmp / f"{case_id}.pt", edits[case_id])
    if case_id == "leech_config_unsupported":
        table = SHARED_DATA / "rna004_9mer_levels_v1.txt.gz"  # the one the config names
        return Case([*extract_argv(sim, sharded, out, kmer_table=table), "--bundle", path], out)
    return Case(["bundle-info", path], out)


def build_case(case_id, tmp, sim, sharded, features, bundle) -> Case:  # noqa: C901
    out = tmp / "out"
    if case_id == "pod5_truncated":
        bad = tmp / "truncated.pod5"
        bad.write_bytes(sim["s1.pod5"].read_bytes()[:4000])
        return Case(shard_argv(sim, out, pod5=bad), out)
    if case_id == "pod5_not_pod5":
        bad = tmp / "text.pod5"
        bad.write_text("this is not a POD5 file\n")
        return Case(shard_argv(sim, out, pod5=bad), out)
    if case_id == "bam_no_moves":
        bad = _rewrite_bam(sim["s1.bam"], tmp / "nomv.bam", _drop_tag("mv"))
        return Case(shard_argv(sim, out, bam=bad), out)
    if case_id == "bam_unsorted":
        bad = _rewrite_bam(
            sim["s1.bam"], tmp / "unsorted.bam",
            header_edit=lambda h: h["HD"].update(SO="unsorted"),
        )  # fmt: skip
        return Case(shard_argv(sim, out, bam=bad), out)
    if case_id == "bam_not_bam":
        bad = tmp / "empty.bam"
        bad.write_bytes(b"")
        return Case(shard_argv(sim, out, bam=bad), out)
    if case_id == "reference_contig_mismatch":
        reference = tmp / "other.fa"
        reference.write_text(">chrOther\nACGTACGTACGTACGT\n")
        pysam.faidx(str(reference))
        return Case(shard_argv(sim, out, reference=reference), out)
    if case_id == "reference_missing":
        return Case(shard_argv(sim, out, reference=tmp / "absent.fa"), out)
    if case_id == "kmer_malformed_line":
        table = tmp / "levels.tsv"
        table.write_text("AAAAA\t0.1\nAAAAC 0.2\n")
        return Case(extract_argv(sim, sharded, out, kmer_table=table), out)
    if case_id == "kmer_wrong_k":
        table = tmp / "levels.tsv"
        lines = sim["kmer_table"].read_text().splitlines()
        table.write_text("\n".join([*lines[:5], "ACGTAC\t0.3", *lines[5:]]) + "\n")
        return Case(extract_argv(sim, sharded, out, kmer_table=table), out)
    if case_id == "kmer_incomplete":
        table = tmp / "levels.tsv"
        table.write_text("\n".join(sim["kmer_table"].read_text().splitlines()[:100]) + "\n")
        return Case(extract_argv(sim, sharded, out, kmer_table=table), out)
    if case_id == "bundle_other_spec":
        path = _edited_bundle(
            bundle, tmp / "spec.pt",
            lambda b: b["metadata"].update(feature_spec=b["metadata"]["feature_spec"].replace(
                '"chunk_length": 512', '"chunk_length": 256')),
        )  # fmt: skip
        return Case(classify_argv(sharded, features[0], path, out), out)
    if case_id == "bundle_pickle":
        path = tmp / "evil.pt"
        torch.save({"format": "kennel-bundle", "payload": _Payload()}, path)
        return Case(classify_argv(sharded, features[0], path, out), out)
    if case_id == "bundle_architecture":
        path = _edited_bundle(bundle, tmp / "arch.pt", lambda b: b.update(architecture="resnet"))
        return Case(classify_argv(sharded, features[0], path, out), out)
    if case_id == "bundle_version":
        path = _edited_bundle(bundle, tmp / "v.pt", lambda b: b.update(format_version=99))
        return Case(classify_argv(sharded, features[0], path, out), out)
    if case_id.startswith("leech_"):
        return _leech_case(case_id, tmp, sim, sharded, out)
    if case_id == "bundle_weights_mismatch":

        def shrink(content):
            content["hyperparameters"]["channels"] = 8

        path = _edited_bundle(bundle, tmp / "w.pt", shrink)
        return Case(classify_argv(sharded, features[0], path, out), out)
    if case_id == "features_truncated":
        bad = tmp / "truncated.h5"
        bad.write_bytes(features[0].read_bytes()[:30_000])
        return Case(classify_argv(sharded, bad, bundle, out), out)
    if case_id == "features_of_another_shard":
        return Case(classify_argv(sharded, features[1], bundle, out), out)
    if case_id == "device_cuda_absent":
        if torch.cuda.is_available():
            pytest.skip("CUDA is present here, so device: cuda is valid")
        return Case(classify_argv(sharded, features[0], bundle, out, ["--device", "cuda"]), out)
    if case_id == "output_dir_is_a_file":
        blocker = tmp / "blocker"
        blocker.write_text("a file where a directory should be")
        return Case(classify_argv(sharded, features[0], bundle, blocker / "sub"), out)
    raise KeyError(case_id)


KENNEL_CASES = [
    "pod5_truncated", "pod5_not_pod5", "bam_no_moves", "bam_unsorted",
    "bam_not_bam", "reference_contig_mismatch", "reference_missing", "kmer_malformed_line",
    "kmer_wrong_k", "kmer_incomplete", "bundle_other_spec", "bundle_pickle",
    "bundle_architecture", "bundle_version", "bundle_weights_mismatch", "features_truncated",
    "features_of_another_shard", "device_cuda_absent", "output_dir_is_a_file",
    "leech_architecture", "leech_pickle", "leech_truncated", "leech_checkpoint_no_config",
    "leech_config_unsupported",
]  # fmt: skip

CONFIG_CASES = {
    "config_unknown_key": {"trna": {"shard_count": 3}},
    "config_wrong_type": {"trna": {"shards": "two"}},
    "config_missing_input": {"trna": {"kmer_table": "data/absent.tsv"}},
}

SHEET_CASES = {
    "sheet_duplicate_id": lambda text: text + text.splitlines()[1] + "\n",
    "sheet_unknown_arm": lambda text: text.replace("\ttrna\t", "\trna\t", 1),
    "sheet_keras_model_without_params": lambda text: text.replace(
        "resources/demo/snp/model.pt", "models/borzoi.h5"
    ),
    # the test makes run/pod5_pass/, empty
    "sheet_pod5_empty_directory": lambda text: text.replace(
        "resources/demo/trna/demo_a.pod5", "run/pod5_pass", 1
    ),
}


def test_readme_table_and_cases_agree():
    covered = set(KENNEL_CASES) | set(CONFIG_CASES) | set(SHEET_CASES) | set(SNP_CASES)
    assert set(readme_rows()) == covered
    assert len(covered) >= 20


@pytest.mark.parametrize("case_id", KENNEL_CASES)
def test_kennel_bad_input(case_id, tmp_path, trna_sim, sharded, features, bundle, capsys):
    message = readme_rows()[case_id][1]
    case = build_case(case_id, tmp_path, trna_sim, sharded, features, bundle)
    assert main(case.argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], captured.err
    assert "pwned" not in captured.out
    assert not case.out_dir.exists() or not any(case.out_dir.iterdir())


def _snakemake_dry_run(directory, *arguments):
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", *arguments],
        cwd=directory, capture_output=True, text=True,
    )  # fmt: skip
    output = result.stdout + result.stderr
    return result.returncode, [line for line in output.splitlines() if line.startswith("config")]


@pytest.mark.parametrize("case_id", sorted(CONFIG_CASES))
def test_config_bad_input(case_id, workflow_copy):
    (workflow_copy / "override.yaml").write_text(yaml.safe_dump(CONFIG_CASES[case_id]))
    code, lines = _snakemake_dry_run(workflow_copy, "--configfile", "override.yaml")
    assert code != 0 and len(lines) == 1 and readme_rows()[case_id][1] in lines[0], lines
    assert not (workflow_copy / "results").exists()


@pytest.mark.parametrize("case_id", sorted(SHEET_CASES))
def test_sample_sheet_bad_input(case_id, workflow_copy):
    sheet = workflow_copy / "config/samples.tsv"
    sheet.write_text(SHEET_CASES[case_id](sheet.read_text()))
    (workflow_copy / "run" / "pod5_pass").mkdir(parents=True)
    code, lines = _snakemake_dry_run(workflow_copy)
    assert code != 0 and len(lines) == 1 and readme_rows()[case_id][1] in lines[0], lines


# --- SNP arm ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def snp_sim(tmp_path_factory):
    from kennel.sim.snp import simulate_snp

    return simulate_snp(tmp_path_factory.mktemp("snp_bad"), seed=2, n_variants=40)


def _vcf_text(sim):
    import gzip

    with gzip.open(sim["variants"], "rt") as handle:
        lines = handle.read().splitlines()
    header = [line for line in lines if line.startswith("#")]
    records = [line for line in lines if not line.startswith("#")][:6]
    return header, records


def _write_vcf(path, header, records):
    path.write_text("\n".join([*header, *records]) + "\n")
    return path


def _ref_mismatch(sim, tmp):
    header, records = _vcf_text(sim)
    fields = records[2].split("\t")
    with pysam.FastaFile(str(sim["genome"])) as fasta:
        base = fasta.fetch(fields[0], int(fields[1]) - 1, int(fields[1])).upper()
    wrong = next(b for b in "ACGT" if b != base)
    fields[3], fields[4] = wrong, next(b for b in "ACGT" if b != wrong)
    records[2] = "\t".join(fields)
    return {"--vcf": _write_vcf(tmp / "mismatch.vcf", header, records)}


def _unknown_chromosome(sim, tmp):
    header, records = _vcf_text(sim)
    header = [*header[:-1], "##contig=<ID=chrZ,length=1000>", header[-1]]
    return {
        "--vcf": _write_vcf(tmp / "chrz.vcf", header, [*records, "chrZ\t20\tz1\tA\tC\t.\t.\t."])
    }


def _malformed_vcf(sim, tmp):
    header, records = _vcf_text(sim)
    fields = records[3].split("\t")
    records[3] = "\t".join([fields[0], "not-a-position", *fields[2:]])
    return {"--vcf": _write_vcf(tmp / "malformed.vcf", header, records)}


def _targets_edit(sim, tmp, edit):
    lines = sim["targets"].read_text().splitlines()
    path = tmp / "targets.tsv"
    path.write_text("\n".join(edit([line.split("\t") for line in lines])) + "\n")
    return {"--targets": path}


def _targets_missing_column(sim, tmp):
    def drop(rows):
        column = rows[0].index("description")
        return ["\t".join(c for i, c in enumerate(row) if i != column) for row in rows]

    return _targets_edit(sim, tmp, drop)


def _targets_pair_out_of_range(sim, tmp):
    def bad_pair(rows):
        rows[2][rows[0].index("strand_pair")] = "9"
        return ["\t".join(row) for row in rows]

    return _targets_edit(sim, tmp, bad_pair)


HOUND_RUN = REPO / "tests/snp/hound_snp_run"  # a baskerville Keras model and its params


def _keras(params=None):
    def case(sim, tmp):
        arguments = {"--model": HOUND_RUN / "model.h5", "--targets": HOUND_RUN / "targets.txt"}
        if params is not None:
            model = json.loads((HOUND_RUN / "params.json").read_text())
            params(model["model"])
            (tmp / "params.json").write_text(json.dumps(model))
            arguments["--params"] = tmp / "params.json"
        return arguments

    return case


SNP_CASES = {
    "vcf_ref_mismatch": _ref_mismatch,
    "vcf_unknown_chromosome": _unknown_chromosome,
    "vcf_malformed": _malformed_vcf,
    "targets_missing_column": _targets_missing_column,
    "targets_strand_pair_out_of_range": _targets_pair_out_of_range,
    "snp_seq_len_not_stride_multiple": lambda sim, tmp: {"--seq-len": "2000"},
    "keras_model_without_params": _keras(),
    "keras_params_unsupported_block": _keras(
        lambda m: m["trunk"].insert(1, {"name": "dilated_residual", "filters": 8})
    ),
    "keras_params_other_model": _keras(lambda m: m["trunk"][2].update(repeat=3)),
}


@pytest.mark.parametrize("case_id", sorted(SNP_CASES))
def test_snp_bad_input(case_id, snp_sim, tmp_path, capsys):
    arguments = {
        "--vcf": snp_sim["variants"],
        "--genome": snp_sim["genome"],
        "--model": snp_sim["model"],
        "--targets": snp_sim["targets"],
        "--out": tmp_path / "out" / "scores.h5",
        "--device": "cpu",
        **SNP_CASES[case_id](snp_sim, tmp_path),
    }
    argv = ["score-snps", *(str(x) for pair in arguments.items() for x in pair)]
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and readme_rows()[case_id][1] in lines[0], lines
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())

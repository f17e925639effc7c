"""kennel refine-check: every refine mode on the same sampled reads, against the move table."""

from __future__ import annotations

import numpy as np
from kennel.cli import main
from kennel.trna.extract import spec_for
from kennel.trna.refine_check import sample_reads


def test_each_mode_on_the_same_reads(trna_sim, sharded, tmp_path, capsys):
    out = tmp_path / "refine.tsv"
    arguments = [
        "refine-check",
        "--bam", str(sharded.bams[0]),
        "--pod5", str(sharded.pod5s[0]),
        "--reference", str(trna_sim["reference"]),
        "--kmer-table", str(trna_sim["kmer_table"]),
        "--reads", "60",
        "--out", str(out),
    ]  # fmt: skip
    assert main(arguments) == 0
    printed = capsys.readouterr().out
    assert printed == out.read_text()
    header, *lines = printed.splitlines()
    rows = {line.split("\t")[0]: dict(zip(header.split("\t"), line.split("\t"), strict=True))
            for line in lines}  # fmt: skip
    assert list(rows) == ["off", "checked", "always"]
    assert {row["reads"] for row in rows.values()} == {rows["off"]["reads"]}
    assert 0 < int(rows["off"]["reads"]) <= 60
    off, checked, always = rows["off"], rows["checked"], rows["always"]
    assert off["maps_kept"] == "n/a" and float(off["mean_boundary_shift"]) == 0
    assert off["boundaries_within_2"] == "100.0%" and float(off["dwell_r"]) == 1
    # the preset's maps, kept unchecked, collapse bases; checked keeps (almost) none of them
    assert always["maps_kept"] == "100.0%" and float(always["dwell_r"]) < 0.5
    assert float(checked["maps_kept"].rstrip("%")) < 10 and float(checked["dwell_r"]) > 0.9
    assert all(float(row["ms_per_read"]) > 0 for row in rows.values())


def test_the_sample_is_random_but_seeded_and_in_bam_order(trna_sim, sharded):
    spec = spec_for(trna_sim["kmer_table"])
    first = sample_reads(sharded.bams[0], trna_sim["reference"], spec, 20, seed=3)
    again = sample_reads(sharded.bams[0], trna_sim["reference"], spec, 20, seed=3)
    other = sample_reads(sharded.bams[0], trna_sim["reference"], spec, 20, seed=4)
    every = sample_reads(sharded.bams[0], trna_sim["reference"], spec, 10**6, seed=3)
    ids = [read.read_id for read in first]
    assert ids == [read.read_id for read in again] != [read.read_id for read in other]
    order = {read.read_id: i for i, read in enumerate(every)}
    assert len(ids) == 20 and np.all(np.diff([order[i] for i in ids]) > 0)

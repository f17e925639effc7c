"""Writes leech predict's TSV output (``-o *.tsv``: one row per read it scored, the first
chunk's class probabilities, call, confidence and margin) for the fixture's TCNDwell, as
fx.tcndwell.<name>.tsv: with every option at its default (``default``), with
``--min-margin 60 --abstain-on-junction-indel`` on make_motif_indels.py's reads, some with an
indel at the motif (``abstain``: the call column is the one option the TSV applies), and with a
seeded random charging-level head added to the bundle and ``--copy-tags qs,ns,XX``
(``charging_copy_tags``: the predicted_cl column and a column per tag; no record has XX).
Needs leech 0.16.0 (Python 3.12, not in CI):

    /opt/leech-venv/bin/python tests/leech/leech_made/make_tsv.py [shared/leech]
"""

import subprocess
import sys
import tempfile
from pathlib import Path

from leech_runs import charging_head_bundle, fixture_files

# name: (the bundle with a charging head?, make_motif_indels.py's reads?, leech predict options)
RUNS = {
    "default": (False, False, []),
    "abstain": (False, True, ["--min-margin", "60", "--abstain-on-junction-indel"]),
    "charging_copy_tags": (True, False, ["--copy-tags", "qs,ns,XX"]),
}


def main(shared: Path, here: Path) -> None:
    fixture = shared / "models" / "fx_tcndwell_multiclass.pt"
    pod5, bam, reference = (str(path) for path in fixture_files(shared))
    with tempfile.TemporaryDirectory() as work:
        charging = charging_head_bundle(fixture, Path(work) / "charging.pt")
        for name, (with_head, indels, options) in RUNS.items():
            bundle = charging if with_head else fixture
            reads = str(here / "fx_motif_indels.bam") if indels else bam
            subprocess.run(
                ["leech", "predict", "--bundle", str(bundle), "--all", "--pod5", pod5, "--bam",
                 reads, "--reference-fasta", reference, "--device", "cpu", "--no-compile",
                 *options, "-o", str(here / f"fx.tcndwell.{name}.tsv")],
                check=True,
            )  # fmt: skip


if __name__ == "__main__":
    here = Path(__file__).resolve().parent
    shared = Path(sys.argv[1]) if len(sys.argv) > 1 else here.parents[3] / "shared" / "leech"
    main(shared.resolve(), here)

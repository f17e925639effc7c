"""Writes fx_basecall.pt: a small TCNDwell leech 0.16.0 trained on basecall-anchored chunks of the
shared fixture reads (leech data prepare --anchor basecall: motifs found in the reference and
mapped to the read through the CIGAR, chunks cut from the basecalled sequence and the whole
read's signal, not the aligned reference's), the tags leech predict gives with it
(fx.basecall.default.bam), and in basecall_inputs.npz, for every chunk leech fed the model
(../shared/leech/scripts/dump_chunks.py), its read and focus base and a SHA-256 of its signal,
sequence and feature tensors: on the fixture reads (``fx.``), and on those make_softclips.py cut
short (fx_softclipped.bam) as it is (``softclipped.``) and with recover_softclip_signal set
(``softclipped.recovered.``). Training is seeded: a rerun writes the same tags and
digests. Needs leech 0.16.0 (Python 3.12, not in CI):

    /opt/leech-venv/bin/python tests/leech/leech_made/make_basecall.py [shared/leech]
"""

import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from leech_runs import fixture_files, input_digests, predict, train_small_tcndwell


def main(shared: Path, here: Path) -> None:
    pod5, bam, reference = fixture_files(shared)
    bundle = here / "fx_basecall.pt"
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        train_small_tcndwell(shared, work, bundle, "--anchor", "basecall")
        predict(bundle, pod5, bam, reference, here / "fx.basecall.default.bam")
        arrays = input_digests(bundle, pod5, bam, reference, "fx")
        # with recover_softclip_signal set, on the reads cut short (make_softclips.py): nothing
        # to recover under this anchor, but leech predict extracts on its Python path
        recovered = work / "recovered.pt"
        settings = torch.load(bundle, weights_only=True)
        settings["config"]["recover_softclip_signal"] = True
        torch.save(settings, recovered)
        softclipped = here / "fx_softclipped.bam"
        for name, path in (("softclipped", bundle), ("softclipped.recovered", recovered)):
            arrays.update(input_digests(path, pod5, softclipped, reference, name))
    np.savez_compressed(here / "basecall_inputs.npz", **arrays)


if __name__ == "__main__":
    here = Path(__file__).resolve().parent
    shared = Path(sys.argv[1]) if len(sys.argv) > 1 else here.parents[3] / "shared" / "leech"
    main(shared.resolve(), here)

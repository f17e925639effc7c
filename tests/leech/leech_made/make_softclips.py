"""Writes fx_softclipped.bam (+ .bai): the shared fixture reads with the alignment of some of them
cut short near the motif, the rest of the read soft-clipped, and what leech predict gives for it
with the fixture's TCNDwell bundle as it is (fx.softclipped.plain.bam: windows zero-padded past
the alignment) and with its config's recover_softclip_signal set (leech data prepare
--recover-softclip-signal: the padding filled with the soft-clipped signal):
fx.softclipped.recovered.bam, and softclipped_inputs.npz, a SHA-256 of each signal, sequence
and feature tensor leech fed the model (../shared/leech/scripts/dump_chunks.py) with and without
it (with it, leech predict extracts on its Python path).

In the fixture every window lies inside its alignment, so the setting changes nothing there.
Of the reads whose first CCAGGC lies inside one aligned block, every second one is cut: in
turn, the aligned bases from 4 to 24 bases past the motif's end onwards become soft clip (the
3' end, in the window's right half), or those up to 4 to 24 bases before its start (the 5'
end, left half: the record's position moves). Query lengths do not change, so the sequence,
move table and signal still agree. Needs leech 0.16.0 (Python 3.12, not in CI):

    /opt/leech-venv/bin/python tests/leech/leech_made/make_softclips.py [shared/leech]
"""

import sys
import tempfile
from pathlib import Path

import numpy as np
import pysam
import torch
from leech_runs import input_digests, predict

MOTIF = "CCAGGC"
M, S = 0, 4  # the CIGAR's aligned block and soft clip
QUERY = (0, 1, 4, 7, 8)  # operations that consume the query
REFERENCE = (0, 2, 3, 7, 8)  # and the reference


def in_match(cigar: list[tuple[int, int]], start: int, cut: int) -> bool:
    """Whether reference position ``cut`` lies inside an aligned block past its first base (a
    cut there leaves aligned blocks on both sides, no indel beside the clip)."""
    position = start
    for op, length in cigar:
        if op in (M, 7, 8) and position < cut < position + length:
            return True
        position += length if op in REFERENCE else 0
    return False


def clip_after(cigar: list[tuple[int, int]], start: int, cut: int) -> list[tuple[int, int]]:
    """``cigar`` (alignment starting at ``start``) with every aligned base from reference
    position ``cut`` on soft-clipped (``cut`` inside an aligned block)."""
    kept, clipped, position = [], 0, start
    for op, length in cigar:
        if position >= cut:
            clipped += length if op in QUERY else 0
        elif op in REFERENCE and position + length > cut:
            kept.append((op, cut - position))
            clipped += position + length - cut
            position = cut
        else:
            kept.append((op, length))
            position += length if op in REFERENCE else 0
    return [*kept, (S, clipped)]


def clip_before(cigar: list[tuple[int, int]], start: int, cut: int) -> list[tuple[int, int]]:
    """``cigar`` with every aligned base before reference position ``cut`` soft-clipped (the
    alignment then starts at ``cut``, inside an aligned block)."""
    clipped, position = 0, start
    for index, (op, length) in enumerate(cigar):
        if op in REFERENCE and position + length > cut:
            inside = cut - position
            return [(S, clipped + inside), (op, length - inside), *cigar[index + 1 :]]
        clipped += length if op in QUERY else 0
        position += length if op in REFERENCE else 0
    raise ValueError("cut past the alignment")


def main(shared: Path, here: Path) -> None:
    references = {
        record.name: record.sequence.upper()
        for record in pysam.FastxFile(str(shared / "data" / "reference.fa"))
    }
    output = here / "fx_softclipped.bam"
    eligible = edits = 0
    source = pysam.AlignmentFile(str(shared / "data" / "fx.bam"))
    with source, pysam.AlignmentFile(str(output), "wb", template=source) as sink:
        records = []
        for record in source.fetch(until_eof=True):
            if not record.is_unmapped and not record.is_secondary and record.cigartuples:
                start, end = record.reference_start, record.reference_end
                motif = references[record.reference_name].find(MOTIF, start, end)
                if motif >= 0:
                    eligible += 1
                if motif >= 0 and eligible % 2 == 0:
                    margin = 4 + 5 * (edits // 2 % 5)
                    cigar = record.cigartuples
                    after, before = motif + len(MOTIF) + margin, motif - margin
                    if edits % 2 == 0 and in_match(cigar, start, after):
                        record.cigartuples = clip_after(cigar, start, after)
                        edits += 1
                    elif edits % 2 == 1 and in_match(cigar, start, before):
                        record.cigartuples = clip_before(cigar, start, before)
                        record.reference_start = before
                        edits += 1
            records.append(record)
        # a moved start can break the coordinate order
        records.sort(key=lambda r: (r.is_unmapped, r.reference_id, r.reference_start))
        for record in records:
            sink.write(record)
    pysam.index(str(output))
    print(f"{edits} of {eligible} reads with the motif cut")

    digests = {}
    pod5, reference = shared / "data" / "fx.pod5", shared / "data" / "reference.fa"
    with tempfile.TemporaryDirectory() as work:
        recovered = Path(work) / "recovered.pt"
        plain = shared / "models" / "fx_tcndwell_multiclass.pt"
        bundle = torch.load(plain, weights_only=True)
        bundle["config"]["recover_softclip_signal"] = True
        torch.save(bundle, recovered)
        for name, path in (("plain", plain), ("recovered", recovered)):
            predict(path, pod5, output, reference, here / f"fx.softclipped.{name}.bam")
            digests.update(input_digests(path, pod5, output, reference, name))
    np.savez_compressed(here / "softclipped_inputs.npz", **digests)


if __name__ == "__main__":
    here = Path(__file__).resolve().parent
    shared = Path(sys.argv[1]) if len(sys.argv) > 1 else here.parents[3] / "shared" / "leech"
    main(shared.resolve(), here)

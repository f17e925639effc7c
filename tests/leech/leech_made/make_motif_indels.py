"""Writes fx_motif_indels.bam (+ .bai): the shared fixture reads with indels placed in and around
the motif of some of them, and leech predict's tags for it with the fixture's TCNDwell bundle as
it is (fx.motif_indels.lenient.bam) and with its config's skip_motif_indels set
(fx.motif_indels.strict.bam: leech data prepare --skip-motif-indels, recorded by model train).

The fixture's alignments have no indel in any motif, so neither setting would be tested on them.
Each edit keeps the record's query and reference lengths (an insertion is paired with a
deletion, or the reverse), so the sequence, move table and signal still agree. Of the reads
whose first CCAGGC lies inside one aligned block, every second one gets the next edit of:
an insertion followed by a deletion inside the motif; a deletion inside it and an insertion
past its end; an insertion inside it and a deletion past its end; an insertion just before its
first base (leech counts it as inside); a deletion just after its last base (leech's walk
stops before it). Needs leech 0.16.0 (Python 3.12, not in CI):

    /opt/leech-venv/bin/python tests/leech/leech_made/make_motif_indels.py [shared/leech]
"""

import sys
import tempfile
from pathlib import Path

import pysam
import torch
from leech_runs import predict

MOTIF = "CCAGGC"
M, I, D = 0, 1, 2  # noqa: E741 - the CIGAR letters


def edited(block: int, at: int, kind: int) -> list[tuple[int, int]] | None:
    """An aligned block of ``block`` bases whose motif starts ``at`` bases in, as the edit
    ``kind`` rewrites it (None when the block is too short around the motif)."""
    end = at + len(MOTIF)  # first base past the motif
    after = len(MOTIF) + 2  # bases from the motif's start to an indel placed past it
    layouts = {
        0: [(M, at + 2), (I, 1), (D, 1), (M, block - at - 3)],
        1: [(M, at + 2), (D, 1), (M, after - 3), (I, 1), (M, block - at - after)],
        2: [(M, at + 2), (I, 1), (M, after - 3), (D, 1), (M, block - at - after)],
        3: [(M, at), (I, 1), (M, after - 1), (D, 1), (M, block - at - after)],
        4: [(M, end), (D, 1), (M, 2), (I, 1), (M, block - end - 3)],
    }
    cigar = layouts[kind]
    return cigar if at >= 1 and all(length > 0 for _, length in cigar) else None


def main(shared: Path, here: Path) -> None:
    references = {
        name: sequence
        for name, sequence in (
            (record.name, record.sequence.upper())
            for record in pysam.FastxFile(str(shared / "data" / "reference.fa"))
        )
    }
    output = here / "fx_motif_indels.bam"
    eligible = edits = 0
    source = pysam.AlignmentFile(str(shared / "data" / "fx.bam"))
    with source, pysam.AlignmentFile(str(output), "wb", template=source) as sink:
        for record in source.fetch(until_eof=True):
            if not record.is_unmapped and not record.is_secondary and record.cigartuples:
                reference = references[record.reference_name]
                motif = reference.find(MOTIF, record.reference_start, record.reference_end)
                ref = record.reference_start
                for index, (op, length) in enumerate(record.cigartuples):
                    if op == M and ref <= motif and motif + len(MOTIF) <= ref + length:
                        eligible += 1
                        cigar = edited(length, motif - ref, edits % 5)
                        if motif >= 0 and eligible % 2 == 0 and cigar is not None:
                            tuples = record.cigartuples
                            record.cigartuples = tuples[:index] + cigar + tuples[index + 1 :]
                            edits += 1
                        break
                    if op in (M, D, 3, 7, 8):
                        ref += length
            sink.write(record)
    pysam.index(str(output))
    print(f"{edits} of {eligible} reads with the motif in one aligned block edited")

    with tempfile.TemporaryDirectory() as work:
        strict = Path(work) / "strict.pt"
        bundle = torch.load(shared / "models" / "fx_tcndwell_multiclass.pt", weights_only=True)
        bundle["config"]["skip_motif_indels"] = True
        torch.save(bundle, strict)
        plain = shared / "models" / "fx_tcndwell_multiclass.pt"
        for name, path in (("lenient", plain), ("strict", strict)):
            predict(path, shared / "data" / "fx.pod5", output, shared / "data" / "reference.fa",
                    here / f"fx.motif_indels.{name}.bam")  # fmt: skip


if __name__ == "__main__":
    here = Path(__file__).resolve().parent
    shared = Path(sys.argv[1]) if len(sys.argv) > 1 else here.parents[3] / "shared" / "leech"
    main(shared.resolve(), here)

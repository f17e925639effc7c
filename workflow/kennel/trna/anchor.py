"""Where a tRNA read is anchored: the 3' CCA / adapter junction.

Aminoacylation sits on the terminal A of CCA, so the signal that tells classes apart lies within
a few bases of the junction between the tRNA body and the ligated 3' adapter. The anchor is that
A, found in each reference by its motif (CCA followed by the adapter's first bases).
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_MOTIF = "CCAGGCTTC"
DEFAULT_MOTIF_ANCHOR = 2  # the A of CCA within DEFAULT_MOTIF


@dataclass(frozen=True)
class AnchorMotif:
    motif: str = DEFAULT_MOTIF
    anchor_index: int = DEFAULT_MOTIF_ANCHOR

    def __post_init__(self):
        if not 0 <= self.anchor_index < len(self.motif):
            raise ValueError(f"anchor index {self.anchor_index} lies outside motif {self.motif!r}")

    def find(self, reference: str) -> int | None:
        """0-based reference position of the anchor base, or None when the motif is absent.

        The last occurrence wins: the junction is at the 3' end, and a tRNA body may contain
        the motif's first bases by chance.
        """
        at = reference.upper().rfind(self.motif.upper())
        return None if at < 0 else at + self.anchor_index

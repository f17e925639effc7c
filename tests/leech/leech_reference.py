"""Where leech 0.16.0's reference material lives (shared/leech beside the checkout)."""

from __future__ import annotations

import contextlib
import gzip
import sys
from pathlib import Path

import numpy as np
import pysam
import pytest
import torch

from tests.conftest import unavailable

LEECH_SHARED = Path(__file__).parents[2] / ".." / "shared" / "leech"
MODELS = LEECH_SHARED / "models"
TCN_BUNDLE = MODELS / "fx_tcndwell_multiclass.pt"
TCN_CHECKPOINT = MODELS / "fx_tcndwell_checkpoint"
LSTM_BUNDLE = MODELS / "fx_convlstmdwell_multiclass.pt"
PAIR_BUNDLE = MODELS / "fx_gly_phe_pairwise.pt"
INPUT_BAM = LEECH_SHARED / "data" / "fx.bam"
PREDICTIONS = {
    name: LEECH_SHARED / "predictions" / f"fx.{name}.bam"
    for name in (
        "tcndwell.default",
        "tcndwell.raw",
        "tcndwell.minconf150_minmargin60",
        "tcndwell.minmargin60_abstain_junction",
        "tcndwell_checkpoint.default",
        "convlstmdwell.default",
        "gly_phe_pair.default",
        "gly_phe_pair.all",
    )
}
# the fixture TCNDwell's config with leech's other normalisations (leech data prepare
# --signal-norm), as leech_made/make_signal_norms.py set them for leech predict
OTHER_NORMALISATIONS = (
    {"signal_norm": "zscore"},
    {"signal_norm": "quantile"},
    {"signal_norm": "pa_scaling", "pa_mean": 90.0, "pa_stdev": 20.0},
)
# leech's legacy feature-window keys, as make_legacy_windows.py sets them in fx_tcndwell_wide.pt's
# config in place of feature_start/feature_end, and the window leech predict read from each
LEGACY_WINDOWS = {
    "sides": ({"feature_left": 9, "feature_right": 5}, (-9, 5)),
    "margins": ({"dwell_margin_left": 1, "dwell_margin_right": 3}, (-6, 8)),
}
LEECH_TAGS = ("aa", "ac", "am", "ji", "jm", "pn", "pp", "pc", "MP", "ML")
DUMPS = {
    "tcndwell": LEECH_SHARED / "dumps" / "fx.tcndwell.chunks.npz",
    "convlstmdwell": LEECH_SHARED / "dumps" / "fx.convlstmdwell.chunks.npz",
}


def require_leech_shared() -> Path:
    """shared/leech, or skip here / fail in CI when it is missing."""
    needed = [
        TCN_BUNDLE,
        TCN_CHECKPOINT / "model_best.pt",
        LSTM_BUNDLE,
        PAIR_BUNDLE,
        *DUMPS.values(),
        *PREDICTIONS.values(),
        INPUT_BAM,
        TCN_CHECKPOINT / "config.json",
    ]
    if not LEECH_SHARED.is_dir():
        unavailable(
            f"leech reference material not found at {LEECH_SHARED.resolve()}", "CI has ../shared"
        )
    missing = [str(p) for p in needed if not p.exists()]
    if missing:
        unavailable(f"leech reference files missing: {', '.join(missing)}", "CI has ../shared")
    return LEECH_SHARED


def as_inputs(dump, index=slice(None)) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A dump's chunk inputs as the tensors leech fed its model (sequence one-hot as float)."""
    return (
        torch.from_numpy(dump["signal"][index]),
        torch.from_numpy(dump["sequence"][index].astype(np.float32)),
        torch.from_numpy(dump["features"][index]),
    )


@contextlib.contextmanager
def one_torch_thread():
    """One intra-op thread: on the shared 2-core machine several threads per process thrash
    (a 2-chunk forward took 5 s instead of 0.3 s while another test run was going)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def one_vs_all_bundle(path: Path) -> Path:
    """The fixture's Gly_Phe network bundled as leech bundles one-vs-all models (a binary
    network per class against the rest)."""
    bundle = torch.load(PAIR_BUNDLE, weights_only=True)
    bundle["metadata"].update(comparison_type="one_vs_all", pairs=["Gly_notGly"])
    bundle["models"] = {"Gly_notGly": bundle["models"]["Gly_Phe"]}
    torch.save(bundle, path)
    return path


def assert_tags_equal_leech(merged: Path, expected: str | Path, raw: bool = False) -> None:
    """kennel's merged BAM of the fixture reads against `leech predict`'s output BAM
    ``expected`` (a name under predictions/, or a path), record by record: every input record
    is there, each record leech wrote carries exactly leech's tags (``raw``: floats within
    float32 rounding, see README: Running leech models), and the others carry none."""
    with pysam.AlignmentFile(str(merged)) as bam:
        kennel = {(r.query_name, r.flag, r.reference_start): r for r in bam.fetch(until_eof=True)}
    with pysam.AlignmentFile(str(INPUT_BAM)) as bam:
        assert len(kennel) == sum(1 for _ in bam.fetch(until_eof=True))  # every input record
    seen = set()
    with pysam.AlignmentFile(str(LEECH_SHARED / "predictions" / expected)) as bam:
        for record in bam.fetch(until_eof=True):
            key = (record.query_name, record.flag, record.reference_start)
            seen.add(key)
            ours = kennel[key].get_tags(with_value_type=True)
            theirs = record.get_tags(with_value_type=True)
            if raw:
                assert [(n, t) for n, _, t in ours] == [(n, t) for n, _, t in theirs], key
                for (name, mine, _), (_, leech, _) in zip(ours, theirs, strict=True):
                    if name in ("ac", "am", "pp", "pc"):
                        assert mine == pytest.approx(leech, abs=2e-6), (key, name)
                    else:
                        assert mine == leech, (key, name)
            else:
                assert ours == theirs, key
    for key, record in kennel.items():
        if key not in seen:  # records leech does not write stay, untagged
            assert not any(record.has_tag(tag) for tag in LEECH_TAGS), key


def wide_window_bundle(source: Path, path: Path) -> Path:
    """``source`` as if trained on bases -7..+7 (leech data prepare --feature-start -7
    --feature-end 7, dwell_offset 0)."""
    bundle = torch.load(source, map_location="cpu", weights_only=True)
    bundle["config"].update(feature_start=-7, feature_end=7, dwell_offset=0)
    torch.save(bundle, path)
    return path


def legacy_window_bundle(source: Path, name: str, path: Path) -> Path:
    """``source`` with its feature window recorded in the legacy keys of ``LEGACY_WINDOWS[name]``
    (make_legacy_windows.py's edit)."""
    bundle = torch.load(source, map_location="cpu", weights_only=True)
    del bundle["config"]["feature_start"], bundle["config"]["feature_end"]
    bundle["config"].update(LEGACY_WINDOWS[name][0])
    torch.save(bundle, path)
    return path


def one_output_multiclass_bundle(path: Path) -> Path:
    """The fixture's Gly_Phe network as leech model bundle --comparison-type multiclass
    writes one model (bundling.py: metadata num_classes and label_map, entry under 'model')."""
    bundle = torch.load(PAIR_BUNDLE, map_location="cpu", weights_only=True)
    entry = bundle["models"]["Gly_Phe"]
    metadata = {
        key: value
        for key, value in bundle["metadata"].items()
        if key not in ("pairs", "num_models")
    }
    metadata.update(comparison_type="multiclass", num_classes=1, label_map={"Gly": 0, "Phe": 1})
    torch.save(
        {
            "metadata": metadata,
            "config": bundle["config"],
            "model": {"state_dict": entry["state_dict"]},
        },
        path,
    )
    return path


LEECH_MADE = Path(__file__).parent / "leech_made"


def charging_head_bundle(source: Path, path: Path) -> Path:
    """``source`` with the charging-level head leech_made/make_tsv.py added (its helper)."""
    sys.path.insert(0, str(LEECH_MADE))
    try:
        from leech_runs import charging_head_bundle as add_head
    finally:
        sys.path.remove(str(LEECH_MADE))
    return add_head(source, path)


# the table's columns that hold floats leech formats with 6 decimals: equal to float32 rounding
# (the tags' tolerance) plus the last printed digit's
TABLE_FLOATS = ("prob_", "confidence", "margin", "predicted_cl")


def assert_table_equals_leech(ours: Path, expected: Path) -> None:
    """kennel's leech table against leech predict's TSV: the same header, the same reads in
    the same order, every column equal (the float ones within 3e-6)."""
    opener = gzip.open if str(ours).endswith(".gz") else open
    with opener(ours, "rt") as handle:
        mine = [line.rstrip("\n").split("\t") for line in handle]
    theirs = [line.split("\t") for line in Path(expected).read_text().splitlines()]
    assert mine[0] == theirs[0], (mine[0], theirs[0])
    assert [row[0] for row in mine] == [row[0] for row in theirs]
    floats = [i for i, name in enumerate(theirs[0]) if name.startswith(TABLE_FLOATS)]
    for got, want in zip(mine[1:], theirs[1:], strict=True):
        assert len(got) == len(want), got[0]
        for i, (a, b) in enumerate(zip(got, want, strict=True)):
            if i in floats and a and b:
                assert abs(float(a) - float(b)) <= 3e-6, (got[0], theirs[0][i], a, b)
            else:
                assert a == b, (got[0], theirs[0][i], a, b)

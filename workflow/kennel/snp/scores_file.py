"""``scores.h5``: hound_snp's layout plus kennel's, resumable from a ``.partial`` file."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path

import h5py
import numpy as np

from kennel import __version__
from kennel.snp.prepare import Prepared
from kennel.snp.stat_names import PROFILE_STATS
from kennel.snp.stats import quantile_grid, score_quantiles

logger = logging.getLogger(__name__)
SCORES_FORMAT = "kennel-snp-scores"
SCORES_FORMAT_VERSION = 2

# ---------------------------------------------------------------------------------------------
# scores.h5


def partial_path(out: str | os.PathLike) -> Path:
    """Where a run keeps its committed progress until it finishes."""
    out = Path(out)
    return out.with_name(out.name + ".partial")


def _file_identity(path: Path) -> dict:
    """Cheap identity of a (possibly huge) file: name, size, and a hash of its ends."""
    if path.is_dir():
        return {
            entry.name: _file_identity(entry) for entry in sorted(path.iterdir()) if entry.is_file()
        }
    digest = hashlib.sha256()
    size = path.stat().st_size
    with open(path, "rb") as handle:
        digest.update(handle.read(1 << 20))
        if size > 2 << 20:
            handle.seek(-(1 << 20), os.SEEK_END)
            digest.update(handle.read(1 << 20))
    return {"name": path.name, "size": size, "sha256_ends": digest.hexdigest()}


def fingerprint_of(prepared: Prepared) -> str:
    """Everything that determines the scores; a partial file is resumed only when it matches."""
    digest = hashlib.sha256()
    for variant, kept in zip(prepared.variants, prepared.keep, strict=True):
        digest.update(repr((variant, bool(kept))).encode())
    fai = prepared.genome.with_name(prepared.genome.name + ".fai")
    description = {
        "format_version": SCORES_FORMAT_VERSION,
        "variants": digest.hexdigest(),
        "options": _jsonable(prepared.options.scoring_fields()),
        "seq_len": prepared.model.seq_len,
        "models": [_file_identity(model.path) for model in prepared.models],
        "targets": hashlib.sha256(prepared.targets.path.read_bytes()).hexdigest(),
        "genome": _file_identity(prepared.genome),
        "genome_index": _file_identity(fai) if fai.is_file() else None,
    }
    if prepared.model.params:  # a Keras model's architecture (the key is absent otherwise, so
        # partial files of other models keep their fingerprint)
        description["params"] = _file_identity(prepared.model.params)
    return hashlib.sha256(json.dumps(description, sort_keys=True).encode()).hexdigest()


def _jsonable(value):
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, dict):
        return {key: _jsonable(item) for key, item in value.items()}
    return value


def _strings(values: Sequence[str]) -> np.ndarray:
    return np.array([value.encode() for value in values], dtype=bytes if values else "S1")


def create_scores_file(
    path: Path, prepared: Prepared, fingerprint: str, shapes: dict[str, tuple[int, ...]]
) -> h5py.File:
    """hound_snp's layout (``snp``, ``chr``, ``pos``, ``ref_allele``, ``alt_allele`` as in the
    VCF, ``target_ids``, ``target_labels``, one float16 dataset per stat), plus ``allele`` (which
    ALT of the record) and ``flipped``; with several models and ``per_model``, each stat's
    per-model scores in ``per_model/{stat}``, (models, variants, tracks)."""
    rows = prepared.rows
    variants = [prepared.variants[i] for i in rows]
    options = prepared.options
    handle = h5py.File(path, "w")
    handle.create_dataset("snp", data=_strings([v.row_id for v in variants]))
    handle.create_dataset("chr", data=_strings([v.chrom for v in variants]))
    handle.create_dataset("pos", data=np.array([v.pos for v in variants], dtype=np.uint32))
    handle.create_dataset("ref_allele", data=_strings([v.ref for v in variants]))
    handle.create_dataset("alt_allele", data=_strings([v.alt for v in variants]))
    handle.create_dataset("allele", data=np.array([v.allele for v in variants], dtype=np.uint16))
    handle.create_dataset("flipped", data=np.array([v.flipped for v in variants], dtype=bool))
    handle.create_dataset("target_ids", data=_strings(prepared.score_track_ids))
    handle.create_dataset("target_labels", data=_strings(prepared.score_track_labels))
    for stat in options.stats:
        shape = shapes[stat]
        # a profile stat is written a variant at a time; chunks hold one variant's
        chunks = (1, *shape) if len(shape) > 1 and rows else None
        handle.create_dataset(stat, shape=(len(rows), *shape), dtype=np.float16, chunks=chunks)
    n_models = len(prepared.models)
    if options.per_model and n_models > 1:
        for stat in options.stats:
            handle.create_dataset(
                f"per_model/{stat}", shape=(n_models, len(rows), *shapes[stat]), dtype=np.float16
            )
    handle.attrs.update(
        {
            "format": SCORES_FORMAT,
            "format_version": SCORES_FORMAT_VERSION,
            "kennel_version": __version__,
            "status": "partial",
            "fingerprint": fingerprint,
            "clusters_total": len(prepared.clusters),
            "clusters_done": 0,
            "rows_done": 0,
            "stats": json.dumps(list(options.stats)),
            "options": json.dumps(_jsonable(options.scoring_fields()), sort_keys=True),
            "seq_len": prepared.model.seq_len,
            "ref_mismatch_skipped": int((~prepared.keep).sum()),
            "unscored_alleles": prepared.unscored_alleles,
            "flipped": int(sum(v.flipped for v in variants)),
            "model": json.dumps([str(model.path) for model in prepared.models]),
            "params": str(prepared.model.params or ""),
            "models": n_models,
        }
    )
    handle.flush()
    return handle


def open_partial(
    path: Path, prepared: Prepared, fingerprint: str, shapes: dict[str, tuple[int, ...]]
) -> tuple[h5py.File | None, int]:
    """Resume a matching partial file; returns it and the clusters done, or (None, 0) where
    there is none to resume (the caller creates the file when it first has scores for it, so
    a job killed before that leaves no file behind)."""
    if path.exists():
        try:
            handle = h5py.File(path, "r+")
        except OSError as error:
            logger.warning("%s: unreadable (%s); starting over", path, error)
        else:
            attrs = handle.attrs
            if attrs.get("fingerprint") == fingerprint and attrs.get("status") == "partial":
                done = int(attrs["clusters_done"])
                logger.info(
                    "%s: resuming after cluster %d of %d", path, done, len(prepared.clusters)
                )
                return handle, done
            handle.close()
            logger.warning("%s: left by a run with other inputs or options; starting over", path)
    return None, 0


def write_quantiles(handle: h5py.File, stats: Sequence[str]) -> None:
    """The quantile grid and each stat's per-track quantiles (``{stat}_pct``; none for the
    REF/ALT profiles, as hound_snp)."""
    stats = [stat for stat in stats if stat not in PROFILE_STATS]
    grid = quantile_grid()
    for name in ["percentiles", *(f"{stat}_pct" for stat in stats)]:
        if name in handle:
            del handle[name]
    handle.create_dataset("percentiles", data=grid)
    for stat in stats:
        handle.create_dataset(f"{stat}_pct", data=score_quantiles(handle[stat], grid))

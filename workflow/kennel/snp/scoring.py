"""Score variants with a sequence-to-coverage model: VCF slice -> ``scores.h5``.

The pipeline keeps the model busy:

- a prefetch thread fetches each cluster's window and one-hot codes it and every alternate
  allele one cluster ahead of the model; alternate windows are spliced row by row as batches
  are made, so memory does not grow with the cluster;
- model inputs (sequence x shift x strand) stream into batches of one fixed size, padded with
  zeros at the end, so a compiled model compiles once; clusters share batches;
- predictions are ensembled, untransformed and reduced to scores on the device, and only the
  scores (variants x tracks) come back to the host;
- the CUDA cache is never emptied between clusters (the caching allocator already retries an
  allocation after freeing its cache); on a real out-of-memory error the batch is run again in
  halves, and the rest of the job keeps the smaller size, with identical results (the policy
  classify uses too: :class:`kennel.feed.BatchRunner`);
- every completed cluster is committed to a ``.partial`` file next to the output, so a killed
  job resumes after its last committed cluster; the finished file is renamed into place.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import h5py
import numpy as np
import torch

from kennel.errors import KennelError
from kennel.io.atomic import atomic_output
from kennel.progress import Progress
from kennel.snp.engine import ClusterScores, Engine
from kennel.snp.options import DEFAULT_STATS, ScoreOptions, ScoreReport
from kennel.snp.prepare import Prepared, prepare, score_shapes
from kennel.snp.scores_file import (
    SCORES_FORMAT,
    create_scores_file,
    fingerprint_of,
    open_partial,
    partial_path,
    write_quantiles,
)
from kennel.snp.stats import to_float16

# what callers use: the entry points, and the option and file names they need with them
__all__ = [
    "DEFAULT_STATS",
    "SCORES_FORMAT",
    "Prepared",
    "ScoreOptions",
    "ScoreReport",
    "partial_path",
    "prepare",
    "score_in_memory",
    "score_snps",
]

logger = logging.getLogger(__name__)
_LOG_EVERY_SECONDS = 30.0


def score_snps(
    vcf: str | os.PathLike,
    genome: str | os.PathLike,
    model: str | os.PathLike | Sequence[str | os.PathLike],
    targets: str | os.PathLike | None,
    out: str | os.PathLike,
    options: ScoreOptions | None = None,
    progress: Callable[[int, int], None] | None = None,
    commit_seconds: float = 5.0,
    params: str | os.PathLike | None = None,
) -> ScoreReport:
    """Score every variant of ``vcf`` into ``out`` (``scores.h5``), resuming a killed run.

    Completed clusters are committed to the ``.partial`` file at most every ``commit_seconds``
    (0: after every cluster), and ``progress(clusters_done, clusters_total)`` is called after
    each commit; a rerun resumes after the last committed cluster.
    """
    began = time.perf_counter()
    out = Path(out)
    prepared = prepare(vcf, genome, model, targets, options or ScoreOptions(), params=params)
    options = prepared.options
    fingerprint = fingerprint_of(prepared)
    partial = partial_path(out)
    try:
        partial.parent.mkdir(parents=True, exist_ok=True)
        handle, done = open_partial(partial, prepared, fingerprint, score_shapes(prepared))
        if handle is None and not os.access(partial.parent, os.W_OK):  # said now, not later
            raise PermissionError(errno.EACCES, "permission denied")
    except OSError as error:
        raise KennelError(f"{out}: cannot write here ({error.strerror or error})") from None
    row_starts = prepared.row_starts
    n_clusters = len(prepared.clusters)
    try:
        engine = Engine(prepared, compile_items=int(row_starts[-1] - row_starts[done]))
        warmup_seconds = engine.warm_up() if row_starts[-1] > row_starts[done] else 0.0
    except BaseException:
        if handle is not None:
            handle.close()  # the partial file stays for a rerun; its handle must not leak
        raise
    report = ScoreReport(
        variants=int(row_starts[-1]),
        skipped=int((~prepared.keep).sum()),
        unscored_alleles=prepared.unscored_alleles,
        clusters=n_clusters,
        resumed_clusters=done,
        compiled=engine.compiled,
        warmup_seconds=warmup_seconds,
    )
    buffered: list[ClusterScores] = []

    def created() -> h5py.File:
        """The partial file, created at the first commit: a job killed before it has nothing
        to resume, and leaves no file (a rerun may not even need this job again)."""
        nonlocal handle
        if handle is None:
            handle = create_scores_file(partial, prepared, fingerprint, score_shapes(prepared))
        return handle

    def commit() -> None:
        if not buffered:
            return
        handle = created()
        first = int(row_starts[buffered[0].number])
        stop = int(row_starts[buffered[-1].number + 1])
        # one device-to-host copy per stat and commit, not one per cluster
        for stat in options.stats:
            block = torch.cat([result.scores[stat] for result in buffered])
            handle[stat][first:stop] = to_float16(block)
            if buffered[0].per_model is not None:
                block = torch.cat([result.per_model[stat] for result in buffered], dim=1)
                handle[f"per_model/{stat}"][:, first:stop] = to_float16(block)
        handle.attrs["clusters_done"] = buffered[-1].number + 1
        handle.attrs["rows_done"] = stop
        handle.flush()
        buffered.clear()
        if progress is not None:
            progress(int(handle.attrs["clusters_done"]), n_clusters)

    logged = Progress(logger, "clusters scored", total=n_clusters - done, every=_LOG_EVERY_SECONDS)
    last_commit = time.perf_counter()
    results = engine.run(done)
    try:
        for result in results:
            buffered.append(result)
            logged.add(1)
            now = time.perf_counter()
            if now - last_commit >= commit_seconds:
                commit()
                last_commit = now
        commit()
        logged.finish()
        write_quantiles(created(), options.stats)
        handle.attrs["status"] = "complete"
    finally:
        results.close()
        if handle is not None:
            handle.close()
    with atomic_output(out) as temporary:
        os.replace(partial, temporary)
    report.batches = engine.batches
    report.batch_size = engine.runner.rows
    report.forward_seconds = engine.forward_timer.seconds
    if engine.feed is not None:
        report.copy_in_seconds = engine.feed.settle()["copy_in"]
    report.wall_seconds = time.perf_counter() - began
    logger.info(
        "%s: %d variants in %.1f s (%.1f variants/s, %.1f%% of the time outside the forward; "
        "%.1f s of it warming up)",
        out,
        report.variants,
        report.wall_seconds,
        report.variants_per_second,
        100 * report.outside_forward_share,
        report.warmup_seconds,
    )
    return report


def score_in_memory(prepared: Prepared) -> dict[str, np.ndarray]:
    """Scores ``{stat: (variants, ...) float16}`` without writing a file."""
    engine = Engine(prepared, compile_items=len(prepared.rows))
    with contextlib.closing(engine.run(0)) as results:
        blocks = [result.scores for result in results if result.members]
    shapes = score_shapes(prepared)
    return {
        stat: to_float16(torch.cat([block[stat] for block in blocks]))
        if blocks
        else np.zeros((0, *shape), dtype=np.float16)
        for stat, shape in shapes.items()
    }

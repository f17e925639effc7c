"""Extraction of leech models' inputs, in kennel's extract jobs (CPU) or fused in classify.

The same driver as kennel's own features (:func:`kennel.trna.threads.ordered_map`): the shard's
records stream from the BAM in batches, worker processes fetch each batch's raw signals and cut
leech's chunks (:func:`kennel.trna.leech_inputs.extract_leech_chunks`), and the chunks come
back in BAM order. Everything about the inputs comes from the bundle's config
(:class:`~kennel.trna.leech_spec.LeechInputSpec`), which refuses what kennel does not reproduce.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

from kennel.errors import KennelError
from kennel.io.atomic import atomic_output
from kennel.io.kmers import file_sha256
from kennel.io.pod5 import Pod5Set
from kennel.progress import logged_progress
from kennel.trna.features import write_features
from kennel.trna.leech_chunks import LeechChunks
from kennel.trna.leech_config import LeechPredictOptions, load_dwell_template, load_leech_config
from kennel.trna.leech_inputs import extract_leech_chunks
from kennel.trna.leech_levels import LevelTable
from kennel.trna.leech_reads import iter_leech_inputs, motif_hits
from kennel.trna.leech_spec import LeechInputSpec
from kennel.trna.threads import ThreadPlan, ordered_map, plan_threads

READS_PER_TASK = 128
TASKS_IN_FLIGHT_PER_WORKER = 2

_worker_state: dict = {}


def leech_spec_for(
    bundle: str | os.PathLike,
    kmer_table: str | os.PathLike | None = None,
    predict: LeechPredictOptions | None = None,
    config: dict | None = None,
) -> LeechInputSpec:
    """The input spec of a leech bundle or checkpoint directory (its ``config`` when already
    loaded) with leech predict's input options, checked against the k-mer table that will give
    the expected levels (the config records the one it was trained on) when one is given."""
    predict = predict or LeechPredictOptions()
    try:
        resolved = predict.resolve(load_leech_config(bundle) if config is None else config)
        sha256 = None if kmer_table is None else file_sha256(kmer_table)
        template = load_dwell_template(bundle, resolved)
        spec = LeechInputSpec.from_config(resolved, sha256, template)
        return replace(spec, backend=predict.backend, leech_core=predict.leech_core)
    except KennelError as error:  # the key is named; the file it came from must be too
        raise KennelError(f"{bundle}: {error}") from None


def _init_worker(pod5_paths: Sequence[str], levels: LevelTable, spec_json: str) -> None:
    _worker_state["pod5"] = Pod5Set(pod5_paths, index_reads=False)
    _worker_state["levels"] = levels
    _worker_state["spec"] = LeechInputSpec.from_json(spec_json)


def _run_task(reads) -> LeechChunks:
    spec = _worker_state["spec"]
    # leech looks for motif hits before the signal: a read without one needs no signal at all
    wanted = [read.read_id for read in reads if motif_hits(read, spec)]
    # raw ADC values (int16), not picoamps: leech normalises the DAC values
    fetched = _worker_state["pod5"].signals(wanted, missing_ok=True)
    signals = {meta.read_id: raw for meta, raw in fetched}
    calibrations = {
        meta.read_id: (meta.calibration_offset, meta.calibration_scale) for meta, _ in fetched
    }
    return extract_leech_chunks(reads, signals, spec, _worker_state["levels"], calibrations)


def extract_leech_batches(
    bam_path: str | os.PathLike,
    pod5_paths: Sequence[str | os.PathLike],
    reference_path: str | os.PathLike,
    kmer_table: str | os.PathLike,
    spec: LeechInputSpec,
    plan: ThreadPlan,
) -> Iterator[LeechChunks]:
    """Chunks of a shard's reads in BAM order, from ``plan.extraction_workers`` processes.

    The shard step already kept only leech's records, so every record here is one of them.
    """
    if isinstance(pod5_paths, (str, os.PathLike)):
        pod5_paths = [pod5_paths]
    Pod5Set(pod5_paths, index_reads=False)  # opened here too: bad files fail in one line
    producer = (
        (reads,) for reads, _ in iter_leech_inputs(bam_path, reference_path, 0, READS_PER_TASK)
    )
    yield from ordered_map(
        producer,
        _run_task,
        plan,
        _init_worker,
        # the table parsed once here and handed over whole (1 MiB for 9-mers), not per worker
        ([str(p) for p in pod5_paths], LevelTable.from_file(kmer_table), spec.to_json()),
        TASKS_IN_FLIGHT_PER_WORKER,
    )


def extract_leech_shard(
    bam_path: str | os.PathLike,
    pod5_paths: Sequence[str | os.PathLike],
    reference_path: str | os.PathLike,
    kmer_table: str | os.PathLike,
    bundle: str | os.PathLike,
    output: str | os.PathLike,
    threads: int = 1,
    predict: LeechPredictOptions | None = None,
) -> dict[str, int]:
    """Write the shard's leech inputs file atomically; returns chunk and skip counts."""
    spec = leech_spec_for(bundle, kmer_table, predict)
    plan = plan_threads(threads, fused=False)
    batches = extract_leech_batches(bam_path, pod5_paths, reference_path, kmer_table, spec, plan)
    batches = logged_progress(batches, logging.getLogger("kennel.extract"), "chunks extracted")
    with atomic_output(Path(output)) as temporary:
        return write_features(temporary, batches, spec)

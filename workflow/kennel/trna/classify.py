"""``kennel classify``: a shard's model rows → the model's outputs (the GPU job).

The run is the shared feed (:mod:`kennel.pipeline`): the producer streams feature batches from
the features file (or, fused, from extraction running in worker processes), the batcher cuts
them into one fixed shape, the device stage runs the bundle's model with batches in flight, and
the writer thread appends each batch's outputs to the outputs file
(:mod:`kennel.trna.outputs`) while the device works on the next batches. Tagging the BAM from
them is the tag job's (:mod:`kennel.trna.tag`), on CPUs; :func:`classify_shard` does both in
one process.

What feeds the device differs by bundle kind: kennel's own bundle gives one row per read
(:func:`kennel.trna.kennel_classify.kennel_job`), a leech bundle leech's chunks
(:func:`kennel.trna.leech_classify.leech_job`); both are a :class:`~kennel.trna.model_job.ModelJob`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from kennel.errors import KennelError
from kennel.feed import (
    BatchRunner,
    compile_count,
    compile_for,
    configure_inductor_cache,
    copying_to,
    cpu_parts,
    has_forward_hooks,
    resolve_device,
    should_compile,
    uses_cuda_graphs,
)
from kennel.gpu import GpuMonitor, PinnedFeed
from kennel.io.atomic import atomic_outputs
from kennel.pipeline import (
    DeviceStage,
    FixedBatch,
    StageTimes,
    WriterThread,
    fixed_batches,
    run_pipeline,
)
from kennel.progress import Progress
from kennel.trna.features import FeatureFile
from kennel.trna.model_job import (
    ClassifySettings,
    FusedExtraction,
    ModelJob,
)
from kennel.trna.outputs import OutputsWriter
from kennel.trna.tag import bundle_sha256, tag_shard, tagging_for

logger = logging.getLogger("kennel.classify")


def classify_shard(
    bam: str | os.PathLike,
    bundle_path: str | os.PathLike,
    output_bam: str | os.PathLike,
    predictions_tsv: str | os.PathLike,
    stats_json: str | os.PathLike,
    settings: ClassifySettings,
    features: str | os.PathLike | None = None,
    fused: FusedExtraction | None = None,
) -> dict:
    """Score one shard (:func:`score_shard`) and tag its BAM (:func:`kennel.trna.tag.tag_shard`)
    in one process, through a temporary outputs file; returns the tagging's stats."""
    # made first: it refuses tag options the bundle cannot take before any scoring
    tagging = tagging_for(bundle_path, settings)
    # the outputs are tens of bytes a read: the temporary directory's disk holds them
    with tempfile.TemporaryDirectory(prefix="kennel-outputs-") as tmp:
        outputs = Path(tmp, "outputs.h5")
        score_shard(bam, bundle_path, outputs, settings, features=features, fused=fused)
        return tag_shard(
            bam, outputs, bundle_path, output_bam, predictions_tsv, stats_json, settings,
            tagging,
        )  # fmt: skip


def score_shard(
    bam: str | os.PathLike,
    bundle_path: str | os.PathLike,
    outputs_path: str | os.PathLike,
    settings: ClassifySettings,
    features: str | os.PathLike | None = None,
    fused: FusedExtraction | None = None,
) -> dict:
    """Run one shard's model rows (from its features file, or fused extraction) through the
    bundle's model on the device and write the outputs file (:mod:`kennel.trna.outputs`) the
    tag job reads; returns run stats (also stored in the file).

    The bundle's kind (kennel's own, or a leech bundle / checkpoint directory) is read from it;
    a leech bundle needs a features file (or fused inputs) of leech's model inputs.
    """
    from kennel.models.leech_files import is_leech_bundle

    settings.check()
    if (features is None) == (fused is None):
        raise KennelError("classify: give either a features file or fused extraction inputs")
    device = resolve_device(settings.device)
    configure_inductor_cache(settings.inductor_cache)
    feature_file = FeatureFile(features) if features is not None else None
    leech = is_leech_bundle(bundle_path)
    if feature_file is not None and (feature_file.kind == "leech") != leech:
        raise KennelError(
            f"{features}: features made for a {feature_file.kind} model, but {bundle_path} is "
            f"a {'leech' if leech else 'kennel'} bundle (extract with the same bundle)"
        )
    try:
        if leech:
            from kennel.trna.leech_classify import leech_job

            job = leech_job(bam, bundle_path, settings, feature_file, fused)
        else:
            from kennel.trna.kennel_classify import kennel_job

            job = kennel_job(bam, bundle_path, settings, feature_file, fused)
    except BaseException:
        if feature_file is not None:
            feature_file.close()
        raise
    module = job.module.to(device).eval()
    use_compile = should_compile(
        settings.compile, job.n_rows, settings.compile_threshold, settings.inductor_cache
    )
    forward = module
    compiles_before = compile_count()
    if use_compile:
        forward = compile_for(module, device, has_python_hooks=has_forward_hooks(module))
    warm_inputs = [
        torch.zeros((settings.batch_size, *job.input_shapes[name]), dtype=_torch_dtype(job, name))
        for name in job.padded
    ]

    # on the CPU a batch runs in cache-sized pieces of one shape (GPUs want the whole batch);
    # a compiled graph (or a recorded CUDA graph) needs one shape, so the last batch is padded
    # to it; eager on the CPU, padding would only add rows to compute
    parts = cpu_parts(settings.batch_size) if device.type == "cpu" else 1
    fixed_shape = use_compile or device.type == "cuda"
    runner = BatchRunner(
        settings.batch_size // parts,
        job=f"classify {Path(bam).name}",
        device=device,
        pad=fixed_shape,
        cuda_graphs=use_compile and uses_cuda_graphs(device, has_forward_hooks(module)),
    )

    def warm_up() -> None:
        # the inputs are made as the real ones are (outside inference mode), or the guards
        # differ
        with torch.inference_mode():
            with copying_to(device, runner.job, f"a batch of {settings.batch_size} rows"):
                inputs = [tensor.to(device) for tensor in warm_inputs]  # one copy for both calls
            runner.warm_up(forward, inputs)

    def run_on_cpu(batch: FixedBatch):
        inputs = [torch.from_numpy(batch.arrays[name]) for name in job.padded]
        with torch.inference_mode():
            scores, charging = runner(forward, [t.to(device) for t in inputs], batch.n_real)
            return (
                scores.float().numpy().astype(np.float64),
                None if charging is None else charging.float().numpy().astype(np.float64),
            )

    run_on_device, finish, pinned = run_on_cpu, None, None
    if device.type == "cuda":
        # inputs copied on a side stream from reused pinned buffers, outputs back behind an
        # event: the device thread only queues work, so in_flight batches are on the GPU
        pinned = PinnedFeed(
            device,
            [
                ((settings.batch_size, *job.input_shapes[name]), _torch_dtype(job, name))
                for name in job.padded
            ],
            slots=settings.in_flight + 1,
            job=runner.job,
        )

        def launch_on_cuda(batch: FixedBatch):
            with torch.inference_mode():
                return pinned.launch(
                    [batch.arrays[name] for name in job.padded],
                    lambda inputs: runner(forward, inputs, batch.n_real),
                )

        run_on_device, finish = launch_on_cuda, pinned.finish

    # closed on every path; run_pipeline also closes it once the stream ends
    stage = DeviceStage(run_on_device, settings.in_flight, finish)
    with contextlib.closing(stage) as device_stage, GpuMonitor(device) as monitor:
        started = time.perf_counter()
        # compiled or on a GPU, warm up on the thread that will run every batch; an eager CPU
        # run has nothing to warm and would spend a whole batch's forward on zeros
        if use_compile or device.type == "cuda":
            device_stage.call(warm_up)
        compile_seconds = time.perf_counter() - started if use_compile else 0.0
        monitor.restart()  # the GPU's duty over the span of wall_s and chunks_per_s

        wall_started = time.perf_counter()
        with atomic_outputs(Path(outputs_path)) as (tmp_outputs,):
            written = OutputsWriter(
                tmp_outputs, job.padded,
                {"bundle_sha256": bundle_sha256(Path(bundle_path)),
                 "settings": json.dumps(asdict(settings), sort_keys=True)},
                Progress(logger, "rows scored", total=job.n_rows),
            )  # fmt: skip
            writer = WriterThread(
                written.write, None, settings.writer_queue, settings.writer_timeout
            )
            padded = job.padded if fixed_shape else ()
            batches = fixed_batches(job.source, settings.batch_size, padded)
            try:
                times = run_pipeline(batches, device_stage, writer, StageTimes())
            except BaseException:
                written.abandon()
                raise
            finally:
                if feature_file is not None:
                    feature_file.close()
            wall = time.perf_counter() - wall_started
            monitor.stop()  # its fraction is complete only once it has stopped
            stats = {
                "rows_scored": written.rows,
                "reads_scored": written.reads,
                "skipped": dict(sorted(job.skipped.items())),
                "extraction": dict(sorted(job.tallies.items())),
                "batches": times.batches,
                "batch_size": settings.batch_size,
                "rows_per_forward": runner.rows,
                "out_of_memory_halvings": runner.halvings,
                "chunks_per_s": written.rows / wall if wall > 0 else 0.0,
                "reads_per_s": written.reads / wall if wall > 0 else 0.0,
                "wall_s": wall,
                "stage_s": {
                    "produce": times.produce,
                    "device": times.device,
                    "waited_on_device": times.waited_on_device,
                    "write": times.write,
                    "waited_on_writer": times.waited_on_writer,
                },
                "device": str(device),
                # host time on the device thread (on CUDA: launching work, not GPU duty)
                "device_busy_fraction": times.device / wall if wall > 0 else 0.0,
                "gpu_busy_fraction_nvml": monitor.fraction,
                "cuda_event_s": None if pinned is None else dict(pinned.seconds),
                "compiled": use_compile,
                "compile_s": compile_seconds,
                "compilations": compile_count() - compiles_before,
                "fused": fused is not None,
                "model": "leech" if leech else "kennel",
                "settings": asdict(settings),
            }
            written.close(stats)
    logger.info(
        "scored %d reads (%d rows), skipped %s, %.0f reads/s",
        written.reads, written.rows, stats["skipped"], stats["reads_per_s"],
    )  # fmt: skip
    return stats


def _torch_dtype(job: ModelJob, name: str) -> torch.dtype:
    return torch.from_numpy(np.zeros(0, job.input_dtypes[name])).dtype

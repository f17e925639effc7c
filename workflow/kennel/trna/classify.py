"""``kennel classify``: a shard's features → class, confidence and charging tags on its BAM.

The run is the shared feed (:mod:`kennel.pipeline`): the producer streams feature batches from
the features file (or, fused, from extraction running in worker processes), the batcher cuts
them into one fixed shape, the device stage runs the bundle's model with batches in flight, and
the writer thread tags the shard's records in BAM order while the device works on the next
batches. Records without a prediction (skipped by extraction) pass through unchanged.

Tags, as leech writes them: ``aa`` class label (``unc`` below ``min_confidence``/``min_margin``),
``ac`` top probability, ``am`` margin top1 − top2, ``pn`` class names, ``pp`` all
probabilities, ``pc`` charging level — uint8 (round(x·255), clamped) unless ``raw_tags``.
"""

from __future__ import annotations

import array
import contextlib
import csv
import json
import logging
import os
import shlex
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pysam
import torch

from kennel import __version__
from kennel.errors import KennelError
from kennel.feed import (
    BatchRunner,
    GpuMonitor,
    PinnedFeed,
    compile_count,
    compile_for,
    configure_inductor_cache,
    cpu_parts,
    has_forward_hooks,
    resolve_device,
    should_compile,
    uses_cuda_graphs,
)
from kennel.io.atomic import atomic_outputs
from kennel.io.bam import open_alignments, with_program
from kennel.pipeline import (
    DeviceStage,
    FixedBatch,
    StageTimes,
    WriterThread,
    fixed_batches,
    run_pipeline,
)
from kennel.progress import Progress
from kennel.trna.features import FeatureBatch, FeatureFile, FeatureSpec

logger = logging.getLogger("kennel.classify")
UNCLASSIFIED = "unc"


@dataclass(frozen=True)
class ClassifySettings:
    batch_size: int = 1024
    device: str = "auto"
    compile: str = "auto"  # auto | on | off
    compile_threshold: int = 2_000_000  # reads; below it "auto" stays eager
    inductor_cache: str | None = None
    in_flight: int = 3  # batches queued on the device stage
    writer_queue: int = 8  # finished batches waiting for the writer
    writer_timeout: float = 120.0
    min_confidence: int = 0  # 0–255, on the uint8 scale of ``ac``
    min_margin: int = 0  # 0–255, on the uint8 scale of ``am``
    raw_tags: bool = False
    bam_threads: int = 1  # htslib BGZF compression threads
    # leech bundles only (leech predict's --abstain-on-junction-indel and --pair)
    abstain_on_junction_indel: bool = False
    pair: str | None = None

    def check(self) -> None:
        if self.batch_size < 1:
            raise KennelError(f"classify: batch size must be positive, got {self.batch_size}")
        for name in ("min_confidence", "min_margin"):
            if not 0 <= getattr(self, name) <= 255:
                raise KennelError(f"classify: {name} must be within 0-255")


@dataclass(frozen=True)
class FusedExtraction:
    """Fused mode: extract in this job instead of reading a features file."""

    pod5s: Sequence[Path]
    reference: Path
    kmer_table: Path
    threads: int
    spec: FeatureSpec  # what extraction produces; the bundle must have been trained on it


def to_uint8(values: np.ndarray) -> np.ndarray:
    return np.clip(np.round(np.asarray(values, np.float64) * 255.0), 0, 255).astype(np.uint8)


def call_classes(
    probabilities: np.ndarray, class_names: Sequence[str], settings: ClassifySettings
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Labels (``unc`` below the thresholds), top probability and margin top1 − top2."""
    order = np.argsort(-probabilities, axis=1, kind="stable")
    rows = np.arange(len(probabilities))
    top = probabilities[rows, order[:, 0]]
    second = probabilities[rows, order[:, 1]]  # bundles have at least two classes
    margin = top - second
    confident = (to_uint8(top) >= settings.min_confidence) & (
        to_uint8(margin) >= settings.min_margin
    )
    labels = [
        class_names[i] if ok else UNCLASSIFIED for i, ok in zip(order[:, 0], confident, strict=True)
    ]
    return labels, top, margin


def encode_tags(
    labels: Sequence[str],
    confidence: np.ndarray,
    margin: np.ndarray,
    probabilities: np.ndarray,
    charging: np.ndarray | None,
    class_names: Sequence[str],
    raw: bool,
) -> list[list[tuple]]:
    """Each read's BAM tags as ``(tag, value, type)`` for ``set_tag`` (uint8-scaled unless
    ``raw``); scaled once per batch. ``pc`` is None without a charging head, which removes a
    stale ``pc`` from an input record."""
    if raw:
        scalar, array_code = "f", "f"
        scale = lambda values: np.asarray(values, np.float64)  # noqa: E731
        probabilities = np.asarray(probabilities, np.float32)
    else:
        scalar, array_code = "C", "B"
        scale = to_uint8
        probabilities = to_uint8(probabilities)
    confidence, margin = scale(confidence).tolist(), scale(margin).tolist()
    levels = [None] * len(labels) if charging is None else scale(charging).tolist()
    names = ",".join(class_names)
    return [
        [
            ("aa", labels[i], "Z"),
            ("ac", confidence[i], scalar),
            ("am", margin[i], scalar),
            ("pn", names, "Z"),
            ("pp", array.array(array_code, probabilities[i].tobytes()), None),
            ("pc", levels[i], None if levels[i] is None else scalar),
        ]
        for i in range(len(labels))
    ]


def decode_tags(record: pysam.AlignedSegment) -> dict:
    """Read back what :func:`encode_tags` wrote, as floats in [0, 1]."""

    def scaled(value):
        return value / 255.0 if isinstance(value, int) else float(value)

    probabilities = np.asarray(record.get_tag("pp"), dtype=np.float64)
    if np.issubdtype(np.asarray(record.get_tag("pp")).dtype, np.integer):
        probabilities = probabilities / 255.0
    return {
        "label": record.get_tag("aa"),
        "confidence": scaled(record.get_tag("ac")),
        "margin": scaled(record.get_tag("am")),
        "class_names": record.get_tag("pn").split(","),
        "probabilities": probabilities,
        "charging": scaled(record.get_tag("pc")) if record.has_tag("pc") else None,
    }


class TaggingWriter:
    """Owned by the writer thread: tags the shard BAM's records in order as predictions arrive."""

    def __init__(
        self, source_bam, output_bam, predictions_tsv, class_names, settings, progress,
        program: dict[str, str] | None = None, columns: Sequence[str] | None = None,
    ):  # fmt: skip
        self._source = open_alignments(source_bam)
        self._records = self._source.fetch(until_eof=True)
        self._source_path = source_bam
        header = self._source.header
        if program is not None:
            header = pysam.AlignmentHeader.from_dict(with_program(header, program))
        self._out = pysam.AlignmentFile(
            str(output_bam), "wb", header=header, threads=settings.bam_threads
        )
        self._table = open(predictions_tsv, "w", newline="")  # noqa: SIM115 (closed in close())
        self._tsv = csv.writer(self._table, delimiter="\t", lineterminator="\n")
        self._tsv.writerow(
            columns
            or ["read_id", "label", "confidence", "margin", "charging"]
            + [f"p_{name}" for name in class_names]
        )
        self._class_names = list(class_names)
        self._settings = settings
        self._progress = progress
        self.records_written = 0
        self.labels: dict[str, int] = {}

    def write(self, item: tuple[FixedBatch, tuple[np.ndarray, np.ndarray | None]]) -> None:
        batch, (probabilities, charging) = item
        read_ids = batch.arrays["read_id"][: batch.n_real]
        labels, top, margin = call_classes(probabilities, self._class_names, self._settings)
        tags = encode_tags(labels, top, margin, probabilities, charging, self._class_names,
                           self._settings.raw_tags)  # fmt: skip
        for i, read_id in enumerate(read_ids):
            read_id = read_id.decode()
            record = self._advance_to(read_id)
            level = None if charging is None else float(charging[i])
            for name, value, kind in tags[i]:  # replaces a tag the input already carries
                record.set_tag(name, value, kind)
            self._out.write(record)
            self.records_written += 1
            self.labels[labels[i]] = self.labels.get(labels[i], 0) + 1
            self._tsv.writerow(
                [read_id, labels[i], f"{top[i]:.6f}", f"{margin[i]:.6f}",
                 "" if level is None else f"{level:.6f}"]
                + [f"{p:.6f}" for p in probabilities[i]]
            )  # fmt: skip
        self._progress.add(len(read_ids))

    def _advance_to(self, read_id: str) -> pysam.AlignedSegment:
        """Write untagged records until ``read_id``'s; predictions arrive in BAM order."""
        for record in self._records:
            if record.query_name == read_id:
                return record
            self._out.write(record)
            self.records_written += 1
        raise KennelError(
            f"{self._source_path}: read {read_id}: prediction has no record at or after the "
            "current position (features and BAM are not from the same shard?)"
        )

    def close(self) -> None:
        for record in self._records:
            self._out.write(record)
            self.records_written += 1
        self._progress.finish()
        self._out.close()
        self._source.close()
        self._table.close()

    def abandon(self) -> None:
        for handle in (self._out, self._source, self._table):
            # already failing; the outputs are temporaries about to be removed
            with contextlib.suppress(Exception):
                handle.close()


@dataclass
class ModelJob:
    """What differs between kennel's bundles and leech's in a classify job; the feed does not.

    ``source`` yields dicts of row arrays (model inputs and what the writer needs), ``padded``
    names the model inputs, ``module`` maps them (in that order, as tensors on the device) to
    the model's outputs, and ``writer`` makes the :class:`TaggingWriter` that tags the BAM.
    """

    module: torch.nn.Module
    source: Iterator[dict[str, np.ndarray]]
    padded: tuple[str, ...]
    input_dtypes: dict[str, np.dtype]
    input_shapes: dict[str, tuple[int, ...]]
    writer: Callable[..., TaggingWriter]
    n_rows: int
    skipped: dict[str, int]
    tallies: dict[str, int]
    marker_tag: str = "aa"  # the tag every classified record gets (the merge counts them)


def _count(counter: dict[str, int], reasons) -> None:
    for reason in reasons:
        reason = reason.decode() if isinstance(reason, bytes) else str(reason)
        counter[reason] = counter.get(reason, 0) + 1


def _kennel_job(bam, bundle_path, settings, feature_file, fused) -> ModelJob:
    """kennel's own bundle: one row per read, softmax over classes, kennel's tags."""
    from kennel.trna.train import load_classifier

    spec = feature_file.spec if feature_file is not None else fused.spec
    model, bundle = load_classifier(
        bundle_path, spec, features_path=feature_file.path if feature_file else None
    )
    class_names = list(bundle["metadata"]["class_names"])
    skipped: dict[str, int] = {}
    tallies: dict[str, int] = {}  # extraction's own counts (refinement accepted/rejected)
    if feature_file is not None:
        n_rows = len(feature_file)
        tallies.update((k, v) for k, v in feature_file.counts.items() if k.startswith("refine_"))
        _count(skipped, feature_file.skipped()[1])
        batches: Iterator[FeatureBatch] = feature_file.batches(settings.batch_size)
    else:
        n_rows = _count_records(bam)
        batches = _fused_batches(bam, fused, spec, skipped, tallies)
    # float16 as stored: half the bytes to copy, and the model casts on the device
    source = ({"signal": b.signal, "bases": b.bases, "read_id": b.read_id} for b in batches)
    return ModelJob(
        module=_Softmaxed(model),
        source=source,
        padded=("signal", "bases"),
        input_dtypes={"signal": np.float16, "bases": np.float16},
        input_shapes={
            "signal": (len(spec.signal_channels), spec.chunk_length),
            "bases": (spec.window, len(spec.base_features)),
        },
        writer=lambda *args, **kwargs: TaggingWriter(*args, class_names, settings, **kwargs),
        n_rows=n_rows,
        skipped=skipped,
        tallies=tallies,
    )


class _Softmaxed(torch.nn.Module):
    """kennel's classifier with its softmax, so every model job returns what its writer needs."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, signal, bases):
        logits, charging = self.model(signal, bases)
        return torch.softmax(logits.float(), dim=-1), charging


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
    """Classify one shard from its features file (or fused extraction); returns run stats.

    The bundle's kind (kennel's own, or a leech bundle / checkpoint directory) is read from it;
    a leech bundle needs a features file (or fused inputs) of leech's model inputs.
    """
    from kennel.models.leech import is_leech_bundle

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
            job = _kennel_job(bam, bundle_path, settings, feature_file, fused)
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
        job=f"classify {Path(output_bam).name}",
        device=device,
        pad=fixed_shape,
        cuda_graphs=use_compile and uses_cuda_graphs(device, has_forward_hooks(module)),
    )

    def warm_up() -> None:
        # once, on the fixed shape: any compilation happens here, never mid-stream. The inputs
        # are made as the real ones are (outside inference mode), or the guards differ.
        with torch.inference_mode():
            runner(forward, [tensor.to(device) for tensor in warm_inputs])

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

        outputs = [
            Path(output_bam),
            Path(f"{output_bam}.bai"),
            Path(predictions_tsv),
            Path(stats_json),
        ]
        wall_started = time.perf_counter()
        with atomic_outputs(*outputs) as (tmp_bam, tmp_bai, tmp_tsv, tmp_stats):
            progress = Progress(logger, "reads classified", total=job.n_rows)
            tagger = job.writer(
                bam, tmp_bam, tmp_tsv, progress=progress,
                program=classify_program(bundle_path, settings),
            )  # fmt: skip
            writer = WriterThread(
                tagger.write, tagger.close, settings.writer_queue, settings.writer_timeout
            )
            padded = job.padded if fixed_shape else ()
            batches = fixed_batches(job.source, settings.batch_size, padded)
            try:
                times = run_pipeline(batches, device_stage, writer, StageTimes())
            except BaseException:
                tagger.abandon()
                raise
            finally:
                if feature_file is not None:
                    feature_file.close()
            pysam.index(str(tmp_bam), str(tmp_bai))
            wall = time.perf_counter() - wall_started
            classified = sum(tagger.labels.values())
            stats = {
                "reads_classified": classified,
                "labels": dict(sorted(tagger.labels.items())),
                "skipped": dict(sorted(job.skipped.items())),
                "extraction": dict(sorted(job.tallies.items())),
                "records_written": tagger.records_written,
                "batches": times.batches,
                "batch_size": settings.batch_size,
                "rows_per_forward": runner.rows,
                "out_of_memory_halvings": runner.halvings,
                "chunks_per_s": classified / wall if wall > 0 else 0.0,
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
                "marker_tag": job.marker_tag,
                "settings": asdict(settings),
            }
            with open(tmp_stats, "w") as handle:
                json.dump(stats, handle, indent=2, sort_keys=True)
    logger.info(
        "classified %d reads (%s), skipped %s, %.0f reads/s",
        classified, stats["labels"], stats["skipped"], stats["chunks_per_s"],
    )  # fmt: skip
    return stats


def _torch_dtype(job: ModelJob, name: str) -> torch.dtype:
    return torch.from_numpy(np.zeros(0, job.input_dtypes[name])).dtype


def classify_program(bundle_path: str | os.PathLike, settings: ClassifySettings) -> dict:
    """The ``@PG`` line of a classification: what a reader needs to know which model and
    which thresholds made the tags, and how they are scaled."""
    bundle_path = Path(bundle_path)
    tags = "raw" if settings.raw_tags else "uint8"
    options = [
        "--bundle", str(bundle_path),
        "--min-confidence", str(settings.min_confidence),
        "--min-margin", str(settings.min_margin),
        *(["--raw-tags"] if settings.raw_tags else []),
    ]  # fmt: skip
    return {
        "ID": "kennel-classify",
        "PN": "kennel",
        "VN": __version__,
        "CL": shlex.join(["kennel", "classify", *options]),
        "DS": (
            f"bundle={bundle_path} bundle_sha256={_bundle_sha256(bundle_path)} "
            f"min_confidence={settings.min_confidence} min_margin={settings.min_margin} "
            f"tags={tags}"
        ),
    }


def _bundle_sha256(path: Path) -> str:
    """SHA-256 of a bundle file; of a (leech checkpoint) directory, over its files' names and
    contents in name order, so any change to what the model was loaded from shows."""
    import hashlib

    from kennel.io.kmers import file_sha256

    if not path.is_dir():
        return file_sha256(path)
    digest = hashlib.sha256()
    for member in sorted(p for p in path.iterdir() if p.is_file()):
        digest.update(f"{member.name}\0{file_sha256(member)}\0".encode())
    return digest.hexdigest()


def _count_records(bam) -> int:
    with open_alignments(bam) as handle:
        return handle.mapped + handle.unmapped  # from the index: no pass over the records


def _fused_batches(
    bam, fused: FusedExtraction, spec: FeatureSpec, skipped: dict[str, int], tallies: dict
):
    """Extraction inside the GPU job, on the CPUs left after the feeder's reservation."""
    from kennel.trna.extract import extract_features
    from kennel.trna.threads import plan_threads

    plan = plan_threads(fused.threads, fused=True)
    logger.info(
        "fused extraction: %d workers, %d rayon threads, %d CPUs kept for the feed",
        plan.extraction_workers, plan.rayon_threads, plan.feed_reserve,
    )  # fmt: skip
    for batch in extract_features(bam, fused.pod5s, fused.reference, fused.kmer_table, spec, plan):
        for reason in batch.skipped_reason:
            skipped[reason.decode()] = skipped.get(reason.decode(), 0) + 1
        for key, value in batch.tallies.items():
            tallies[key] = tallies.get(key, 0) + value
        yield batch

"""Score variants with a sequence-to-coverage model: VCF slice -> ``scores.h5``.

The pipeline keeps the model busy:

- a prefetch thread fetches each cluster's window and one-hot codes the reference and every
  alternate one cluster ahead of the model;
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
import hashlib
import json
import logging
import os
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np
import torch

from kennel import __version__
from kennel.errors import KennelError
from kennel.feed import (
    COMPILE_MODES,
    BatchRunner,
    compile_for,
    configure_inductor_cache,
    has_forward_hooks,
    pad_rows,
    resolve_device,
    should_compile,
    uses_cuda_graphs,
)
from kennel.io.atomic import atomic_output
from kennel.progress import Progress
from kennel.snp.clusters import Cluster, alt_one_hot, cluster_variants, fetch_window
from kennel.snp.model import SequenceModel, load_sequence_model
from kennel.snp.onehot import dna_1hot
from kennel.snp.stats import (
    PROFILE_STATS,
    STATS,
    compute_stats,
    quantile_grid,
    score_quantiles,
    strand_map,
    to_float16,
)
from kennel.snp.targets import Targets, Untransform, read_targets
from kennel.snp.vcf import (
    ALT_MODES,
    REF_MISMATCH_MODES,
    Variant,
    check_against_genome,
    open_genome,
)
from kennel.snp.vcf import read_variants as read_vcf

logger = logging.getLogger(__name__)

SCORES_FORMAT = "kennel-snp-scores"
SCORES_FORMAT_VERSION = 2
MIX_DTYPES = {"float32": None, "float16": torch.float16, "bfloat16": torch.bfloat16}
# shifted-in bases are all-zero rows: hound_snp shifts a boolean one-hot, whose pad is 0
SHIFT_PAD = 0.0
DEFAULT_STATS = ("SUM", "logSUM", "D1", "D2", "logD1", "logD2")
_LOG_EVERY_SECONDS = 30.0
# Alternates are scored in groups: one call per group, not per cluster or batch; the group
# closes at this many alternates or prediction elements (1 GiB of float32), whichever first.
_SCORE_EVERY = 64
_SCORE_MAX_ELEMENTS = 1 << 27  # float64 predictions: 1 GiB


@dataclass(frozen=True)
class ScoreOptions:
    """How to score; the defaults match ``config/config.yaml``'s ``snp.score``."""

    seq_len: int = 0  # 0: the model's own input length
    rc: bool = True
    shifts: tuple[int, ...] = (0,)
    cluster_pct: float = 0.1
    stats: tuple[str, ...] = DEFAULT_STATS
    untransform: bool = True
    unscale: bool = False  # divide by the targets' scale too (hound_snp does not)
    indel_stitch: bool = False
    alts: str = "all"  # "first": only each record's first ALT, as hound_snp
    ref_mismatch: str = "error"
    per_model: bool = False  # with several models: also write each model's scores
    batch_size: int = 8
    mix_dtype: str = "float32"
    compile: str = "auto"
    compile_threshold: int = 1500
    device: str = "auto"
    inductor_cache: str | None = None

    def check(self) -> ScoreOptions:
        problems = []
        if self.seq_len < 0:
            problems.append(f"seq_len={self.seq_len}: must be 0 (the model's) or positive")
        if not self.shifts or len(set(self.shifts)) != len(self.shifts):
            problems.append(f"shifts={list(self.shifts)}: need distinct integers")
        if not 0 <= self.cluster_pct < 1:
            problems.append(f"cluster_pct={self.cluster_pct}: must be within [0, 1)")
        unknown = [stat for stat in self.stats if stat not in STATS]
        if not self.stats or unknown or len(set(self.stats)) != len(self.stats):
            problems.append(f"stats={list(self.stats)}: choose distinct ones of {', '.join(STATS)}")
        if self.ref_mismatch not in REF_MISMATCH_MODES:
            problems.append(
                f"ref_mismatch={self.ref_mismatch!r}: one of {', '.join(REF_MISMATCH_MODES)}"
            )
        if self.alts not in ALT_MODES:
            problems.append(f"alts={self.alts!r}: one of {', '.join(ALT_MODES)}")
        if self.per_model and set(self.stats) & set(PROFILE_STATS):
            problems.append("per_model: not with the REF/ALT profile stats (one copy is plenty)")
        if self.batch_size < 1:
            problems.append(f"batch_size={self.batch_size}: must be at least 1")
        if self.mix_dtype not in MIX_DTYPES:
            problems.append(f"mix_dtype={self.mix_dtype!r}: one of {', '.join(MIX_DTYPES)}")
        if self.compile not in COMPILE_MODES:
            problems.append(f"compile={self.compile!r}: one of {', '.join(COMPILE_MODES)}")
        if problems:
            raise KennelError(f"score options: {problems[0]}")
        return self

    def scoring_fields(self) -> dict:
        """The options that change scores (a resumed or merged run must agree on these)."""
        return {
            key: getattr(self, key)
            for key in (
                "rc",
                "shifts",
                "cluster_pct",
                "stats",
                "untransform",
                "unscale",
                "indel_stitch",
                "alts",
                "ref_mismatch",
                "per_model",
                "mix_dtype",
            )
        }


@dataclass
class ScoreReport:
    """What a run did and where its time went."""

    variants: int = 0
    skipped: int = 0
    clusters: int = 0
    resumed_clusters: int = 0
    batches: int = 0
    batch_size: int = 0
    compiled: bool = False
    wall_seconds: float = 0.0
    forward_seconds: float = 0.0  # inside the model calls (on CUDA: until the launch returns)

    @property
    def outside_forward_share(self) -> float:
        """Share of the wall time spent anywhere but inside the model's forward."""
        if self.wall_seconds <= 0:
            return 0.0
        return max(0.0, 1.0 - self.forward_seconds / self.wall_seconds)

    @property
    def variants_per_second(self) -> float:
        return self.variants / self.wall_seconds if self.wall_seconds > 0 else 0.0


@dataclass
class Prepared:
    """Inputs read and checked; the models built, on their device, with output shapes checked."""

    models: list[SequenceModel]  # replicates: same input and output layout, scores averaged
    targets: Targets
    variants: list[Variant]
    keep: np.ndarray
    clusters: list[Cluster]
    device: torch.device
    genome: Path
    options: ScoreOptions

    @property
    def model(self) -> SequenceModel:
        """The first model: what every model shares (seq_len, stride, output length)."""
        return self.models[0]

    @property
    def rows(self) -> list[int]:
        """Variant indices that get a row of scores, in VCF order."""
        return [int(i) for i in np.flatnonzero(self.keep)]

    @property
    def row_starts(self) -> np.ndarray:
        """Output row of each cluster's first scored variant (plus the total at the end)."""
        counts = [int(self.keep[list(cluster.members)].sum()) for cluster in self.clusters]
        return np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])

    @property
    def score_track_ids(self) -> list[str]:
        rows = self.targets.collapsed_rows
        return [self.targets.identifier[row] for row in rows]

    @property
    def score_track_labels(self) -> list[str]:
        rows = self.targets.collapsed_rows
        return [self.targets.description[row] for row in rows]


def model_paths(model) -> list[Path]:
    """One model path or several (replicates) as a list."""
    if isinstance(model, str | os.PathLike):
        return [Path(model)]
    paths = [Path(path) for path in model]
    if not paths:
        raise KennelError("no model given")
    return paths


def prepare(
    vcf: str | os.PathLike,
    genome: str | os.PathLike,
    model: str | os.PathLike | Sequence[str | os.PathLike],
    targets: str | os.PathLike | None,
    options: ScoreOptions,
    max_variants: int | None = None,
) -> Prepared:
    """Read and check every input before any output exists (each error is one line).

    ``model`` is one model or several replicates (same input length and output layout): each
    window is encoded once and run through every model, and the scores are averaged.
    """
    options = options.check()
    device = resolve_device(options.device)
    if options.mix_dtype == "bfloat16":
        logger.warning(
            "mix_dtype bfloat16 keeps 8 bits of mantissa: small score differences blur; "
            "measure the effect with kennel snp-precision"
        )
    paths = model_paths(model)
    models = [load_sequence_model(path, options.seq_len) for path in paths]
    first = models[0]
    for other in models[1:]:
        layout = (other.seq_len, other.stride, other.target_length)
        if layout != (first.seq_len, first.stride, first.target_length):
            raise KennelError(
                f"{other.path}: seq_len {other.seq_len}, stride {other.stride}, "
                f"{other.target_length} bins differ from {first.path}'s "
                f"({first.seq_len}, {first.stride}, {first.target_length}): replicates must agree"
            )
    targets_path = targets or first.default_targets
    if targets_path is None:
        raise KennelError(f"{paths[0]}: a targets table is required for this model")
    table = read_targets(targets_path, require_untransform=options.untransform)
    for sequence_model in models:
        sequence_model.select_tracks(table)
    variants = read_vcf(vcf, options.alts)
    if max_variants is not None:
        variants = _whole_records(variants, max_variants)
    keep = check_against_genome(variants, genome, vcf, options.ref_mismatch)
    clusters = cluster_variants(variants, first.seq_len, options.cluster_pct)
    for sequence_model in models:
        _check_model(sequence_model, device, options.mix_dtype, len(table))
    return Prepared(
        models=models,
        targets=table,
        variants=variants,
        keep=keep,
        clusters=clusters,
        device=device,
        genome=Path(genome),
        options=options,
    )


def _check_model(model: SequenceModel, device: torch.device, mix_dtype: str, tracks: int) -> None:
    """Put the model on its device and check one forward's output shape."""
    model.module.to(device).eval()
    with torch.inference_mode(), _autocast(device, mix_dtype):
        probe = torch.zeros(1, model.seq_len, 4, device=device)
        try:
            output = model.module(probe)
        except (RuntimeError, ValueError) as error:
            message = str(error).strip().splitlines()[0]
            raise KennelError(
                f"{model.path}: the model cannot take seq_len={model.seq_len} ({message})"
            ) from None
    model.check_output(output, tracks)


def _whole_records(variants: list[Variant], limit: int) -> list[Variant]:
    """The first ``limit`` variants, extended to the end of the last record they touch."""
    if limit >= len(variants):
        return variants
    last = variants[max(0, limit - 1)].record
    return [variant for variant in variants if variant.record <= last]


def _autocast(device: torch.device, mix_dtype: str):
    dtype = MIX_DTYPES[mix_dtype]
    return torch.autocast(device_type=device.type, dtype=dtype, enabled=dtype is not None)


# ---------------------------------------------------------------------------------------------
# Encoding (prefetch thread)


@dataclass
class EncodedCluster:
    number: int
    cluster: Cluster
    members: list[int]  # scored variant indices
    sequences: np.ndarray | None  # (1 + len(members), seq_len, 4) bool: reference, then alts
    staged: torch.Tensor | None = None  # the same, ready to move: float (CPU) or pinned (CUDA)


def encode_cluster(
    fasta, prepared: Prepared, number: int, cluster: Cluster, seq_len: int
) -> EncodedCluster:
    """Fetch the cluster's window and one-hot code it and each scored alternate allele."""
    members = [i for i in cluster.members if prepared.keep[i]]
    if not members:
        return EncodedCluster(number, cluster, members, None)
    reference = dna_1hot(fetch_window(fasta, cluster.chrom, cluster.start, seq_len))
    sequences = np.empty((1 + len(members), seq_len, 4), dtype=bool)
    sequences[0] = reference
    for slot, index in enumerate(members, start=1):
        variant = prepared.variants[index]
        genome_allele, placed = variant.placed  # a flipped variant places its REF
        alt_one_hot(
            reference,
            cluster.offset(variant),
            len(genome_allele),
            dna_1hot(placed),
            out=sequences[slot],
        )
    return EncodedCluster(number, cluster, members, sequences)


class _Prefetcher:
    """Runs ``produce`` over ``items`` on a thread, at most ``depth`` results ahead."""

    _DONE = object()

    def __init__(self, produce: Callable, items: Sequence, depth: int = 1) -> None:
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._work, args=(produce, items), name="kennel-prefetch", daemon=True
        )
        self._thread.start()

    def _work(self, produce, items) -> None:
        try:
            for item in items:
                if self._stop.is_set():
                    return
                self._put(produce(item))
            self._put(self._DONE)
        except BaseException as error:  # handed to the consumer, which re-raises it
            self._put(error)

    def _put(self, value) -> None:
        while not self._stop.is_set():
            try:
                self._queue.put(value, timeout=0.1)
                return
            except queue.Full:
                continue

    def __iter__(self) -> Iterator:
        while True:
            value = self._queue.get()
            if value is self._DONE:
                return
            if isinstance(value, BaseException):
                raise value
            yield value

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


# ---------------------------------------------------------------------------------------------
# The engine: rows -> batches -> predictions -> scores

Slot = tuple[int, int]  # (model, sequence); sequence 0 is the cluster's reference


@dataclass
class _Work:
    """One cluster in flight on the device."""

    encoded: EncodedCluster
    sequences: torch.Tensor | None  # float on the device
    shifts: list[list[int]]  # per sequence
    compensated: list[str | None] = field(default_factory=list)  # per alternate: side shifted
    parts: dict[Slot, list[torch.Tensor]] = field(default_factory=dict)  # row outputs
    remaining: dict[Slot, int] = field(default_factory=dict)  # rows still to predict
    predictions: dict[Slot, torch.Tensor] = field(default_factory=dict)  # float64, untransformed
    repeated: dict[int, torch.Tensor] = field(default_factory=dict)  # model -> reference x2
    unscored: int = 0
    scores: dict[Slot, dict[str, torch.Tensor]] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        return self.unscored == 0 and not any(self.remaining.values())


@dataclass
class ClusterScores:
    number: int
    members: list[int]
    scores: dict[str, torch.Tensor]  # stat -> (members, ...) on the device, mean over models
    per_model: dict[str, torch.Tensor] | None = None  # stat -> (models, members, ...)


class _Engine:
    def __init__(self, prepared: Prepared, compile_items: int) -> None:
        options = prepared.options
        self.prepared = prepared
        self.options = options
        self.device = prepared.device
        self.batch_size = options.batch_size
        self.views = 2 if options.rc else 1
        model = prepared.model
        self.crop = (model.seq_len - model.target_length * model.stride) // 2
        targets = prepared.targets
        self.n_tracks = len(targets.collapsed_rows)
        self.strand_swap = torch.as_tensor(targets.strand_pair, device=self.device)
        self.strand_to = strand_map(
            targets.collapsed_rows, targets.collapsed_partners, len(targets)
        ).to(self.device)
        self.untransform = (
            Untransform(targets, self.device, options.unscale) if options.untransform else None
        )
        self.compiled = should_compile(
            options.compile, compile_items, options.compile_threshold, options.inductor_cache
        )
        self.cuda_graphs = False
        if self.compiled:
            configure_inductor_cache(options.inductor_cache)
        self.forwards = []
        for sequence_model in prepared.models:
            module = sequence_model.module
            if self.compiled:
                hooks = has_forward_hooks(module)
                self.forwards.append(compile_for(module, self.device, hooks))
                self.cuda_graphs = self.cuda_graphs or uses_cuda_graphs(self.device, hooks)
            else:
                self.forwards.append(module)
        self.runner = BatchRunner(
            self.batch_size,
            job=f"score-snps {prepared.model.path.name}",
            device=self.device,
            cuda_graphs=self.cuda_graphs,
        )
        self.batches = 0
        self.forward_seconds = 0.0
        self.ready: list[tuple[_Work, Slot]] = []  # alternates predicted, not yet scored
        self.ready_elements = 0

    # rows ------------------------------------------------------------------------------------

    @torch.inference_mode()
    def _start(self, encoded: EncodedCluster) -> _Work:
        if encoded.sequences is None:
            return _Work(encoded, None, [])
        sequences = encoded.staged.to(self.device, non_blocking=True).float()
        base = list(self.options.shifts)
        # hound_snp's compensation: an indel moves everything after it, so one side is predicted
        # a second time shifted by the indel's size to re-align it. A deletion alone in its
        # window shifts the reference; any other indel shifts its alternate.
        singleton = len(encoded.cluster.members) == 1
        reference_shifts, alternate_shifts, compensated = base, [], []
        for index in encoded.members:
            indel = self.prepared.variants[index].indel_size
            side = None if indel == 0 else "ref" if singleton and indel < 0 else "alt"
            if side == "ref":
                reference_shifts = [t for s in base for t in (s, s + indel)]
            compensate = side == "alt"
            alternate_shifts.append(
                [t for s in base for t in (s, s - indel)] if compensate else base
            )
            compensated.append(side)
        shifts = [reference_shifts, *alternate_shifts]
        slots = [(m, seq) for m in range(len(self.forwards)) for seq in range(len(shifts))]
        return _Work(
            encoded,
            sequences,
            shifts,
            compensated,
            parts={slot: [] for slot in slots},
            remaining={slot: len(shifts[slot[1]]) * self.views for slot in slots},
            unscored=len(encoded.members) * len(self.forwards),
        )

    def _rows(self, work: _Work) -> Iterator[tuple[_Work, int, int, bool]]:
        """(work, sequence, shift position, reverse complement), in prediction order; each
        row's input is built once and run through every model."""
        for sequence, shifts in enumerate(work.shifts):
            for position in range(len(shifts)):
                yield work, sequence, position, False
                if self.views == 2:
                    yield work, sequence, position, True

    def _shifted(self, work: _Work, sequence: int, position: int) -> torch.Tensor:
        one_hot = work.sequences[sequence]
        shift = work.shifts[sequence][position]
        if shift > 0:
            pad = one_hot.new_full((shift, 4), SHIFT_PAD)
            one_hot = torch.cat([pad, one_hot[:-shift]])
        elif shift < 0:
            pad = one_hot.new_full((-shift, 4), SHIFT_PAD)
            one_hot = torch.cat([one_hot[-shift:], pad])
        return one_hot

    def _batch(self, rows: list) -> torch.Tensor:
        # reverse complement: flip the length, and A/C/G/T -> T/G/C/A; done per row, so no index
        # tensor is copied to the device (a blocking copy would wait for the queued forward)
        batch = torch.stack(
            [
                self._shifted(work, seq, pos).flip(0, 1) if rc else self._shifted(work, seq, pos)
                for work, seq, pos, rc in rows
            ]
        )
        return pad_rows(batch, self.batch_size)

    # model -----------------------------------------------------------------------------------

    def _forward(self, model: int) -> Callable:
        forward = self.forwards[model]

        def timed(batch: torch.Tensor) -> torch.Tensor:
            began = time.perf_counter()
            with _autocast(self.device, self.options.mix_dtype):
                output = forward(batch)
            self.forward_seconds += time.perf_counter() - began
            self.batches += 1
            return output

        return timed

    def _predict(self, rows: list) -> list[torch.Tensor]:
        """Every model's outputs for ``rows``: one input batch serves all models; an
        out-of-memory error halves the pieces (kennel.feed.BatchRunner, as in classify)."""
        batch = self._batch(rows)
        return [
            self.runner(self._forward(model), [batch], len(rows)).float()
            for model in range(len(self.forwards))
        ]

    @torch.inference_mode()
    def run_batch(self, rows: list) -> None:
        """Predict rows with every model (reverse-complement rows are turned back in
        _predicted)."""
        outputs = self._predict(rows)
        completed = []
        for model, output in enumerate(outputs):
            for i, (work, sequence, _position, _rc) in enumerate(rows):
                slot = (model, sequence)
                work.parts[slot].append(output[i])
                work.remaining[slot] -= 1
                if work.remaining[slot] == 0:
                    completed.append((work, slot))
        if completed:
            self._predicted(completed)
        if len(self.ready) >= _SCORE_EVERY or self.ready_elements >= _SCORE_MAX_ELEMENTS:
            self._score_ready()

    def _predicted(self, completed: list[tuple[_Work, Slot]]) -> None:
        """Average the orientations and untransform, all completed sequences at once; float64
        from here on, so identical predictions give exactly zero differences."""
        rows = torch.stack([part for work, slot in completed for part in work.parts[slot]])
        rows = rows.double().unflatten(0, (-1, self.views))  # (shift rows, orientations, ...)
        if self.views == 2:  # back to forward orientation: flip bins, swap strand-paired tracks
            rows[:, 1] = rows[:, 1].flip(-2).index_select(-1, self.strand_swap)
        predictions = rows.sum(1) / self.views
        if self.untransform is not None:
            predictions = self.untransform(predictions)
        first = 0
        for work, slot in completed:
            n_shifts = len(work.shifts[slot[1]])
            prediction = predictions[first : first + n_shifts]
            first += n_shifts
            work.parts[slot] = []
            work.predictions[slot] = prediction
            if slot[1] != 0:
                self.ready.append((work, slot))
                self.ready_elements += prediction.numel()

    def _pair(self, work: _Work, slot: Slot) -> tuple[torch.Tensor, torch.Tensor, int]:
        """Reference and alternate predictions of one alternate, row for row, as hound_snp pairs
        them; and the step that picks the requested shifts out of compensated rows."""
        model, sequence = slot
        reference = work.predictions[(model, 0)]
        alternate = work.predictions.pop(slot)
        variant = self.prepared.variants[work.encoded.members[sequence - 1]]
        side, step = work.compensated[sequence - 1], 1
        if side is not None and self.options.indel_stitch:
            # left of the variant's bin from the plain shift, right of it from the compensated
            stride = self.prepared.model.stride
            at = (variant.pos - work.encoded.cluster.start - self.crop) // stride
            if side == "ref":
                reference = _stitch(reference, at)
            else:
                alternate = _stitch(alternate, at)
        elif side == "alt":
            if model not in work.repeated:  # one copy serves every alternate of the cluster
                work.repeated[model] = reference.repeat_interleave(2, dim=0)
            reference, step = work.repeated[model], 2
        elif side == "ref":
            alternate, step = alternate.repeat_interleave(2, dim=0), 2
        if variant.flipped:  # predicted with the genome's allele as ALT: swap back
            reference, alternate = alternate, reference
        return reference, alternate, step

    @torch.inference_mode()
    def _score_ready(self) -> None:
        """Score the predicted alternates, across clusters and batches, in few calls."""
        groups: dict[tuple, list] = {}
        for work, slot in self.ready:
            reference, alternate, step = self._pair(work, slot)
            key = (tuple(reference.shape), tuple(alternate.shape), step)
            groups.setdefault(key, []).append((work, slot, reference, alternate))
        for (_ref_shape, _alt_shape, step), members in groups.items():
            alternates = torch.stack([alternate for _, _, _, alternate in members])
            references = [reference for _, _, reference, _ in members]
            if all(reference is references[0] for reference in references):
                reference = references[0]  # broadcasts over the alternates
            else:
                reference = torch.stack(references)
            scores = compute_stats(
                reference,
                alternates,
                self.options.stats,
                self.strand_to,
                self.n_tracks,
                profile_step=step,
            )
            for position, (work, slot, _, _) in enumerate(members):
                work.scores[slot] = {stat: value[position] for stat, value in scores.items()}
                work.unscored -= 1
        self.ready.clear()
        self.ready_elements = 0

    # the loop --------------------------------------------------------------------------------

    def run(self, first_cluster: int = 0) -> Iterator[ClusterScores]:
        prepared = self.prepared
        seq_len = prepared.model.seq_len
        fasta_holder: dict[str, object] = {}

        def produce(number: int) -> EncodedCluster:
            if "fasta" not in fasta_holder:  # pysam handles are not shared across threads
                fasta_holder["fasta"] = open_genome(prepared.genome)
            encoded = encode_cluster(
                fasta_holder["fasta"], prepared, number, prepared.clusters[number], seq_len
            )
            if encoded.sequences is not None:  # the host-side copies happen here, off the loop
                staged = torch.from_numpy(encoded.sequences)
                on_cuda = self.device.type == "cuda"
                encoded.staged = staged.pin_memory() if on_cuda else staged.float()
            return encoded

        numbers = range(first_cluster, len(prepared.clusters))
        prefetcher = _Prefetcher(produce, numbers, depth=1)
        pending: deque = deque()
        in_flight: deque[_Work] = deque()
        try:
            for encoded in prefetcher:
                work = self._start(encoded)
                in_flight.append(work)
                pending.extend(self._rows(work))
                while len(pending) >= self.batch_size:
                    self.run_batch([pending.popleft() for _ in range(self.batch_size)])
                    yield from self._finished(in_flight)
                yield from self._finished(in_flight)
            while pending:
                take = min(self.batch_size, len(pending))
                self.run_batch([pending.popleft() for _ in range(take)])
                yield from self._finished(in_flight)
            self._score_ready()
            yield from self._finished(in_flight)
        finally:
            prefetcher.close()
            fasta = fasta_holder.get("fasta")
            if fasta is not None:
                fasta.close()

    def _finished(self, in_flight: deque[_Work]) -> Iterator[ClusterScores]:
        n_models = len(self.forwards)
        while in_flight and in_flight[0].done:
            work = in_flight.popleft()
            members = work.encoded.members
            if not members:
                yield ClusterScores(work.encoded.number, members, self._empty_scores())
                continue
            scores, per_model = {}, {} if self.options.per_model and n_models > 1 else None
            for stat in self.options.stats:
                stacked = torch.stack(
                    [
                        torch.stack([work.scores[(m, j)][stat] for j in range(1, len(members) + 1)])
                        for m in range(n_models)
                    ]
                )  # (models, members, ...)
                scores[stat] = stacked.mean(0) if n_models > 1 else stacked[0]
                if per_model is not None:
                    per_model[stat] = stacked
            yield ClusterScores(work.encoded.number, members, scores, per_model)

    def _empty_scores(self) -> dict[str, torch.Tensor]:
        shapes = score_shapes(self.prepared)
        return {
            stat: torch.zeros((0, *shape), device=self.device) for stat, shape in shapes.items()
        }


def score_shapes(prepared: Prepared) -> dict[str, tuple[int, ...]]:
    """Shape of one variant's scores, per stat: ``(tracks,)``, or ``(shifts, bins, tracks)``."""
    n_tracks = len(prepared.targets.collapsed_rows)
    profile = (len(prepared.options.shifts), prepared.model.target_length, n_tracks)
    return {
        stat: profile if stat in PROFILE_STATS else (n_tracks,) for stat in prepared.options.stats
    }


def _stitch(predictions: torch.Tensor, at: int) -> torch.Tensor:
    """hound_snp's ``stitch_preds``: from each (plain, compensated) pair of shift rows, the
    plain one's bins before ``at`` and the compensated one's from ``at`` on (Python slicing, so
    a negative ``at`` counts from the end as it does there)."""
    pairs = predictions.unflatten(0, (-1, 2))
    return torch.stack([torch.cat([pair[0][:at], pair[1][at:]]) for pair in pairs])


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


def _fingerprint(prepared: Prepared) -> str:
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
    return hashlib.sha256(json.dumps(description, sort_keys=True).encode()).hexdigest()


def _jsonable(value):
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, dict):
        return {key: _jsonable(item) for key, item in value.items()}
    return value


def _strings(values: Sequence[str]) -> np.ndarray:
    return np.array([value.encode() for value in values], dtype=bytes if values else "S1")


def _create_scores_file(
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
            "flipped": int(sum(v.flipped for v in variants)),
            "model": json.dumps([str(model.path) for model in prepared.models]),
            "models": n_models,
        }
    )
    handle.flush()
    return handle


def _open_partial(
    path: Path, prepared: Prepared, fingerprint: str, shapes: dict[str, tuple[int, ...]]
) -> tuple[h5py.File, int]:
    """Resume a matching partial file, or start a new one; returns it and clusters done."""
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
    return _create_scores_file(path, prepared, fingerprint, shapes), 0


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


def score_snps(
    vcf: str | os.PathLike,
    genome: str | os.PathLike,
    model: str | os.PathLike | Sequence[str | os.PathLike],
    targets: str | os.PathLike | None,
    out: str | os.PathLike,
    options: ScoreOptions = ScoreOptions(),
    progress: Callable[[int, int], None] | None = None,
    commit_seconds: float = 5.0,
) -> ScoreReport:
    """Score every variant of ``vcf`` into ``out`` (``scores.h5``), resuming a killed run.

    Completed clusters are committed to the ``.partial`` file at most every ``commit_seconds``
    (0: after every cluster), and ``progress(clusters_done, clusters_total)`` is called after
    each commit; a rerun resumes after the last committed cluster.
    """
    began = time.perf_counter()
    out = Path(out)
    prepared = prepare(vcf, genome, model, targets, options)
    options = prepared.options
    fingerprint = _fingerprint(prepared)
    partial = partial_path(out)
    try:
        partial.parent.mkdir(parents=True, exist_ok=True)
        handle, done = _open_partial(partial, prepared, fingerprint, score_shapes(prepared))
    except OSError as error:
        raise KennelError(f"{out}: cannot write here ({error.strerror or error})") from None
    row_starts = prepared.row_starts
    n_clusters = len(prepared.clusters)
    try:
        engine = _Engine(prepared, compile_items=int(row_starts[-1] - row_starts[done]))
    except BaseException:
        handle.close()  # the partial file stays for a rerun; its handle must not leak
        raise
    report = ScoreReport(
        variants=int(row_starts[-1]),
        skipped=int((~prepared.keep).sum()),
        clusters=n_clusters,
        resumed_clusters=done,
        compiled=engine.compiled,
    )
    buffered: list[ClusterScores] = []

    def commit() -> None:
        if not buffered:
            return
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
    with handle, contextlib.closing(engine.run(done)) as results:
        for result in results:
            buffered.append(result)
            logged.add(1)
            now = time.perf_counter()
            if now - last_commit >= commit_seconds:
                commit()
                last_commit = now
        commit()
        logged.finish()
        write_quantiles(handle, options.stats)
        handle.attrs["status"] = "complete"
    with atomic_output(out) as temporary:
        os.replace(partial, temporary)
    report.batches = engine.batches
    report.batch_size = engine.runner.rows
    report.forward_seconds = engine.forward_seconds
    report.wall_seconds = time.perf_counter() - began
    logger.info(
        "%s: %d variants in %.1f s (%.1f variants/s, %.1f%% of the time outside the forward)",
        out,
        report.variants,
        report.wall_seconds,
        report.variants_per_second,
        100 * report.outside_forward_share,
    )
    return report


def score_in_memory(prepared: Prepared) -> dict[str, np.ndarray]:
    """Scores ``{stat: (variants, ...) float16}`` without writing a file."""
    engine = _Engine(prepared, compile_items=len(prepared.rows))
    with contextlib.closing(engine.run(0)) as results:
        blocks = [result.scores for result in results if result.members]
    shapes = score_shapes(prepared)
    return {
        stat: to_float16(torch.cat([block[stat] for block in blocks]))
        if blocks
        else np.zeros((0, *shape), dtype=np.float16)
        for stat, shape in shapes.items()
    }

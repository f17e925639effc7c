"""The scoring engine: clusters -> one-hot windows (prefetch thread) -> fixed-shape batches ->
every model -> rc/shift ensembles (:mod:`kennel.snp.ensemble`), untransform -> stats, on the
device.

One input batch serves every model (replicates); out-of-memory halving is
:class:`kennel.feed.BatchRunner`'s, as in classify; the prefetch thread is
:class:`kennel.pipeline.Prefetcher`.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch

from kennel.feed import (
    BatchRunner,
    compile_for,
    configure_inductor_cache,
    has_forward_hooks,
    pad_rows,
    should_compile,
    uses_cuda_graphs,
)
from kennel.gpu import DeviceTimer, PinnedFeed
from kennel.pipeline import Prefetcher
from kennel.snp.encoding import EncodedCluster, cluster_window, encode_cluster, upload_rows
from kennel.snp.ensemble import mean_orientations, plan_shifts, shifted, stitch
from kennel.snp.genome import open_genome
from kennel.snp.options import autocast
from kennel.snp.prepare import Prepared, score_shapes
from kennel.snp.stats import compute_stats, strand_map
from kennel.snp.targets import Untransform

logger = logging.getLogger(__name__)
# Alternates are scored in groups: one call per group, not per cluster or batch; the group
# closes at this many alternates or prediction elements (1 GiB of float64), whichever first.
_SCORE_EVERY = 64
_SCORE_MAX_ELEMENTS = 1 << 27

# ---------------------------------------------------------------------------------------------
# The engine: rows -> batches -> predictions -> scores

Slot = tuple[int, int]  # (model, sequence); sequence 0 is the cluster's reference


@dataclass
class _Work:
    """One cluster in flight on the device."""

    encoded: EncodedCluster
    bases: torch.Tensor | None  # the encoded cluster's bases, float on the device
    shifts: list[list[int]]  # per sequence
    compensated: list[str | None] = field(default_factory=list)  # per alternate: side shifted
    # per alternate: (first, count) of the reference rows it pairs with (plain shifts, or the
    # plain and compensated ones of its deletion)
    reference_rows: list[tuple[int, int]] = field(default_factory=list)
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


class Engine:
    def __init__(self, prepared: Prepared, compile_items: int) -> None:
        options = prepared.options
        self.prepared = prepared
        self.options = options
        self.device = prepared.device
        self.batch_size = options.batch_size
        self.views = 2 if options.rc else 1
        model = prepared.model
        # bases before the first output bin, as hound_snp's target crop times its bin size
        self.crop = (model.seq_len - model.target_length * model.bin_size) // 2
        targets = prepared.targets
        self.n_tracks = len(targets.collapsed_rows)
        self.strand_swap = torch.as_tensor(targets.strand_pair, device=self.device)
        self.strand_to = strand_map(
            targets.collapsed_rows, targets.collapsed_partners, len(targets)
        ).to(self.device)
        self.untransform = (
            Untransform(targets, self.device, options.unscale, options.untransform_old)
            if options.untransform
            else None
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
        self.forward_timer = DeviceTimer(self.device)
        # on CUDA a cluster's bases go up as classify's batches do: from reused pinned buffers
        # (the largest cluster's rows) on a side stream, the forward waiting on that copy
        self.feed = None
        if self.device.type == "cuda":
            rows = upload_rows(prepared, model.seq_len)
            self.feed = PinnedFeed(
                self.device, [((rows, 4), torch.bool)], slots=2, job=self.runner.job
            )
        self.ready: list[tuple[_Work, Slot]] = []  # alternates predicted, not yet scored
        self.ready_elements = 0

    # rows ------------------------------------------------------------------------------------

    @torch.inference_mode()
    def _start(self, encoded: EncodedCluster) -> _Work:
        if encoded.bases is None:
            return _Work(encoded, None, [])
        if self.feed is not None:
            alleles = len(encoded.bases) - self.prepared.model.seq_len
            (bases,) = self.feed.upload(
                [encoded.bases], f"a cluster's window and its {alleles} allele bases"
            )
            bases = bases.float()
        else:
            bases = encoded.staged
        variants = self.prepared.variants
        # hound_snp scores one ALT a record, so "alone in its window" counts records
        singleton = len({variants[i].record for i in encoded.cluster.members}) == 1
        indels = [variants[index].indel_size for index in encoded.members]
        shifts, compensated, reference_rows = plan_shifts(self.options.shifts, indels, singleton)
        slots = [(m, seq) for m in range(len(self.forwards)) for seq in range(len(shifts))]
        return _Work(
            encoded,
            bases,
            shifts,
            compensated,
            reference_rows,
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
        # built per row, so the device holds one window per cluster, not one per variant
        seq_len = self.prepared.model.seq_len
        window = cluster_window(work.bases, work.encoded.splices, seq_len, sequence)
        return shifted(window, work.shifts[sequence][position])

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
            with self.forward_timer(), autocast(self.device, self.options.mix_dtype):
                output = forward(batch)
            self.batches += 1
            return output

        return timed

    @torch.inference_mode()
    def warm_up(self) -> float:
        """Compile, and record CUDA graphs, before the first cluster (:meth:`BatchRunner.warm_up`,
        as classify does): a batch of zeros in the batches' shape and dtype through every
        model, on the thread that runs the batches and outside the forward timer, so the job's
        timings hold its steady state. Returns the seconds spent; an eager CPU run has nothing
        to warm."""
        if not (self.compiled or self.device.type == "cuda"):
            return 0.0
        began = time.perf_counter()
        zeros = torch.zeros((self.batch_size, self.prepared.model.seq_len, 4), device=self.device)
        for model, forward in enumerate(self.forwards):
            with autocast(self.device, self.options.mix_dtype):
                self.runner.warm_up(forward, [zeros], model=model)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter() - began

    def _predict(self, rows: list) -> list[torch.Tensor]:
        """Every model's outputs for ``rows``: one input batch serves all models; an
        out-of-memory error halves the pieces (kennel.feed.BatchRunner, as in classify)."""
        batch = self._batch(rows)
        return [
            self.runner(self._forward(model), [batch], len(rows), model=model).float()
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
        predictions = mean_orientations(rows.unflatten(0, (-1, self.views)), self.strand_swap)
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
        first, count = work.reference_rows[sequence - 1]
        if count != len(reference):  # kept whole otherwise: one tensor broadcasts in scoring
            reference = reference[first : first + count]
        alternate = work.predictions.pop(slot)
        variant = self.prepared.variants[work.encoded.members[sequence - 1]]
        side, step = work.compensated[sequence - 1], 1
        if side is not None and self.options.indel_stitch:
            # left of the variant's bin from the plain shift, right of it from the compensated
            bin_size = self.prepared.model.bin_size
            at = (variant.pos - work.encoded.cluster.start - self.crop) // bin_size
            if side == "ref":
                reference = stitch(reference, at)
            else:
                alternate = stitch(alternate, at)
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
            if encoded.bases is not None and self.feed is None:
                # the CPU's float copy happens here, off the loop
                encoded.staged = torch.from_numpy(encoded.bases).float()
            return encoded

        numbers = range(first_cluster, len(prepared.clusters))
        prefetcher = Prefetcher(produce, numbers, depth=1)
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

"""A leech model in ``kennel classify``: its inputs, its forward and ``leech predict``'s tags.

The feed is kennel's (fixed-shape batches, one compilation, the device stage and the writer
thread); what differs is what is fed and what is written:

* rows are leech's chunks (:class:`~kennel.trna.leech_chunks.LeechChunks`), from a features file
  made by ``kennel extract --bundle`` or extracted in the job (fused). A multiclass or pairwise
  model scores only each read's first chunk, as leech does, so only those are fed; a single
  binary model scores them all.
* the compact per-sample k-mer codes are expanded to leech's one-hot on the device, inside the
  module, so 4 bytes a sample cross to the device instead of 36.
* tags are :mod:`kennel.trna.leech_tags`' (``aa ac am ji jm pn pp [pc]``, ``MP ML``, or
  pairwise votes), appended as leech appends them.
"""

from __future__ import annotations

import logging

import numpy as np
import torch

from kennel.errors import KennelError
from kennel.io.bam import LEECH_BINARY_TAG
from kennel.models.leech_defaults import SIGNAL_KMER_CONTEXT
from kennel.pipeline import FixedBatch
from kennel.trna.leech_levels import UNKNOWN_BASE
from kennel.trna.leech_spec import LeechInputSpec
from kennel.trna.leech_table import table_columns, table_row
from kennel.trna.leech_tags import (
    TagOptions,
    binary_tags,
    call_tags,
    multiclass_call,
    pairwise_tags,
    write_tags,
)
from kennel.trna.model_job import ModelJob, TaggingWriter, count_reasons, count_records

logger = logging.getLogger(__name__)

LEECH_ROWS = ("signal", "sequence", "features")


class SequenceExpansion(torch.nn.Module):
    """leech's sequence input from the compact codes, on whatever device the codes are on.

    ``signal_kmer``: (n, L) base-5 k-mer codes (-1: no base) -> (n, 36, L), channel 4*k + b;
    ``base_onehot``: (n, W) base codes -> (n, 4, W). The same mapping as
    :func:`kennel.trna.leech_chunks.expand_sequence` (the tests hold them equal).
    """

    def __init__(self, seq_encoding: str):
        super().__init__()
        self.kmer = seq_encoding == "signal_kmer"
        positions = sum(SIGNAL_KMER_CONTEXT) + 1
        powers = 5 ** torch.arange(positions - 1, -1, -1, dtype=torch.int32)
        self.register_buffer("powers", powers.reshape(1, -1, 1), persistent=False)
        self.register_buffer(
            "bases", torch.arange(4, dtype=torch.int32).reshape(1, 1, 4, 1), persistent=False
        )

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        codes = codes.to(torch.int32)
        if not self.kmer:
            return (codes[:, None, :] == self.bases[:, 0]).to(torch.float32)
        digits = torch.div(codes[:, None, :], self.powers, rounding_mode="floor") % 5
        digits = torch.where(codes[:, None, :] < 0, UNKNOWN_BASE, digits)
        onehot = digits[:, :, None, :] == self.bases  # (n, positions, 4, L)
        return onehot.reshape(codes.shape[0], -1, codes.shape[-1]).to(torch.float32)


class LeechForward(torch.nn.Module):
    """Expansion and the model's scorer in one module: compiled together, one graph."""

    def __init__(self, scorer: torch.nn.Module, seq_encoding: str):
        super().__init__()
        self.expand = SequenceExpansion(seq_encoding)
        self.scorer = scorer

    def forward(self, signal, sequence, features):
        return self.scorer(signal, self.expand(sequence), features)


def _rows(batches, first_chunk_only: bool, skipped: dict[str, int], tallies: dict[str, int]):
    """Model rows from chunk batches: each read's first chunk only, or every chunk."""
    previous = None
    for chunks in batches:
        count_reasons(skipped, chunks.skipped_reason)
        ids = np.asarray(chunks.read_id).astype(str)
        if first_chunk_only and len(ids):
            # a read's chunks are consecutive (extraction order); its first may have been in
            # the previous batch
            before = np.concatenate([[previous], ids[:-1]]) if previous is not None else None
            keep = ids != before if before is not None else np.r_[True, ids[1:] != ids[:-1]]
            tallies["chunks_not_scored"] = tallies.get("chunks_not_scored", 0) + int((~keep).sum())
        else:
            keep = slice(None)
        if len(ids):
            previous = ids[-1]
        yield {
            "read_id": ids[keep].astype("S36"),
            "base_idx": np.asarray(chunks.base_idx)[keep],
            "junction_indel": np.asarray(chunks.junction_indel)[keep],
            "junction_mapped": np.asarray(chunks.junction_mapped)[keep],
            "signal": np.ascontiguousarray(chunks.signal[keep], np.float32),
            "sequence": np.ascontiguousarray(chunks.sequence[keep]),
            "features": np.ascontiguousarray(chunks.features[keep], np.float32),
        }


def leech_tag_options(model, settings, bundle_path) -> TagOptions:
    """The tag options ``settings`` give ``model``: leech's options that do not apply to this
    kind of model are ignored with a warning where leech predict ignores them, refused where it
    refuses them."""
    from kennel.models.leech_model import BINARY, MULTICLASS, PAIRWISE

    abstain = settings.abstain_on_junction_indel
    if abstain and model.kind == BINARY:
        raise KennelError(
            f"{bundle_path}: abstain_on_junction_indel applies to multiclass models only "
            f"(this is a {model.kind} model), as in leech predict"
        )
    if abstain and model.kind != MULTICLASS:
        # leech predict --all runs a pairwise or one-vs-all bundle without the flag
        logger.warning(
            "%s: abstain_on_junction_indel is ignored for a %s bundle, as leech predict ignores it",
            bundle_path,
            model.kind,
        )
        abstain = False
    if settings.aggregation != "naive" and model.kind != PAIRWISE:
        # leech predict --aggregation only chooses how a whole pairwise bundle votes
        logger.warning(
            "%s: aggregation %s is ignored for a %s model, as leech predict ignores it",
            bundle_path,
            settings.aggregation,
            model.kind,
        )
    return TagOptions(
        min_confidence=settings.min_confidence,
        min_margin=settings.min_margin,
        abstain_on_junction_indel=abstain,
        raw=settings.raw_tags,
        aggregation=settings.aggregation if model.kind == PAIRWISE else "naive",
    )


def leech_job(bam, bundle_path, settings, feature_file, fused) -> ModelJob:
    from kennel.models.leech import load_leech_model
    from kennel.models.leech_model import BINARY
    from kennel.trna.leech_extract import leech_spec_for

    model = load_leech_model(bundle_path, pair=settings.pair)
    expected = leech_spec_for(bundle_path, None, settings.leech_predict, config=model.config)
    skipped: dict[str, int] = {}
    tallies: dict[str, int] = {}
    if feature_file is not None:
        spec = feature_file.spec
        n_rows = len(feature_file)
        count_reasons(skipped, feature_file.skipped()[1])
        batches = feature_file.batches(settings.batch_size)
    else:
        spec = leech_spec_for(bundle_path, fused.kmer_table, settings.leech_predict)
        n_rows = count_records(bam)
        batches = _fused_leech_batches(bam, fused, spec)
    # the k-mer table was checked against the config when the inputs were extracted
    if _without_table(spec) != _without_table(expected):
        where = feature_file.path if feature_file is not None else "the extraction settings"
        raise KennelError(
            f"{bundle_path} takes other inputs than {where} "
            f"(bundle != features: {'; '.join(expected.differences(spec))})"
        )
    binary = model.kind == BINARY
    rows = _rows(batches, not binary, skipped, tallies)
    signal_kmer = spec.seq_encoding == "signal_kmer"
    return ModelJob(
        module=LeechForward(model.module(), spec.seq_encoding),
        source=rows,
        padded=LEECH_ROWS,
        input_dtypes={
            "signal": np.float32,
            "sequence": np.int32 if signal_kmer else np.uint8,
            "features": np.float32,
        },
        input_shapes={
            "signal": (spec.signal_channels, spec.signal_len),
            "sequence": (spec.signal_len,) if signal_kmer else (spec.sequence_shape[1],),
            "features": (spec.feature_rows, spec.feature_width),
        },
        n_rows=n_rows,
        skipped=skipped,
        tallies=tallies,
    )


def leech_tagging(bundle_path, settings) -> tuple:
    """leech's tagging writer for this bundle (with ``settings``' pair), and its marker tag:
    ``MP`` for a binary model, else ``aa``."""
    from kennel.models.leech import load_leech_model
    from kennel.models.leech_model import BINARY

    model = load_leech_model(bundle_path, pair=settings.pair)
    options = leech_tag_options(model, settings, bundle_path)
    writer = lambda *args, **kwargs: LeechTaggingWriter(  # noqa: E731
        *args, model=model, options=options, settings=settings, **kwargs
    )
    return writer, LEECH_BINARY_TAG if model.kind == BINARY else "aa"


def _without_table(spec: LeechInputSpec) -> LeechInputSpec:
    from dataclasses import replace

    return replace(spec, kmer_table_sha256=None)


def _fused_leech_batches(bam, fused, spec):
    """Extraction inside the GPU job, on the CPUs left after the feeder's reservation."""
    from kennel.trna.leech_extract import extract_leech_batches

    yield from extract_leech_batches(
        bam, fused.pod5s, fused.reference, fused.kmer_table, spec, fused.plan()
    )


class LeechTaggingWriter(TaggingWriter):
    """Tags each read leech's way; a binary model's chunks of one read are gathered first
    (they may straddle batches), so a read is written once with all its ``MP``/``ML``. The
    per-read table is leech predict's TSV for a multiclass model
    (:mod:`kennel.trna.leech_table`), else each read's chunk count and tags."""

    def __init__(self, source_bam, output_bam, predictions_tsv, progress, program, *, model,
                 options: TagOptions, settings):  # fmt: skip
        self._model = model
        self._options = options
        self._binary = model.kind == "binary"
        self._multiclass = model.kind == "multiclass"
        self._copy_tags = settings.copy_tags
        self._pending: tuple[str, list[float], list[int]] | None = None
        columns = ["read_id", "chunks", "tags"]
        if self._multiclass:
            charging = any(n.charging_head is not None for n in model.networks.values())
            columns = table_columns(model.class_names, charging, settings.copy_tags)
        super().__init__(
            source_bam, output_bam, predictions_tsv, list(model.class_names), settings,
            progress, program=program, columns=columns,
        )  # fmt: skip

    def write(self, item: tuple[FixedBatch, tuple[np.ndarray, np.ndarray | None]]) -> None:
        batch, (scores, charging) = item
        arrays = batch.arrays
        read_ids = arrays["read_id"][: batch.n_real]
        for i, read_id in enumerate(read_ids):
            read_id = read_id.decode()
            if self._binary:
                base = int(arrays["base_idx"][i])
                if self._pending is not None and self._pending[0] == read_id:
                    self._pending[1].append(float(scores[i, 0]))
                    self._pending[2].append(base)
                    continue
                self._flush()
                self._pending = (read_id, [float(scores[i, 0])], [base])
                continue
            if self._multiclass:
                self._call(read_id, scores[i], arrays, i, charging)
                continue
            else:
                tags = pairwise_tags(
                    scores[i], self._model.pairs, options=self._options,
                    pair_classes=self._model.pair_classes,
                    one_vs_all=self._model.kind == "one_vs_all",
                )  # fmt: skip
            self._tag(read_id, tags, 1)
        self._progress.add(len(read_ids))

    def _call(self, read_id: str, logits, arrays, i: int, charging) -> None:
        """A multiclass model's call on a read's first chunk: its tags and its table row."""
        call, probabilities, names = multiclass_call(logits, self._model.class_names)
        junction = {
            "junction_indel": int(arrays["junction_indel"][i]),
            "junction_mapped": bool(arrays["junction_mapped"][i]),
        }
        level = None if charging is None else float(charging[i])
        tags = call_tags(call, probabilities, names, self._options, charging=level, **junction)
        row = lambda record: table_row(  # noqa: E731
            record, call, probabilities, charging=level, options=self._options,
            copy_tags=self._copy_tags, **junction,
        )  # fmt: skip
        self._tag(read_id, tags, 1, row)

    def _flush(self) -> None:
        if self._pending is not None:
            read_id, logits, bases = self._pending
            self._pending = None
            self._tag(read_id, binary_tags(logits, bases), len(logits))

    def _tag(self, read_id: str, tags, chunks: int, row=None) -> None:
        """Tag ``read_id``'s record; its table row is ``row(record)``, read before the tags
        are set (the tags it copies are the input's), else its chunk count and tags."""
        record = self._advance_to(read_id)
        if row is not None:  # joined as leech joins it: csv would quote a field holding '"'
            self._table.write("\t".join(row(record)) + "\n")
        write_tags(record, tags)
        self._out.write(record)
        self.records_written += 1
        label = next((value for name, value, _ in tags if name == "aa"), "MP/ML")
        self.labels[label] = self.labels.get(label, 0) + 1
        if row is None:
            text = " ".join(f"{name}:{kind}:{_sam_value(value)}" for name, value, kind in tags)
            self._tsv.writerow([read_id, chunks, text])

    def close(self) -> None:
        self._flush()
        super().close()


def _sam_value(value) -> str:
    """A tag value as SAM text (arrays: their subtype, then the values)."""
    import array

    if isinstance(value, array.array):
        return ",".join([value.typecode if value.typecode != "B" else "C", *map(str, value)])
    return str(value)

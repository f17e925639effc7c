"""kennel's own tRNA classifier in ``kennel classify``: the bundle checked against the features
it is fed, one row per read, softmax over the classes, kennel's tags
(:class:`~kennel.trna.model_job.TaggingWriter`). A leech bundle's counterpart is
:mod:`kennel.trna.leech_classify`."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from kennel.errors import KennelError
from kennel.models.bundle import build_model, load_bundle
from kennel.models.trna_classifier import ARCHITECTURE, TrnaTcn
from kennel.trna.features import FeatureBatch, FeatureSpec
from kennel.trna.model_job import (
    FusedExtraction,
    ModelJob,
    TaggingWriter,
    count_reasons,
    count_records,
)


def kennel_job(bam, bundle_path, settings, feature_file, fused) -> ModelJob:
    """kennel's own bundle: one row per read, softmax over classes, kennel's tags."""
    spec = feature_file.spec if feature_file is not None else fused.spec
    model, bundle = load_classifier(
        bundle_path, spec, features_path=feature_file.path if feature_file else None
    )
    skipped: dict[str, int] = {}
    tallies: dict[str, int] = {}  # extraction's own counts (refinement accepted/rejected)
    if feature_file is not None:
        n_rows = len(feature_file)
        tallies.update((k, v) for k, v in feature_file.counts.items() if k.startswith("refine_"))
        count_reasons(skipped, feature_file.skipped()[1])
        batches: Iterator[FeatureBatch] = feature_file.batches(settings.batch_size)
    else:
        n_rows = count_records(bam)
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
        n_rows=n_rows,
        skipped=skipped,
        tallies=tallies,
    )


def kennel_tagging(bundle_path, settings) -> tuple:
    """kennel's tagging writer for this bundle's classes, and its marker tag ``aa``."""
    class_names = list(load_bundle(bundle_path)["metadata"]["class_names"])
    return lambda *args, **kwargs: TaggingWriter(*args, class_names, settings, **kwargs), "aa"


class _Softmaxed(torch.nn.Module):
    """kennel's classifier with its softmax, so every model job returns what its writer needs."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, signal, bases):
        logits, charging = self.model(signal, bases)
        return torch.softmax(logits.float(), dim=-1), charging


def load_classifier(
    bundle_path: str | os.PathLike,
    expected_spec: FeatureSpec,
    features_path: str | os.PathLike | None = None,
) -> tuple[TrnaTcn, dict[str, Any]]:
    """The bundle's classifier in eval mode, after checking it reads ``expected_spec``.

    ``features_path`` (the file ``expected_spec`` came from) only makes the error name it.
    """
    bundle = load_bundle(bundle_path)
    if bundle["architecture"] != ARCHITECTURE:
        raise KennelError(
            f"{bundle_path}: architecture {bundle['architecture']!r} is not a tRNA classifier "
            f"({ARCHITECTURE!r})"
        )
    metadata = bundle.get("metadata", {})
    for key in ("class_names", "feature_spec"):
        if key not in metadata:
            raise KennelError(f"{bundle_path}: bundle metadata lacks {key!r}")
    try:
        trained_on = FeatureSpec.from_json(metadata["feature_spec"])
    except (ValueError, TypeError, KeyError) as error:
        raise KennelError(f"{bundle_path}: unreadable feature spec in bundle ({error})") from None
    if trained_on != expected_spec:
        where = features_path or "the features file"
        raise KennelError(
            f"{bundle_path} was trained on a different feature spec than {where} "
            f"(bundle != features: {'; '.join(trained_on.differences(expected_spec))})"
        )
    model = build_model(bundle, bundle_path)
    if model.n_classes != len(metadata["class_names"]):
        raise KennelError(
            f"{bundle_path}: {len(metadata['class_names'])} class names for a model with "
            f"{model.n_classes} outputs"
        )
    return model, bundle


def _fused_batches(
    bam, fused: FusedExtraction, spec: FeatureSpec, skipped: dict[str, int], tallies: dict
):
    """Extraction inside the GPU job, on the CPUs left after the feeder's reservation."""
    from kennel.trna.extract import extract_features

    plan = fused.plan()
    for batch in extract_features(bam, fused.pod5s, fused.reference, fused.kmer_table, spec, plan):
        count_reasons(skipped, batch.skipped_reason)
        for key, value in batch.tallies.items():
            tallies[key] = tallies.get(key, 0) + value
        yield batch

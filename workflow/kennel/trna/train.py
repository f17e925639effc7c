"""``kennel train``: a tRNA classifier bundle from features files and the simulator's truth.

Training runs on the CPU, deterministically: the same files, seed and thread count give the same
weights. Reads are split into training and held-out sets by a hash of the read id within each
class (stratified; independent of file order and of the seed), and the bundle records the
held-out accuracy and charging MAE next to the feature spec it was trained on.

Negative control (``window_offset``): the signal chunk is centred on the anchor by construction
(512 samples span roughly anchor ± 8 bases), so no part of it is free of the anchor's bases. A
non-zero offset K therefore drops the signal branch and shows the model only per-base features of
the sub-window centred on ``anchor + K`` with the widest half-width h that fits the window:
``h = min(upstream + K, downstream - K)``, relative positions ``K - h .. K + h``. With the default
12-base flanks, K = 9 reads +6..+12 and K = -9 reads -12..-6. The simulator plants its class
signal on anchor ± 3, and base boundaries are only known to a stride (dorado's move table), so
the neighbours ±4 still carry some of it through misplaced samples (K = 8, reading +4..+12,
scored 28-36% on four classes in our runs); |K| ≥ 9 keeps a clean gap and scores near chance.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import inspect
import logging
import math
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from kennel.errors import KennelError
from kennel.io.kmers import file_sha256
from kennel.models.bundle import save_bundle
from kennel.models.trna_classifier import ARCHITECTURE, DWELL_FEATURE, TrnaTcn
from kennel.trna.features import FeatureFile, FeatureSpec

logger = logging.getLogger(__name__)

HOLDOUT_SALT = "kennel-trna-holdout"
TRUTH_COLUMNS = ("read_id", "label", "charging")


# --- inputs ---------------------------------------------------------------------------------


def read_features(
    paths: Sequence[str | os.PathLike],
) -> tuple[FeatureSpec, np.ndarray, np.ndarray, np.ndarray]:
    """All reads of ``paths``: (spec, read ids (str), signal (n, C, T) f16, bases (n, W, F) f16).

    Every file must carry the same feature spec and no read may appear twice.
    """
    if not paths:
        raise KennelError("train: no features files given")
    spec: FeatureSpec | None = None
    first = None
    read_ids, signals, bases = [], [], []
    for path in paths:
        with FeatureFile(path) as features:
            if spec is None:
                spec, first = features.spec, path
            elif features.spec != spec:
                differences = "; ".join(spec.differences(features.spec))
                raise KennelError(
                    f"{path}: feature spec differs from {first}'s ({differences}); "
                    "train on features extracted with one spec"
                )
            for batch in features.batches(4096):
                read_ids.extend(r.decode() for r in batch.read_id)
                signals.append(batch.signal)
                bases.append(batch.bases)
    assert spec is not None
    ids = np.array(read_ids, dtype=object)
    if len(set(read_ids)) != len(read_ids):
        raise KennelError(f"train: a read appears more than once in {', '.join(map(str, paths))}")
    if not read_ids:
        raise KennelError(f"train: no extracted reads in {', '.join(map(str, paths))}")
    return spec, ids, np.concatenate(signals), np.concatenate(bases)


def read_truth(paths: Sequence[str | os.PathLike]) -> dict[str, tuple[str, float | None]]:
    """``read_id -> (label, charging or None)`` from truth TSVs; unlabelled rows are skipped."""
    truth: dict[str, tuple[str, float | None]] = {}
    for path in paths:
        try:
            with open(path, newline="") as handle:
                reader = csv.DictReader(handle, delimiter="\t")
                missing = [c for c in TRUTH_COLUMNS if c not in (reader.fieldnames or ())]
                if missing:
                    raise KennelError(f"{path}: truth table lacks column(s) {', '.join(missing)}")
                for line, row in enumerate(reader, start=2):
                    if not row["label"]:
                        continue
                    try:
                        charging = float(row["charging"]) if row["charging"] else None
                    except ValueError:
                        raise KennelError(
                            f"{path}: line {line}: charging {row['charging']!r} is not a number"
                        ) from None
                    entry = (row["label"], charging)
                    if truth.setdefault(row["read_id"], entry) != entry:
                        raise KennelError(f"{path}: read {row['read_id']}: conflicting truth")
        except OSError as error:
            raise KennelError(f"{path}: unreadable truth table ({error})") from None
    return truth


def heldout_mask(read_ids: Sequence[str], labels: np.ndarray, fraction: float) -> np.ndarray:
    """True for held-out reads: per class, the ``fraction`` of reads with the smallest hash.

    Depends only on the read ids and labels, so a read is held out (or not) whatever the
    file order, shard layout or training seed.
    """
    if not 0.0 < fraction < 1.0:
        raise KennelError(f"train: held-out fraction must be in (0, 1), got {fraction}")
    keys = np.array([hashlib.sha256(f"{HOLDOUT_SALT}:{r}".encode()).hexdigest() for r in read_ids])
    mask = np.zeros(len(read_ids), bool)
    for label in np.unique(labels):
        members = np.flatnonzero(labels == label)
        n_out = min(len(members) - 1, max(1, round(fraction * len(members))))
        mask[members[np.argsort(keys[members], kind="stable")[:n_out]]] = True
    return mask


def offset_view(spec: FeatureSpec, window_offset: int) -> tuple[int, int] | None:
    """The ``[start, stop)`` base sub-window of the negative control (None: the whole window)."""
    if window_offset == 0:
        return None
    if not -spec.upstream <= window_offset <= spec.downstream:
        raise KennelError(
            f"train: window offset {window_offset} leaves the feature window "
            f"(-{spec.upstream}..+{spec.downstream})"
        )
    centre = spec.upstream + window_offset
    half = min(centre, spec.window - 1 - centre)
    return centre - half, centre + half + 1


# --- training -------------------------------------------------------------------------------


@contextlib.contextmanager
def deterministic_torch(threads: int | None) -> Iterator[None]:
    """Deterministic algorithms (and a thread count) for the duration; restored afterwards."""
    was_deterministic = torch.are_deterministic_algorithms_enabled()
    old_threads = torch.get_num_threads()
    torch.use_deterministic_algorithms(True)
    if threads:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(was_deterministic)
        torch.set_num_threads(old_threads)


def _architecture_defaults() -> dict[str, Any]:
    return {
        name: parameter.default
        for name, parameter in inspect.signature(TrnaTcn).parameters.items()
        if parameter.default is not inspect.Parameter.empty
    }


def _normalisation(signal: np.ndarray, bases: np.ndarray) -> dict[str, list[float]]:
    """Per-channel / per-feature mean and SD (dwell on the log scale the model uses)."""
    bases = bases.astype(np.float64)
    bases[..., DWELL_FEATURE] = np.log1p(np.clip(bases[..., DWELL_FEATURE], 0, None))
    signal_mean = [float(signal[:, c].astype(np.float64).mean()) for c in range(signal.shape[1])]
    signal_scale = [float(signal[:, c].astype(np.float64).std()) for c in range(signal.shape[1])]
    flat = bases.reshape(-1, bases.shape[-1])
    return {
        "signal_mean": signal_mean,
        "signal_scale": [s if s > 1e-6 else 1.0 for s in signal_scale],
        "base_mean": flat.mean(axis=0).tolist(),
        "base_scale": [s if s > 1e-6 else 1.0 for s in flat.std(axis=0).tolist()],
    }


def _evaluate(model, signal, bases, labels, charging, n_classes, batch_size=512) -> dict:
    model.eval()
    predicted, charged = [], []
    with torch.no_grad():
        for start in range(0, len(labels), batch_size):
            logits, level = model(
                signal[start : start + batch_size], bases[start : start + batch_size]
            )
            predicted.append(logits.argmax(dim=1))
            if level is not None:
                charged.append(level)
    predicted = torch.cat(predicted)
    correct = predicted == labels
    per_class = [
        float(correct[labels == k].float().mean()) if bool((labels == k).any()) else math.nan
        for k in range(n_classes)
    ]
    metrics = {"accuracy": float(correct.float().mean()), "per_class_accuracy": per_class}
    if charged:
        metrics["charging_mae"] = float((torch.cat(charged) - charging).abs().mean())
    return metrics


def train_bundle(
    feature_paths: Sequence[str | os.PathLike],
    truth_paths: Sequence[str | os.PathLike],
    output: str | os.PathLike,
    *,
    epochs: int = 8,
    seed: int = 1,
    batch_size: int = 64,
    learning_rate: float = 3e-3,
    weight_decay: float = 1e-4,
    charging_weight: float = 10.0,
    holdout_fraction: float = 0.2,
    hyperparameters: Mapping[str, Any] | None = None,
    window_offset: int = 0,
    threads: int | None = None,
    command: str | None = None,
) -> dict[str, Any]:
    """Train a ``trna_tcn`` bundle at ``output``; returns the held-out metrics.

    ``hyperparameters`` override the architecture's defaults (``channels``, ``dilations``, ...);
    the input shape, class count, normalisation and view come from the data. Set ``threads`` for
    bit-reproducible weights across machines (results depend on the thread count).
    """
    started = time.perf_counter()
    if epochs < 1 or batch_size < 1:
        raise KennelError("train: epochs and batch size must be positive")
    spec, read_ids, signal_f16, bases_f16 = read_features(feature_paths)
    truth = read_truth(truth_paths)
    unknown = [r for r in read_ids if r not in truth]
    if unknown:
        raise KennelError(
            f"train: {len(unknown)} of {len(read_ids)} reads have no label in "
            f"{', '.join(map(str, truth_paths))} (first: {unknown[0]})"
        )
    label_names = np.array([truth[r][0] for r in read_ids])
    class_names = sorted(set(label_names.tolist()))
    if len(class_names) < 2:
        raise KennelError(f"train: need at least two classes, the truth has {class_names}")
    labels_np = np.searchsorted(np.array(class_names), label_names)
    levels = [truth[r][1] for r in read_ids]
    use_charging = (hyperparameters or {}).get("charging_head", True)
    if use_charging and any(level is None for level in levels):
        raise KennelError(
            "train: some reads have no charging level; pass charging_head=False "
            "(--no-charging-head) to train the classifier alone"
        )
    heldout = heldout_mask(read_ids, labels_np, holdout_fraction)
    view = offset_view(spec, window_offset)
    start, stop = view or (0, spec.window)

    train_rows = np.flatnonzero(~heldout)
    normalisation = _normalisation(signal_f16[train_rows], bases_f16[train_rows, start:stop])
    unknown_options = set(hyperparameters or {}) - set(_architecture_defaults())
    if unknown_options:
        raise KennelError(
            f"train: unknown {ARCHITECTURE} hyperparameter(s): {', '.join(sorted(unknown_options))}"
        )
    # every constructor argument is recorded, so a bundle never depends on today's defaults
    model_hyperparameters = {
        **_architecture_defaults(),
        "window": spec.window,
        "chunk_length": spec.chunk_length,
        "signal_channels": len(spec.signal_channels),
        "base_features": len(spec.base_features),
        **dict(hyperparameters or {}),
        "n_classes": len(class_names),
        "use_signal": view is None,
        "bases_view": list(view) if view else None,
        **normalisation,
    }
    for key in ("dilations", "base_dilations"):
        model_hyperparameters[key] = [int(d) for d in model_hyperparameters[key]]

    signal = torch.from_numpy(signal_f16.astype(np.float32))
    bases = torch.from_numpy(bases_f16.astype(np.float32))
    labels = torch.from_numpy(labels_np.astype(np.int64))
    charging = torch.tensor([np.nan if v is None else v for v in levels], dtype=torch.float32)
    train_index = torch.from_numpy(train_rows)
    test_index = torch.from_numpy(np.flatnonzero(heldout))

    with deterministic_torch(threads):
        torch.manual_seed(seed)
        model = TrnaTcn(**model_hyperparameters)
        order = torch.Generator().manual_seed(seed)
        optimiser = torch.optim.AdamW(
            model.parameters(), lr=learning_rate, weight_decay=weight_decay
        )
        steps = math.ceil(len(train_index) / batch_size)
        schedule = torch.optim.lr_scheduler.OneCycleLR(
            optimiser, max_lr=learning_rate, total_steps=epochs * steps
        )
        history = []
        for epoch in range(epochs):
            model.train()
            total, seen = 0.0, 0
            for batch in train_index[torch.randperm(len(train_index), generator=order)].split(
                batch_size
            ):
                logits, level = model(signal[batch], bases[batch])
                loss = F.cross_entropy(logits, labels[batch])
                if level is not None:
                    loss = loss + charging_weight * F.mse_loss(level, charging[batch])
                optimiser.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimiser.step()
                schedule.step()
                total += float(loss.detach()) * len(batch)
                seen += len(batch)
            scores = _evaluate(
                model,
                signal[test_index],
                bases[test_index],
                labels[test_index],
                charging[test_index],
                len(class_names),
            )
            history.append({"epoch": epoch + 1, "loss": total / seen, **scores})
            logger.info(
                "epoch %d/%d: loss %.4f, held-out accuracy %.4f%s",
                epoch + 1,
                epochs,
                total / seen,
                scores["accuracy"],
                f", charging MAE {scores['charging_mae']:.4f}" if "charging_mae" in scores else "",
            )

    final = history[-1]
    metrics: dict[str, Any] = {
        "heldout_accuracy": final["accuracy"],
        "heldout_per_class_accuracy": dict(
            zip(class_names, final["per_class_accuracy"], strict=True)
        ),
        "heldout_charging_mae": final.get("charging_mae"),
        "chance_accuracy": float(np.bincount(labels_np[heldout]).max() / heldout.sum()),
        "n_train": len(train_index),
        "n_heldout": len(test_index),
        "final_train_loss": final["loss"],
        "window_offset": window_offset,
        "bases_seen": [start - spec.upstream, stop - 1 - spec.upstream],
        "uses_signal": view is None,
    }
    save_bundle(
        output,
        model,
        model_hyperparameters,
        metadata={
            "class_names": class_names,
            "feature_spec": spec.to_json(),
            "input_normalisation": {"dwell": "log1p", **normalisation},
            "charging_head": model.charging is not None,
            "window_offset": window_offset,
            "heldout_metrics": metrics,
        },
        provenance={
            "command": command or f"kennel.trna.train.train_bundle(seed={seed}, epochs={epochs})",
            "seed": seed,
            "threads": threads or torch.get_num_threads(),
            "training": {
                "epochs": epochs,
                "batch_size": batch_size,
                "learning_rate": learning_rate,
                "weight_decay": weight_decay,
                "charging_weight": charging_weight,
                "holdout_fraction": holdout_fraction,
                "holdout_salt": HOLDOUT_SALT,
            },
            "training_files": [
                {"path": str(p), "sha256": file_sha256(p)} for p in [*feature_paths, *truth_paths]
            ],
        },
    )
    metrics["seconds"] = time.perf_counter() - started
    return metrics


def metrics_line(metrics: Mapping[str, Any]) -> str:
    """One line of the held-out metrics, as ``kennel train`` prints them."""
    mae = metrics.get("heldout_charging_mae")
    return (
        f"held-out accuracy {metrics['heldout_accuracy']:.4f} on {metrics['n_heldout']} reads "
        f"(chance {metrics['chance_accuracy']:.4f}); charging MAE "
        f"{'n/a' if mae is None else f'{mae:.4f}'}; bases seen {metrics['bases_seen'][0]:+d}.."
        f"{metrics['bases_seen'][1]:+d}, signal {'yes' if metrics['uses_signal'] else 'no'}"
    )

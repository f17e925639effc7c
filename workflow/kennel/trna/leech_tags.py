"""The BAM tags ``leech predict`` (0.16.0) writes for a read, computed from model outputs.

Pure functions: given what a leech model said about a read's chunks, they return the tags leech
appends to the read's record, as ``(tag, value, value_type)`` tuples in leech's order and in the
form ``pysam``'s ``get_tags(with_value_type=True)`` reads them back (arrays are
``array.array`` with value type ``"B"``; ``--raw`` floats are float32 values, type ``"f"``).
:func:`write_tags` puts them on a record.

Three shapes of output, as in leech:

* a **multiclass** model: one call per read from its first chunk (the 5'-most accepted motif
  hit): ``aa ac am [ji jm] pn pp [pc]``;
* a **single binary** model: every accepted chunk, ``MP`` (focus bases, ascending) and ``ML``
  (P(label 1) as uint8, truncated);
* a **pairwise** (or one-vs-all) bundle run as a whole: votes over the pair networks' outputs
  on the read's first chunk (leech's naive, weighted or tournament aggregation),
  ``aa ac am pn pp``.

Probabilities are computed with torch on float32, as leech does, then carried as Python
floats (float64) for the margins, votes and 0-255 scaling.
"""

from __future__ import annotations

import array
import math
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from kennel.models.leech_defaults import AGGREGATIONS

BELOW_THRESHOLD = "unc"  # the call written when a read fails --min-confidence/--min-margin

# the tournament's second round keeps this many classes (leech's top_k; no option sets it)
TOURNAMENT_FINALISTS = 5

Tag = tuple[str, Any, str]


@dataclass(frozen=True)
class TagOptions:
    """``leech predict``'s options that change tags. Thresholds are in 0-255 units, compared
    with the uint8-scaled values even when ``raw`` writes floats."""

    min_confidence: int = 0
    min_margin: int = 0
    abstain_on_junction_indel: bool = False
    raw: bool = False
    aggregation: str = "naive"  # pairwise bundles: one of AGGREGATIONS


def to_uint8(value: float) -> int:
    """leech's 0-255 encoding of a probability-like value: Python ``round`` (half to even) of
    ``value * 255`` in float64, clamped to [0, 255]."""
    return int(min(255, max(0, round(value * 255))))


def to_uint8_truncated(value: float) -> int:
    """The ``ML`` encoding of a single binary model: ``int`` (truncation) of ``value * 255``."""
    return int(min(255, max(0, value * 255)))


def _float32(value: float) -> float:
    # what a BAM "f" tag holds, read back as a Python float
    return float(np.float32(value))


def _as_logits(logits: Any) -> torch.Tensor:
    return torch.as_tensor(np.asarray(logits, dtype=np.float32)).reshape(-1)


def softmax(logits: Any) -> list[float]:
    """Class probabilities of one chunk, float32 softmax as leech computes it."""
    return torch.softmax(_as_logits(logits).unsqueeze(0), dim=-1)[0].tolist()


def sigmoid(logits: Any) -> list[float]:
    """Per-output probabilities, float32 sigmoid as leech computes it."""
    return torch.sigmoid(_as_logits(logits)).tolist()


def _call_tags(
    call: str,
    confidence: float,
    names: str,
    probabilities: Sequence[float],
    options: TagOptions,
    junction_indel: int | None = None,
    junction_mapped: bool = False,
    charging: float | None = None,
) -> list[Tag]:
    """The tags of one call (leech's ``_write_prediction_tags``)."""
    margin = margin_of(probabilities)
    margin_u8, confidence_u8 = to_uint8(margin), to_uint8(confidence)
    margin_ok = margin_u8 >= options.min_margin
    if options.abstain_on_junction_indel:
        # the margin only has to hold where the CCA junction itself looks damaged
        margin_ok = margin_ok or not junction_disrupted(junction_indel, junction_mapped)
    passed = confidence_u8 >= options.min_confidence and margin_ok

    tags: list[Tag] = [("aa", call if passed else BELOW_THRESHOLD, "Z")]
    if options.raw:
        tags += [("ac", _float32(confidence), "f"), ("am", _float32(margin), "f")]
    else:
        tags += [("ac", confidence_u8, "C"), ("am", margin_u8, "C")]
    if junction_indel is not None:
        tags += [("ji", int(junction_indel), "i"), ("jm", int(bool(junction_mapped)), "C")]
    tags.append(("pn", names, "Z"))
    if options.raw:
        tags.append(("pp", array.array("f", probabilities), "B"))
    else:
        tags.append(("pp", array.array("B", [to_uint8(p) for p in probabilities]), "B"))
    if charging is not None:
        tags.append(
            ("pc", _float32(charging), "f") if options.raw else ("pc", to_uint8(charging), "C")
        )
    return tags


def multiclass_tags(
    logits: Any,
    class_names: Sequence[str],
    junction_indel: int | None = None,
    junction_mapped: bool = False,
    options: TagOptions = TagOptions(),
    charging: float | None = None,
) -> list[Tag]:
    """Tags for a read from its first chunk's class logits (after any calibration).

    ``class_names`` in label-index order; ``junction_indel``/``junction_mapped`` are the motif
    junction's measured indel and whether it was measured (``None``: no ``ji``/``jm``);
    ``charging`` the charging-level head's output, if the model has one (``pc``).
    """
    call, probabilities, names = multiclass_call(logits, class_names)
    return call_tags(
        call,
        probabilities,
        names,
        options,
        junction_indel=junction_indel,
        junction_mapped=junction_mapped,
        charging=charging,
    )


def call_tags(
    call: str,
    probabilities: Sequence[float],
    names: Sequence[str],
    options: TagOptions,
    junction_indel: int | None = None,
    junction_mapped: bool = False,
    charging: float | None = None,
) -> list[Tag]:
    """The tags of a multiclass call (:func:`multiclass_call`)."""
    return _call_tags(
        call,
        max(probabilities),
        ",".join(names),
        probabilities,
        options,
        junction_indel=junction_indel,
        junction_mapped=junction_mapped,
        charging=charging,
    )


def multiclass_call(logits: Any, class_names: Sequence[str]) -> tuple[str, list[float], list[str]]:
    """A multiclass model's call on one chunk, its class probabilities and the class names
    (an output without a name is named by its index, as leech names it)."""
    probabilities = softmax(logits)
    # argmax takes the first of equal maxima, as numpy's does in leech
    best = max(range(len(probabilities)), key=probabilities.__getitem__)
    names = [str(name) for name in class_names]
    call = names[best] if best < len(names) else str(best)
    names += [str(i) for i in range(len(names), len(probabilities))]
    return call, probabilities, names


def margin_of(probabilities: Sequence[float]) -> float:
    """The best probability less the second best (1 for a single output), as leech takes it."""
    ranked = sorted(probabilities, reverse=True)
    return ranked[0] - ranked[1] if len(ranked) > 1 else 1.0


def junction_disrupted(junction_indel: int | None, junction_mapped: bool) -> bool:
    """Whether the CCA junction looks damaged (unmapped, or an indel measured there): where
    abstain_on_junction_indel makes the margin count."""
    return not junction_mapped or (junction_indel is not None and junction_indel != 0)


def binary_tags(logits: Sequence[Any], base_indices: Sequence[int]) -> list[Tag]:
    """``MP``/``ML`` for a read from a single binary model's logit on each of its chunks.

    ``base_indices[i]`` is chunk ``i``'s focus base (index into the aligned reference slice);
    chunks are listed in the order they were scored, and equal bases keep that order.
    """
    if len(logits) != len(base_indices):
        raise ValueError(f"{len(logits)} logits for {len(base_indices)} focus bases")
    probabilities = sigmoid(logits)
    order = sorted(range(len(probabilities)), key=lambda i: base_indices[i])
    return [
        ("MP", array.array("i", [int(base_indices[i]) for i in order]), "B"),
        ("ML", array.array("B", [to_uint8_truncated(probabilities[i]) for i in order]), "B"),
    ]


def _split_pair(pair: str) -> tuple[str, str]:
    negative, _, positive = pair.partition("_")
    return negative, positive


def pairwise_tags(
    pair_logits: Sequence[Any],
    pairs: Sequence[str],
    options: TagOptions = TagOptions(),
    pair_classes: Mapping[str, Sequence[str]] | Callable[[str], Sequence[str]] | None = None,
    one_vs_all: bool = False,
) -> list[Tag]:
    """Tags for a read from each pair network's logit on its first chunk (after Platt scaling).

    Pair ``A_B`` votes ``1 - p`` for its label-0 class and ``p`` for its label-1 class; the most
    voted class wins, ``ac`` is its share of all votes (see :func:`pairwise_votes` for
    ``options.aggregation``). With ``one_vs_all``, pair ``A_notA`` scores ``1 - p`` for ``A``
    and ``ac`` is the best score (leech has no aggregation choice there).
    ``pp`` holds the pair sigmoids, ``am`` the margin between the two highest of them.
    ``pair_classes`` gives each pair's ``(label 0, label 1)`` names (a bundle's ``pair_labels``);
    pairs it lacks are split at their first ``_``, as leech does.
    """
    if len(pair_logits) != len(pairs):
        raise ValueError(f"{len(pair_logits)} logits for {len(pairs)} pairs")

    def classes(pair: str) -> tuple[str, str]:
        found = None
        if callable(pair_classes):
            found = pair_classes(pair)
        elif pair_classes is not None:
            found = pair_classes.get(pair)
        if found is not None and len(found) == 2:
            return str(found[0]), str(found[1])
        return _split_pair(pair)

    probabilities = sigmoid(pair_logits)
    sides = [classes(pair) for pair in pairs]
    if one_vs_all:
        scores = {negative: 1.0 - p for (negative, _), p in zip(sides, probabilities, strict=True)}
        call = max(scores, key=scores.__getitem__)
        confidence = scores[call]
    else:
        call, confidence = pairwise_call(sides, probabilities, options.aggregation)
    return _call_tags(call, confidence, ",".join(pairs), probabilities, options)


def pairwise_call(
    sides: Sequence[tuple[str, str]], probabilities: Sequence[float], aggregation: str = "naive"
) -> tuple[str, float]:
    """The most voted class (the first of equal maxima) and its share of all votes, in float64
    to the last bit as leech computes it (see :func:`pairwise_votes` for the arguments)."""
    votes = pairwise_votes(sides, probabilities, aggregation)
    call = max(votes, key=votes.__getitem__)
    total = _float_sum(votes.values())
    return call, (votes[call] / total if total > 0 else 0.0)


def _float_sum(values: Iterable[float]) -> float:
    """``sum`` of floats as Python 3.12 and later compute it, whatever Python runs kennel.

    leech runs on 3.12 or later, where ``sum`` of floats is compensated (Neumaier's variant of
    Kahan's summation); 3.11's plain running sum differs in the last bit for some votes (9 of
    the 183 confidences in tests/leech/aggregation_reference.json)."""
    if sys.version_info >= (3, 12):
        return sum(values)
    total = compensation = 0.0
    for value in values:
        step = total + value
        # the low-order bits lost in this step, from whichever addend is the smaller
        if abs(total) >= abs(value):
            compensation += (total - step) + value
        else:
            compensation += (value - step) + total
        total = step
    return total + compensation if compensation and math.isfinite(compensation) else total


def pairwise_votes(
    sides: Sequence[tuple[str, str]], probabilities: Sequence[float], aggregation: str = "naive"
) -> dict[str, float]:
    """Each class's votes, in the order that breaks ties (the first of equal maxima wins).

    ``sides`` are the pairs' ``(label 0, label 1)`` classes, ``probabilities`` their sigmoids.
    ``naive``: pair ``A_B`` gives ``1 - p`` to ``A`` and ``p`` to ``B``; classes in first-seen
    order. ``weighted``: the same votes times ``|2p - 1|``, so a pair that cannot tell its two
    classes apart (p near 0.5) hardly votes. ``tournament``: the naive votes pick the
    :data:`TOURNAMENT_FINALISTS` best classes (ties keep first-seen order), then only the pairs
    between two finalists vote again, naively; classes in finalist rank order.
    """
    if aggregation not in AGGREGATIONS:
        choices = ", ".join(AGGREGATIONS)
        raise ValueError(f"aggregation must be one of {choices}, not {aggregation!r}")
    if aggregation == "tournament":
        first = pairwise_votes(sides, probabilities)
        # sorted() is stable with reverse=True too: equal votes stay in first-seen order
        ranked = sorted(first, key=first.__getitem__, reverse=True)
        return _tally(sides, probabilities, ranked[:TOURNAMENT_FINALISTS], weighted=False)
    seen = dict.fromkeys(name for side in sides for name in side)
    return _tally(sides, probabilities, list(seen), weighted=aggregation == "weighted")


def _tally(sides, probabilities, voters: list[str], weighted: bool) -> dict[str, float]:
    """Votes of the pairs whose two classes are both ``voters``, summed pair by pair in float64
    (the order of the sums is leech's, so the confidence matches to the last bit)."""
    votes = dict.fromkeys(voters, 0.0)
    for (negative, positive), p in zip(sides, probabilities, strict=True):
        if negative not in votes or positive not in votes:
            continue
        weight = abs(2.0 * p - 1.0) if weighted else 1.0
        votes[negative] += (1.0 - p) * weight
        votes[positive] += p * weight
    return votes


def write_tags(segment: Any, tags: Sequence[Tag]) -> None:
    """Append ``tags`` to a ``pysam.AlignedSegment`` (arrays keep their own element type)."""
    for name, value, value_type in tags:
        segment.set_tag(name, value, None if isinstance(value, array.array) else value_type)

"""``kennel trna-report``: across samples, one table and four plots for ``snakemake --report``
(class composition, records by fate, confidence/margin tails or a binary model's
probabilities, charging per class), from the tables ``kennel summarize`` wrote per sample.
"""

from __future__ import annotations

import csv
import os
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence

import numpy as np

from kennel.io.atomic import atomic_outputs
from kennel.trna.summary import BINARY_CATEGORY, BINARY_SCORED, LEVELS


def _read_tsv(paths: Sequence[str | os.PathLike]) -> list[dict[str, str]]:
    rows = []
    for path in paths:
        with open(path) as handle:
            rows.extend(csv.DictReader(handle, delimiter="\t"))
    return rows


def _figure_out(figure, path) -> None:
    import matplotlib.pyplot as plt

    figure.savefig(path, format="png", bbox_inches="tight", dpi=120)
    plt.close(figure)


def _note(path, text: str) -> None:
    """A plot with nothing to draw says why, instead of empty axes."""
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(6, 2))
    axis.axis("off")
    axis.text(0.5, 0.5, text, ha="center", va="center")
    _figure_out(figure, path)


def _fates(counts: list[dict[str, str]], samples: Sequence[str]):
    """Rows ``(category, {sample: records})`` in reading order: called, unc, skipped by
    reason, passthrough by reason; categories that are zero in every sample are left out."""
    rows: dict[str, Counter[str]] = defaultdict(Counter)
    for row in counts:
        fate, reason, n = row["fate"], row["reason"], int(row["records"])
        if fate == "classified":
            category = {"unc": "classified: unc", BINARY_SCORED: BINARY_CATEGORY}.get(
                reason, "classified: called"
            )
            rows[category][row["sample"]] += n
        elif fate in ("skipped", "passthrough"):
            rows[f"{fate}: {reason}"][row["sample"]] += n
    order = ["classified: called", BINARY_CATEGORY, "classified: unc"]
    order += sorted(k for k in rows if k.startswith("skipped"))
    order += [k for k in rows if k.startswith("passthrough")]  # in the counts files' order
    return [(name, rows[name]) for name in order if any(rows[name][s] for s in samples)]


def _histograms(distributions: list[dict[str, str]], measure: str) -> dict:
    """``{(sample, label): counts per uint8 level}`` for one measure."""
    out: dict[tuple[str, str], np.ndarray] = {}
    for row in distributions:
        if row["measure"] == measure:
            key = (row["sample"], row["label"])
            out.setdefault(key, np.zeros(LEVELS, np.int64))[int(row["level"])] += int(row["reads"])
    return out


def _bin_shares(counts: np.ndarray, bins: int) -> np.ndarray:
    """Counts per uint8 level as the share in each of ``bins`` equal bins of [0, 1] (level L
    is L/255, in bin floor(L * bins / 255), the last bin closed)."""
    bin_of = np.minimum(np.arange(LEVELS) * bins // (LEVELS - 1), bins - 1)
    return np.bincount(bin_of, weights=counts, minlength=bins) / counts.sum()


def trna_report(
    classes_tables: Sequence[str | os.PathLike],
    distributions_tables: Sequence[str | os.PathLike],
    counts_tables: Sequence[str | os.PathLike],
    table_out: str | os.PathLike,
    composition_png: str | os.PathLike,
    fates_png: str | os.PathLike,
    confidence_png: str | os.PathLike,
    charging_png: str | os.PathLike,
    min_confidence: int = 0,
    min_margin: int = 0,
    binary_classes: Callable[[], Sequence[str]] | None = None,
) -> None:
    """The cross-sample table and the report's four plots. ``binary_classes`` gives a leech
    binary model's two class names (asked for only when its probabilities are there to plot)."""
    import matplotlib

    matplotlib.use("Agg")

    classes = _read_tsv(classes_tables)
    distributions = _read_tsv(distributions_tables)
    counts = _read_tsv(counts_tables)
    samples = sorted(
        {row["sample"] for row in counts}
        | {row["sample"] for row in classes}
        | {row["sample"] for row in distributions}
    )
    labels = sorted({row["label"] for row in classes})
    outputs = [table_out, composition_png, fates_png, confidence_png, charging_png]
    with atomic_outputs(*outputs) as (table, composition, fates, confidence, charging):
        with open(table, "w", newline="") as handle:
            writer = csv.writer(handle, delimiter="\t", lineterminator="\n")
            writer.writerow(["label", *samples])
            reads = {(row["sample"], row["label"]): row["reads"] for row in classes}
            for label in labels:
                writer.writerow([label, *(reads.get((s, label), "0") for s in samples)])
        draw_composition, draw_confidence = _composition_and_confidence(
            classes, distributions, samples, labels, (min_confidence, min_margin), binary_classes
        )
        draw_composition(composition)
        _plot_fates(fates, counts, samples)
        draw_confidence(confidence)
        _plot_charging(charging, distributions, samples)


def _composition_and_confidence(
    classes, distributions, samples, labels, thresholds, binary_classes
) -> tuple[Callable, Callable]:
    """How to draw the composition and confidence plots for what the summaries hold: a
    caller's, a leech binary model's (it calls nothing, each chunk has a P), or notes."""
    probabilities = _histograms(distributions, "chunk_probability")
    if _histograms(distributions, "confidence"):
        return (
            lambda path: _plot_composition(path, classes, samples, labels),
            lambda path: _plot_tails(path, distributions, samples, *thresholds),
        )
    if probabilities:
        names = binary_classes() if binary_classes is not None else ("label 0", "label 1")
        return (
            lambda path: _plot_leaning(path, probabilities, samples, names),
            lambda path: _plot_binary(path, probabilities, samples, names),
        )
    if BINARY_SCORED in labels:  # summarized before summaries kept a binary model's ML
        stale = (
            "a binary model's reads (MP/ML) with no ML distribution: "
            "rerun with --forcerun summarize to plot it"
        )
        return (lambda path: _note(path, stale), lambda path: _note(path, stale))
    return (
        lambda path: _plot_composition(path, classes, samples, labels),
        lambda path: _note(path, "no called reads: no confidence or margin (ac/am tags) to plot"),
    )


def _plot_composition(path, classes, samples, labels) -> None:
    import matplotlib.pyplot as plt

    if not labels:
        _note(path, "no classified reads in any sample: no class composition to plot")
        return
    fractions = {(row["sample"], row["label"]): float(row["fraction"]) for row in classes}
    figure, axis = plt.subplots(figsize=(1.5 + 1.2 * len(samples), 4))
    bottom = np.zeros(len(samples))
    colours = plt.get_cmap("tab10" if len(labels) <= 10 else "tab20")
    for index, label in enumerate(labels):
        heights = np.array([fractions.get((s, label), 0.0) for s in samples])
        colour = "0.6" if label == "unc" else colours(index % colours.N)
        axis.bar(samples, heights, bottom=bottom, label=label, color=colour)
        bottom += heights
    axis.set_ylabel("fraction of classified reads")
    axis.set_title("Class composition per sample")
    axis.legend(bbox_to_anchor=(1.02, 1), loc="upper left", fontsize="small")
    _figure_out(figure, path)


def _plot_fates(path, counts, samples) -> None:
    """Every record of each sample by fate and reason, on a log axis so that a handful of
    unmapped or skipped reads stays visible next to thousands classified."""
    import matplotlib.pyplot as plt

    rows = _fates(counts, samples)
    totals = {
        row["sample"]: int(row["records"])
        for row in counts
        if row["fate"] == "input" and row["reason"] == "all"
    }
    height = 0.8 / max(len(samples), 1)
    figure, axis = plt.subplots(figsize=(8, 1.0 + 0.35 * max(len(rows), 1) * max(len(samples), 1)))
    for index, sample in enumerate(samples):
        values = [per_sample[sample] for _, per_sample in rows]
        positions = np.arange(len(rows)) + index * height
        bars = axis.barh(
            positions, values, height=height, label=f"{sample} ({totals.get(sample, 0):,} records)"
        )
        axis.bar_label(
            bars, labels=[f"{v:,}" if v else "" for v in values], fontsize="x-small", padding=2
        )
    axis.set_yticks(
        np.arange(len(rows)) + height * (len(samples) - 1) / 2, [name for name, _ in rows]
    )
    axis.invert_yaxis()
    axis.set_xscale("log")
    axis.set_xlim(0.8, max([max(p.values(), default=1) for _, p in rows] + [1]) * 3)
    axis.set_xlabel("records (log scale)")
    axis.set_title("Every input record by fate and reason")
    axis.legend(fontsize="small", loc="lower right")
    _figure_out(figure, path)


def _plot_tails(path, distributions, samples, min_confidence: int, min_margin: int) -> None:
    """Confidence and margin as the share of called reads at or below each value, on a log
    axis: the low tail (the reads a user worries about) spans decades instead of one bin."""
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    x = np.arange(LEVELS) / (LEVELS - 1)
    floor = 1.0
    for axis, measure, threshold in zip(
        axes, ("confidence", "margin"), (min_confidence, min_margin), strict=True
    ):
        histograms = _histograms(distributions, measure)
        for sample in samples:
            pooled = sum(
                (h for (s, _), h in histograms.items() if s == sample), np.zeros(LEVELS, np.int64)
            )
            n = int(pooled.sum())
            if not n:
                continue
            ecdf = np.cumsum(pooled) / n
            floor = min(floor, 0.5 / n)
            below = {v: ecdf[round(v * 255)] for v in (0.5, 0.9)}
            # zero (no read at or below) has no place on a log axis: the line starts at the
            # lowest value any read has
            shown = np.where(ecdf > 0, ecdf, np.nan)
            axis.step(
                x, shown, where="post",
                label=f"{sample} (n={n:,}; ≤0.5: {below[0.5]:.1%}, ≤0.9: {below[0.9]:.1%})",
            )  # fmt: skip
        if threshold:
            axis.axvline(threshold / 255, color="0.3", linestyle="--", linewidth=1)
            axis.text(threshold / 255, 0.02, f" unc below {threshold}/255", fontsize="x-small",
                      color="0.3", transform=axis.get_xaxis_transform())  # fmt: skip
        tag = "ac" if measure == "confidence" else "am"
        axis.set_xlabel(f"{measure} ({tag} tag)")
        axis.set_xlim(0, 1)
        axis.set_title(f"{measure.capitalize()}: share of called reads at or below")
        axis.legend(fontsize="x-small", loc="upper left")
        axis.grid(True, which="major", alpha=0.3)
    axes[0].set_yscale("log")
    axes[0].set_ylim(floor, 1.5)
    axes[0].set_ylabel("cumulative share of reads (log scale)")
    _figure_out(figure, path)


def _plot_charging(path, distributions, samples, bins: int = 20) -> None:
    """Charging-level distribution per called class, one panel per class, one line per
    sample (share of that class's reads per bin)."""
    import matplotlib.pyplot as plt

    histograms = _histograms(distributions, "charging")
    labels = sorted({label for _, label in histograms})
    if not labels:
        _note(path, "no charging levels: this bundle has no charging head (no pc tag)")
        return
    columns = min(4, len(labels))
    rows = -(-len(labels) // columns)
    figure, axes = plt.subplots(
        rows, columns, figsize=(3.2 * columns, 2.4 * rows), sharex=True, squeeze=False
    )
    edges = np.linspace(0, 1, bins + 1)
    for axis, label in zip(axes.flat, labels, strict=False):
        for sample in samples:
            levels = histograms.get((sample, label))
            if levels is None or not levels.sum():
                continue
            n = int(levels.sum())
            median = np.searchsorted(np.cumsum(levels), n / 2) / (LEVELS - 1)
            axis.stairs(
                _bin_shares(levels, bins), edges, label=f"{sample} (n={n:,}, median {median:.2f})"
            )
        axis.set_title(label, fontsize="small")
        axis.legend(fontsize="xx-small", loc="upper left")
        axis.set_xlim(0, 1)
    for axis in axes.flat[len(labels) :]:
        axis.axis("off")
    for axis in axes[-1]:
        axis.set_xlabel("charging level (pc tag)")
    for axis in axes[:, 0]:
        axis.set_ylabel("share of class reads")
    figure.suptitle("Charging level per called class")
    figure.tight_layout()
    _figure_out(figure, path)


# leech writes ML = int(P * 255): ML >= 128 is P >= 128/255 = 0.502 (the 1/255 step below it
# holds P from 0.498 to 0.502)
LEANING_LEVEL = 128


def _leaning(counts: np.ndarray) -> tuple[float, float]:
    """Of chunks counted per ML level, the shares leaning to the first and second class (both 0
    where there are none)."""
    scored = counts.sum()
    toward = counts[LEANING_LEVEL:].sum()
    return ((scored - toward) / scored, toward / scored) if scored else (0.0, 0.0)


def _plot_leaning(path, histograms, samples, classes: Sequence[str]) -> None:
    """A binary model's class composition: the share of each sample's scored chunks leaning to
    either class (P below 0.5 or not, as leech's ML tags hold it). Leaning, not calls: leech
    calls nothing, and the confidence plot shows how far from 0.5 the chunks sit."""
    import matplotlib.pyplot as plt

    first, second = classes[0], classes[1]
    empty = np.zeros(LEVELS, np.int64)
    counts = [histograms.get((s, BINARY_SCORED), empty) for s in samples]
    scored = [c.sum() for c in counts]
    # a sample with no scored chunk keeps its place, with no bar
    rest, leaning = (np.array(shares) for shares in zip(*map(_leaning, counts), strict=True))
    names = [s if n else f"{s}\n(no scored chunks)" for s, n in zip(samples, scored, strict=True)]
    figure, axis = plt.subplots(figsize=(1.5 + 1.2 * len(samples), 4))
    for bars, shares in (
        (axis.bar(names, rest, label=f"{first} (ML < {LEANING_LEVEL})", color="tab:blue"), rest),
        (axis.bar(names, leaning, bottom=rest, color="tab:orange",
                  label=f"{second} (ML ≥ {LEANING_LEVEL}, P ≥ 0.502)"), leaning),
    ):  # fmt: skip
        axis.bar_label(bars, labels=[f"{v:.1%}" if v else "" for v in shares],
                       label_type="center", fontsize="small")  # fmt: skip
    axis.set_ylabel("share of scored chunks leaning to each class")
    axis.set_title(f"Binary model {first} vs {second}:\nleaning per sample (no calls)")
    axis.legend(bbox_to_anchor=(1.02, 1), loc="upper left", fontsize="small")
    _figure_out(figure, path)


def _plot_binary(path, histograms, samples, classes: Sequence[str], bins: int = 20) -> None:
    """A leech binary model calls nothing: each scored chunk has P(second class) (``ML``). Its
    distribution per sample, as the share of chunks per bin, shows how cleanly the model
    separates the two classes (two peaks at the ends) and how many chunks sit in between."""
    import matplotlib.pyplot as plt

    first, second = classes[0], classes[1]
    figure, axis = plt.subplots(figsize=(7, 4))
    edges = np.linspace(0, 1, bins + 1)
    for sample in samples:
        counts = histograms.get((sample, BINARY_SCORED))
        if counts is None or not counts.sum():
            continue
        n = int(counts.sum())
        _, above = _leaning(counts)
        axis.stairs(_bin_shares(counts, bins), edges, label=f"{sample} (n={n:,} chunks; "
                    f"ML ≥ {LEANING_LEVEL}, P({second}) ≥ 0.502: {above:.1%})")  # fmt: skip
    axis.axvline(0.5, color="0.3", linestyle="--", linewidth=1)
    axis.set_xlim(0, 1)
    axis.set_xlabel(f"P({second}) per scored chunk (ML tag / 255): {first} ← → {second}")
    axis.set_ylabel("share of scored chunks")
    axis.set_title(f"Binary model {first} vs {second}: probability per chunk")
    axis.legend(fontsize="x-small", loc="upper left")
    _figure_out(figure, path)

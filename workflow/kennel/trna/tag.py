"""``kennel tag``: a shard's model outputs → its tagged BAM, per-read table and run stats.

The CPU half of classification (:mod:`kennel.trna.outputs` says why it is a job of its own):
the outputs the classify job wrote are replayed, in order, through the bundle's tagging writer
(kennel's :class:`~kennel.trna.model_job.TaggingWriter` or leech's), which walks the shard's
BAM, tags each scored read and passes the others through unchanged. The thresholds and tag
options are this job's, so changing them reruns tagging only, not the GPU job.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shlex
import time
from collections.abc import Callable
from pathlib import Path

import pysam

from kennel import __version__
from kennel.errors import KennelError
from kennel.io.atomic import atomic_outputs
from kennel.progress import Progress
from kennel.trna.leech_config import LeechPredictOptions
from kennel.trna.model_job import ClassifySettings, TaggingWriter
from kennel.trna.outputs import ModelOutputs

logger = logging.getLogger("kennel.tag")

# what the tag job decides; the rest of the settings are the classify job's (the model's)
TAG_SETTINGS = (
    "min_confidence", "min_margin", "raw_tags", "abstain_on_junction_indel", "aggregation",
    "copy_tags", "bam_threads",
)  # fmt: skip
BLOCK_ROWS = 4096  # rows replayed at a time: the writer's work does not depend on it


def tagging_for(
    bundle_path, settings: ClassifySettings
) -> tuple[Callable[..., TaggingWriter], str]:
    """The bundle's tagging writer (a factory taking the BAMs, table, progress and @PG) and
    the tag every classified record gets (the merge counts them)."""
    from kennel.models.leech_files import is_leech_bundle

    if is_leech_bundle(bundle_path):
        from kennel.trna.leech_classify import leech_tagging

        return leech_tagging(bundle_path, settings)
    from kennel.trna.kennel_classify import kennel_tagging

    return kennel_tagging(bundle_path, settings)


def settings_from(
    classify_settings: dict, tag_settings: ClassifySettings, path: os.PathLike
) -> ClassifySettings:
    """The classify job's settings (as stored in the outputs file at ``path``) with this job's
    tag options."""
    try:
        values = dict(classify_settings)
        values["leech_predict"] = LeechPredictOptions(**values["leech_predict"])
        values["copy_tags"] = tuple(values["copy_tags"])
        values.update({name: getattr(tag_settings, name) for name in TAG_SETTINGS})
        return ClassifySettings(**values)
    except (TypeError, KeyError) as error:  # fields renamed or added since it was written
        raise KennelError(
            f"{path}: classify settings this kennel does not read ({error}); rerun classify"
        ) from None


def tag_shard(
    bam: str | os.PathLike,
    outputs_path: str | os.PathLike,
    bundle_path: str | os.PathLike,
    output_bam: str | os.PathLike,
    predictions_tsv: str | os.PathLike,
    stats_json: str | os.PathLike,
    tag_settings: ClassifySettings,
    tagging: tuple[Callable[..., TaggingWriter], str] | None = None,
) -> dict:
    """Tag the shard BAM ``bam`` from the classify job's outputs; returns the run stats (the
    classify job's, then this job's counts under ``reads_classified``, ``labels``,
    ``records_written`` and ``tagging``). ``tagging`` is :func:`tagging_for`'s, when the
    caller has it already (the settings are then the classify job's own)."""
    tag_settings.check()
    started = time.perf_counter()
    digest = bundle_sha256(Path(bundle_path))
    with ModelOutputs(outputs_path) as outputs:
        if outputs.bundle_sha256 != digest:
            raise KennelError(
                f"{outputs_path}: scored by another bundle than {bundle_path} "
                "(classify and tag with the same bundle)"
            )
        settings = settings_from(outputs.settings, tag_settings, outputs_path)
        make_writer, marker_tag = tagging or tagging_for(bundle_path, settings)
        targets = [
            Path(output_bam),
            Path(f"{output_bam}.bai"),
            Path(predictions_tsv),
            Path(stats_json),
        ]
        with atomic_outputs(*targets) as (tmp_bam, tmp_bai, tmp_tsv, tmp_stats):
            # the writers count rows (a binary leech model's are chunks)
            progress = Progress(logger, "scored rows tagged", total=outputs.rows)
            tagger = make_writer(
                bam, tmp_bam, tmp_tsv, progress=progress,
                program=classify_program(bundle_path, settings, digest),
            )  # fmt: skip
            try:
                for item in outputs.batches(BLOCK_ROWS):
                    tagger.write(item)
                tagger.close()
            except BaseException:
                tagger.abandon()
                raise
            classified = sum(tagger.labels.values())
            if classified != outputs.reads:  # every scored read is tagged, once
                raise KennelError(
                    f"{bam}: {classified} reads tagged, but {outputs_path} scored {outputs.reads}"
                )
            pysam.index(str(tmp_bam), str(tmp_bai))
            wall = time.perf_counter() - started
            stats = {
                **outputs.stats,
                "reads_classified": classified,
                "labels": dict(sorted(tagger.labels.items())),
                "records_written": tagger.records_written,
                "marker_tag": marker_tag,
                "settings": dataclasses.asdict(settings),
                "tagging": {"wall_s": wall, "reads_per_s": classified / wall if wall > 0 else 0.0},
            }
            with open(tmp_stats, "w") as handle:
                json.dump(stats, handle, indent=2, sort_keys=True)
    logger.info(
        "tagged %d reads (%s) of %d records, %.0f reads/s",
        classified, stats["labels"], tagger.records_written, stats["tagging"]["reads_per_s"],
    )  # fmt: skip
    return stats


def classify_program(
    bundle_path: str | os.PathLike, settings: ClassifySettings, digest: str
) -> dict:
    """The ``@PG`` line of a classification: what a reader needs to know which model (at
    ``bundle_path``, of SHA-256 ``digest``) and which thresholds made the tags, and how they
    are scaled."""
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
            f"bundle={bundle_path} bundle_sha256={digest} "
            f"min_confidence={settings.min_confidence} min_margin={settings.min_margin} "
            f"tags={tags}"
        ),
    }


def bundle_sha256(path: Path) -> str:
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

"""POD5 through escapepod: one reader over a sample's files, batch signal copies, clear errors."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import escapepod
import numpy as np

from kennel.errors import KennelError

# Signals copied per call: bounds memory while keeping each call a batch (no per-sample loop).
COPY_BATCH_READS = 2000

_READ_FIELDS = (
    "read_id",
    "read_number",
    "start_sample",
    "channel",
    "well",
    "pore_type",
    "calibration_offset",
    "calibration_scale",
    "median_before",
    "end_reason",
    "end_reason_forced",
    "run_info_index",
    "num_minknow_events",
    "tracked_scaling_scale",
    "tracked_scaling_shift",
    "predicted_scaling_scale",
    "predicted_scaling_shift",
    "num_reads_since_mux_change",
    "time_since_mux_change",
    "num_samples",
    "open_pore_level",
    "expected_open_pore_level",
    "selected_read_level",
    "signal_rows",
)


class Pod5Set:
    """The POD5 files of one sample, indexed by read id.

    The index keeps only each read's file and signal length (a few dozen bytes a read);
    metadata comes back from escapepod's own read-id index when a batch is fetched, so
    memory stays small beside the reads being worked on. Run infos are renumbered into one list
    so that shard files written from several sources stay self-consistent.
    """

    def __init__(self, paths: Sequence[str | os.PathLike] | str | os.PathLike):
        if isinstance(paths, (str, os.PathLike)):
            paths = [paths]
        self.paths = [Path(p) for p in paths]
        if not self.paths:
            raise KennelError("no POD5 files given")
        self._readers: list[escapepod.Reader] = []
        self._run_info_offsets: list[int] = []
        self.run_infos: list[escapepod.RunInfo] = []
        # read id -> file index
        self.reads: dict[str, int] = {}
        for file_index, path in enumerate(self.paths):
            if not path.is_file():
                raise KennelError(f"{path}: POD5 file not found")
            try:
                reader = escapepod.Reader(path)
                read_ids = reader.read_ids()
                run_infos = reader.run_infos
            except (escapepod.Pod5Error, OSError, ValueError, RuntimeError) as error:
                raise KennelError(f"{path}: unreadable POD5 ({_first_line(error)})") from None
            self._run_info_offsets.append(len(self.run_infos))
            self.run_infos.extend(run_infos)
            self._readers.append(reader)
            for read_id in read_ids:
                if read_id in self.reads:
                    raise KennelError(f"{path}: read {read_id}: also in another POD5 file")
                self.reads[read_id] = file_index

    def sample_counts(self, read_ids: Sequence[str]) -> dict[str, int]:
        """Signal length of each of ``read_ids``, looked up in batches."""
        counts = {}
        for start in range(0, len(read_ids), COPY_BATCH_READS):
            by_file: dict[int, list[str]] = {}
            for read_id in read_ids[start : start + COPY_BATCH_READS]:
                by_file.setdefault(self.reads[read_id], []).append(read_id)
            for file_index, ids in by_file.items():
                for read in self._readers[file_index].get_reads(ids):
                    counts[read.read_id] = read.num_samples
        return counts

    def signals(
        self, read_ids: Sequence[str], picoamps: bool = False
    ) -> list[tuple[escapepod.ReadData, np.ndarray]]:
        """Signals of ``read_ids`` (in that order), fetched with one batch call per file."""
        by_file: dict[int, list[str]] = {}
        for read_id in read_ids:
            by_file.setdefault(self.reads[read_id], []).append(read_id)
        fetched: dict[str, tuple[escapepod.ReadData, np.ndarray]] = {}
        for file_index, ids in by_file.items():
            reader = self._readers[file_index]
            offset = self._run_info_offsets[file_index]
            try:
                reads = reader.get_reads(ids)
                batch = reader.get_signals_pa(reads) if picoamps else reader.get_signals(reads)
            except (escapepod.Pod5Error, OSError, ValueError, RuntimeError) as error:
                raise KennelError(
                    f"{self.paths[file_index]}: signal unreadable ({_first_line(error)})"
                ) from None
            ours = {
                read.read_id: _renumbered(read, read.run_info_index + offset) if offset else read
                for read in reads
            }
            for read_id, signal in batch:  # batch order is the file's, not the request's
                fetched[read_id] = (ours[read_id], signal)
        return [fetched[read_id] for read_id in read_ids]

    def write_subset(self, path: str | os.PathLike, read_ids: Iterable[str]) -> int:
        """Copy ``read_ids`` with their signal into a new POD5 at ``path``; returns the count."""
        read_ids = list(read_ids)
        if not read_ids:
            # escapepod writes no reads table for zero reads; pod5's empty file reads back in both
            import pod5

            with pod5.Writer(path):
                pass
            return 0
        try:
            with escapepod.Writer(path, software="kennel shard") as writer:
                for run_info in self.run_infos:
                    writer.add_run_info(run_info)
                for start in range(0, len(read_ids), COPY_BATCH_READS):
                    pairs = self.signals(read_ids[start : start + COPY_BATCH_READS])
                    writer.add_reads([read for read, _ in pairs], [signal for _, signal in pairs])
        except escapepod.Pod5Error as error:
            raise KennelError(f"{path}: cannot write POD5 ({_first_line(error)})") from None
        return len(read_ids)


def _renumbered(read: escapepod.ReadData, run_info_index: int) -> escapepod.ReadData:
    fields = {name: getattr(read, name) for name in _READ_FIELDS}
    fields["run_info_index"] = run_info_index
    return escapepod.ReadData(**fields)


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__

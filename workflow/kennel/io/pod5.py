"""POD5 through escapepod: one reader over a sample's files, batch signal copies, clear errors."""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import sys
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import escapepod
import numpy as np

from kennel.errors import KennelError

# Signals copied per call: bounds memory while keeping each call a batch (no per-sample loop).
COPY_BATCH_READS = 2000
MADV_DONTNEED = 4  # <sys/mman.h> on Linux

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


def pod5_files(entries: Sequence[str | os.PathLike] | str | os.PathLike) -> list[Path]:
    """The POD5 files that ``entries`` name, each once: a file as given, a directory as every
    ``*.pod5`` below it (symlinked folders followed) in sorted order. MinKNOW writes a run's
    ``pod5/`` or ``pod5_pass/``, one folder per barcode inside it; leech predict, through
    escapepod's DatasetReader, reads such a directory the same way. A directory without any is
    an error."""
    if isinstance(entries, (str, os.PathLike)):
        entries = [entries]
    files: list[Path] = []
    seen: set[str] = set()  # real paths: a file named twice (itself and in its folder) is one
    for entry in map(Path, entries):
        found = _files_below(entry) if entry.is_dir() else [entry]
        if not found:
            raise KennelError(f"{entry}: a directory without .pod5 files")
        for path in found:
            real = os.path.realpath(path)
            if real not in seen:
                seen.add(real)
                files.append(path)
    return files


def _files_below(directory: Path) -> list[Path]:
    found = []
    visited: set[str] = set()  # a symlink back up the tree must not loop
    for root, folders, names in os.walk(directory, followlinks=True):
        real = os.path.realpath(root)
        if real in visited:
            folders.clear()
            continue
        visited.add(real)
        found += [Path(root, name) for name in names if name.endswith(".pod5")]
    return sorted(path for path in found if path.is_file())


class Pod5Set:
    """The POD5 files of one sample (files, or directories of them: see pod5_files).

    With ``index_reads`` (sharding, which sees a whole sample) ``reads`` is a :class:`ReadIndex`
    of every read id and its file, which also catches a read id present in two files. Without it
    (extraction, which sees one shard at a time) no per-read state is kept on the Python side:
    reads are looked up in batches through escapepod's own compact read-id index (~50 bytes a
    read against ~170 for a Python dict), so memory stays flat in the number of reads. Metadata
    comes back with each batch. Run infos are renumbered into one list so that shard files
    written from several sources stay self-consistent.
    """

    def __init__(
        self, paths: Sequence[str | os.PathLike] | str | os.PathLike, index_reads: bool = True
    ):
        self.paths = pod5_files(paths)
        if not self.paths:
            raise KennelError("no POD5 files given")
        self._readers: list[escapepod.Reader] = []
        self._real_paths = [os.path.realpath(p) for p in self.paths]  # as maps names them
        self._run_info_offsets: list[int] = []
        self.run_infos: list[escapepod.RunInfo] = []
        ids_by_file: list[np.ndarray] = []
        for file_index, path in enumerate(self.paths):
            if not path.is_file():
                raise KennelError(f"{path}: POD5 file not found")
            with self._reading(file_index):
                reader = escapepod.Reader(path)
                if index_reads:
                    ids_by_file.append(id_array(reader.read_ids()))
                run_infos = reader.run_infos
            self._run_info_offsets.append(len(self.run_infos))
            self.run_infos.extend(run_infos)
            self._readers.append(reader)
        # None when reads are looked up in batches instead
        self.reads = ReadIndex(ids_by_file, self.paths) if index_reads else None
        release_mapped_pages(set(self._real_paths))  # what reading the ids touched

    @contextlib.contextmanager
    def _reading(self, file_index: int, what: str = "unreadable POD5"):
        try:
            yield
        except (escapepod.Pod5Error, OSError, ValueError, RuntimeError) as error:
            raise KennelError(f"{self.paths[file_index]}: {what} ({_first_line(error)})") from None

    def _locate(self, read_ids: Sequence[str]) -> dict[int, list[escapepod.ReadData]]:
        """Metadata of those of ``read_ids`` that are present, grouped by file."""
        found: dict[int, list[escapepod.ReadData]] = {}
        if self.reads is not None:
            by_file: dict[int, list[str]] = {}
            for read_id, file_index in zip(
                read_ids, self.reads.files_of(read_ids).tolist(), strict=True
            ):
                if file_index >= 0:
                    by_file.setdefault(file_index, []).append(read_id)
            for file_index, ids in by_file.items():
                with self._reading(file_index):
                    found[file_index] = self._readers[file_index].get_reads(ids)
            return found
        wanted = [read_id for read_id in read_ids if _is_uuid(read_id)]  # POD5 ids are UUIDs
        for file_index, reader in enumerate(self._readers):
            if not wanted:
                break
            with self._reading(file_index):
                reads = reader.get_reads(wanted, missing_ok=True)
            if reads:
                found[file_index] = reads
                seen = {read.read_id for read in reads}
                wanted = [read_id for read_id in wanted if read_id not in seen]
        return found

    def sample_counts(self, read_ids: Sequence[str] | np.ndarray) -> np.ndarray:
        """Signal length of each of ``read_ids`` (str, or an :func:`id_array`), in their order,
        looked up in batches; every one must be present."""
        counts = np.empty(len(read_ids), dtype=np.int64)
        for start in range(0, len(read_ids), COPY_BATCH_READS):
            batch = _as_str(read_ids[start : start + COPY_BATCH_READS])
            found = {
                read.read_id: read.num_samples
                for reads in self._locate(batch).values()
                for read in reads
            }
            for offset, read_id in enumerate(batch):
                if read_id not in found:
                    raise KennelError(f"{self.paths[0]}: read {read_id}: not in the POD5 file(s)")
                counts[start + offset] = found[read_id]
        return counts

    def signals(
        self, read_ids: Sequence[str], picoamps: bool = False, missing_ok: bool = False
    ) -> list[tuple[escapepod.ReadData, np.ndarray]]:
        """Signals of ``read_ids`` (in that order, leaving out absent ones if ``missing_ok``),
        fetched with one batch call per file."""
        fetched: dict[str, tuple[escapepod.ReadData, np.ndarray]] = {}
        located = self._locate(read_ids)
        for file_index, reads in located.items():
            reader = self._readers[file_index]
            offset = self._run_info_offsets[file_index]
            with self._reading(file_index, "signal unreadable"):
                batch = reader.get_signals_pa(reads) if picoamps else reader.get_signals(reads)
            ours = {
                read.read_id: _renumbered(read, read.run_info_index + offset) if offset else read
                for read in reads
            }
            for read_id, signal in batch:  # batch order is the file's, not the request's
                fetched[read_id] = (ours[read_id], signal)
        # the signals are copies; only the files read from: a run holds thousands
        release_mapped_pages({self._real_paths[file_index] for file_index in located})
        missing = [read_id for read_id in read_ids if read_id not in fetched]
        if missing and not missing_ok:
            raise KennelError(f"{self.paths[0]}: read {missing[0]}: not in the POD5 file(s)")
        return [fetched[read_id] for read_id in read_ids if read_id in fetched]

    def write_subset(
        self,
        path: str | os.PathLike,
        read_ids: Sequence[str] | np.ndarray,
        copied: Callable[[int], None] | None = None,
    ) -> int:
        """Copy ``read_ids`` (str, or an :func:`id_array`) with their signal into a new POD5 at
        ``path``; returns the count. ``copied`` is told each batch's size."""
        if not len(read_ids):
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
                    pairs = self.signals(_as_str(read_ids[start : start + COPY_BATCH_READS]))
                    writer.add_reads([read for read, _ in pairs], [signal for _, signal in pairs])
                    if copied is not None:
                        copied(len(pairs))
        except escapepod.Pod5Error as error:
            raise KennelError(f"{path}: cannot write POD5 ({_first_line(error)})") from None
        drop_cached_pages(path)
        return len(read_ids)


class ReadIndex:
    """Every read id of a sample's POD5 files and the file that holds it, in ~40 bytes a read.

    The shard step holds this for a whole sample (a flowcell: millions of reads), where a dict of
    str ids took ~170 bytes a read. The ids are a sorted array of bytes (POD5 ids are ASCII UUIDs),
    looked up by binary search. Iterates the ids as str, in sorted order.
    """

    def __init__(self, ids_by_file: Sequence[np.ndarray], paths: Sequence[Path]):
        ids = np.concatenate([*ids_by_file, id_array([])])
        files = np.repeat(
            np.arange(len(ids_by_file), dtype=np.uint32), [len(i) for i in ids_by_file]
        )
        order = np.argsort(ids, kind="stable")  # stable: of a repeated id, file order kept
        self._ids, self._files = ids[order], files[order]
        repeat = first_repeat(self._ids)
        if repeat is not None:
            read_id = self._ids[repeat].decode()
            path = paths[self._files[repeat + 1]]
            raise KennelError(f"{path}: read {read_id}: also in another POD5 file")

    def __len__(self) -> int:
        return len(self._ids)

    def __iter__(self) -> Iterator[str]:
        return iter(self._ids.astype(str).tolist())

    def __contains__(self, read_id: object) -> bool:
        # one search, not files_of's arrays: the shard step asks this of every record, twice
        if not isinstance(read_id, str) or not self._fits(read_id):
            return False
        key = read_id.encode()
        place = int(self._ids.searchsorted(key))
        return place < len(self._ids) and self._ids[place] == key

    def files_of(self, read_ids: Sequence[str]) -> np.ndarray:
        """The file index of each of ``read_ids``, -1 where absent."""
        keys = [read_id if self._fits(read_id) else "" for read_id in read_ids]
        if not len(self._ids):
            return np.full(len(keys), -1, dtype=np.int64)
        wanted = id_array(keys, self._ids.dtype.itemsize)
        places = np.searchsorted(self._ids, wanted).clip(max=len(self._ids) - 1)
        hit = (self._ids[places] == wanted) & (wanted != b"")
        return np.where(hit, self._files[places].astype(np.int64), -1)

    def _fits(self, read_id: str) -> bool:
        # a longer id would be cut to a prefix by the fixed-width array, and match it
        return 0 < len(read_id) <= self._ids.dtype.itemsize and read_id.isascii()


def first_repeat(ordered: np.ndarray) -> int | None:
    """Where a sorted array first holds the same value twice (that index and the next), if it
    does."""
    repeated = np.flatnonzero(ordered[1:] == ordered[:-1])
    return int(repeated[0]) if len(repeated) else None


def id_array(read_ids: Sequence[str], width: int | None = None) -> np.ndarray:
    """Read ids as a fixed-width bytes array (POD5 ids: 36-character ASCII UUIDs)."""
    if width is None:
        width = max(map(len, read_ids), default=36)
    return np.array(read_ids, dtype=f"S{max(width, 1)}")


def _as_str(read_ids: Sequence[str] | np.ndarray) -> list[str]:
    """A batch of read ids as str, whether given as str or as an :func:`id_array`."""
    if isinstance(read_ids, np.ndarray):
        return read_ids.astype(str).tolist()
    return list(read_ids)


def drop_cached_pages(path: str | os.PathLike) -> None:
    """Write ``path`` out and drop it from the page cache (advisory; Linux and other POSIX).

    Measured on a shard just written by escapepod's writer: the first signal read of the
    extracting process mapped nearly the whole file (VmHWM 137 MiB at 20k reads, 76 MiB at 2k),
    while the same file read back from disk, or copied, mapped only what was read (78 MiB). The
    writer's pages are likely held as large folios, which one fault maps whole. Dropping them
    costs extraction one read from disk, which a job on another node pays anyway.
    """
    if not hasattr(os, "posix_fadvise"):
        return
    with contextlib.suppress(OSError):
        descriptor = os.open(path, os.O_RDONLY)
        try:
            os.fsync(descriptor)  # dirty pages are not dropped
            os.posix_fadvise(descriptor, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(descriptor)


def release_mapped_pages(paths: set[str]) -> None:
    """Unmap the resident pages of read-only memory maps of ``paths`` (Linux; elsewhere a no-op).

    escapepod memory-maps a POD5 and the pages it touches stay resident, so without this a
    process's RSS grows with the POD5 it reads (157 MiB at 20k reads against 83 at 2k), not with
    the batch in hand. The pages are clean: MADV_DONTNEED on a read-only file mapping only drops
    them from this process, and the next access faults them back in from the page cache.
    """
    if sys.platform != "linux" or not paths:
        return
    with open("/proc/self/maps") as maps:
        text = maps.read()
    if len(paths) > _FIND_AT_MOST:
        # each find scans the whole table: for many files one pass over its lines is cheaper
        for line in text.split("\n"):
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and fields[5] in paths:
                _release(fields)
        return
    # find each path in the whole table and parse only its lines: a batch of an extract worker
    # reads one file, and splitting every line of the table costs ~13 finds (below)
    for path in paths:
        tail = f" {path}\n"
        found = text.find(tail)
        while found >= 0:
            line_start = text.rfind("\n", 0, found) + 1
            # five fields before the path, as the kernel writes them: a longer path that ends
            # in " " + this one would leave more
            fields = text[line_start:found].split()
            if len(fields) == 5:
                _release(fields)
            found = text.find(tail, found + len(tail))


# splitting every line of the table costs as much as ~13 finds over it (measured on a 3,132-line
# table: 1.31 ms against 0.097 ms a find), so beyond a dozen paths one pass over the lines wins
_FIND_AT_MOST = 12


def _release(fields: list[str]) -> None:
    """madvise away one maps line's pages, if the mapping is read-only."""
    if "w" in fields[1]:
        return
    start, end = (int(address, 16) for address in fields[0].split("-"))
    # advisory: a refusal only leaves the pages resident
    _libc.madvise(ctypes.c_void_p(start), ctypes.c_size_t(end - start), MADV_DONTNEED)


_libc = ctypes.CDLL(None, use_errno=True)
_libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


def _renumbered(read: escapepod.ReadData, run_info_index: int) -> escapepod.ReadData:
    fields = {name: getattr(read, name) for name in _READ_FIELDS}
    fields["run_info_index"] = run_info_index
    return escapepod.ReadData(**fields)


# the form POD5 writes; others that uuid.UUID accepts (no hyphens, braces, urn:) take the slow
# check, 4 µs a read
_CANONICAL_UUID = re.compile(
    r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
)


def _is_uuid(text: str) -> bool:
    if _CANONICAL_UUID.fullmatch(text):
        return True
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__

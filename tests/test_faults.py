"""Disk full: a clear one-line error and no output left looking complete."""

from __future__ import annotations

import errno
import os
import subprocess
import uuid

import pytest
from kennel.cli import main
from kennel.io.pod5 import Pod5Set

from tests.test_bad_inputs import shard_argv


@pytest.fixture
def small_tmpfs(tmp_path):
    mount_point = tmp_path / f"tmpfs-{uuid.uuid4().hex[:6]}"
    mount_point.mkdir()
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount_point)],
        capture_output=True, text=True,
    )  # fmt: skip
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({result.stderr.strip()}); see the simulated case")
    yield mount_point
    subprocess.run(["umount", str(mount_point)], check=True)


def test_disk_full_on_a_real_small_filesystem(trna_sim, small_tmpfs, capsys):
    out = small_tmpfs / "shards"
    assert main([str(a) for a in shard_argv(trna_sim, out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "No space left on device" in err[0], err
    assert not any(p.is_file() for p in small_tmpfs.rglob("*"))


def test_disk_full_simulated(trna_sim, tmp_path, capsys, monkeypatch):
    def full(self, path, read_ids, copied=None):
        with open(path, "wb") as handle:
            handle.write(b"partial")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(Pod5Set, "write_subset", full)
    out = tmp_path / "shards"
    assert main([str(a) for a in shard_argv(trna_sim, out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "No space left on device" in err[0], err
    assert not out.exists() or not any(out.iterdir())

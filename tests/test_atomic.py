"""Atomic outputs: all or nothing, and a killed writer's temporaries are swept on rerun."""

from __future__ import annotations

import pytest
from kennel.io.atomic import atomic_outputs


def test_all_outputs_appear_together(tmp_path):
    with atomic_outputs(tmp_path / "a.txt", tmp_path / "sub/b.txt") as (a, b):
        a.write_text("a")
        b.write_text("b")
        assert not (tmp_path / "a.txt").exists()
    assert (tmp_path / "a.txt").read_text() == "a" and (tmp_path / "sub/b.txt").read_text() == "b"


def test_nothing_appears_on_error(tmp_path):
    with pytest.raises(ValueError), atomic_outputs(tmp_path / "a.txt") as (a,):
        a.write_text("half")
        raise ValueError("bad record")
    assert list(tmp_path.iterdir()) == []


def test_stale_temporaries_of_a_killed_writer_are_removed(tmp_path):
    stale = tmp_path / ".tmp-99999.a.txt"
    stale.write_text("left by kill -9")
    other = tmp_path / ".tmp-99999.other.txt"
    other.write_text("someone else's")
    with atomic_outputs(tmp_path / "a.txt") as (a,):
        a.write_text("new")
    assert not stale.exists() and other.exists()
    assert (tmp_path / "a.txt").read_text() == "new"


def test_a_writer_that_wrote_nothing_is_an_error(tmp_path):
    with (
        pytest.raises(RuntimeError, match="without producing output"),
        atomic_outputs(tmp_path / "a.txt"),
    ):
        pass


def test_sweep_removes_only_writer_temporaries(tmp_path):
    from kennel.io.atomic import sweep_stale_temporaries

    (tmp_path / "a/b").mkdir(parents=True)
    stale = [tmp_path / "a/.tmp-42.x.bam", tmp_path / "a/b/.tmp-7.y.h5"]
    kept = [tmp_path / "a/x.bam", tmp_path / "a/.tmpfile", tmp_path / "a/.tmp-abc.z"]
    for path in stale + kept:
        path.write_text("x")
    assert sorted(sweep_stale_temporaries(tmp_path / "a", tmp_path / "absent")) == sorted(stale)
    assert all(p.exists() for p in kept) and not any(p.exists() for p in stale)

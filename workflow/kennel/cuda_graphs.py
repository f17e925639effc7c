"""CUDA graphs recorded by torch.compile, run from threads other than the one that imported
torch's graph trees (classify's device thread): the per-thread state they need, and the
references torch's thread-local store needs to hold it safely."""

from __future__ import annotations

import ctypes
import sys
import threading

import torch


def ready_cuda_graphs_thread() -> None:
    """Let this thread run CUDA graphs recorded by torch.compile (call it on the thread that
    will, before the first compiled call).

    Before torch 2.13 (pytorch#123177), cudagraph trees keep their per-device managers in state
    that exists only on the thread that imported them and on autograd's threads: a compiled
    call on any other Python thread (classify's device thread, a second job's thread) failed an
    assertion. This seeds that state on the current thread as torch 2.13 does lazily; where it
    already exists, nothing changes.
    """
    from collections import defaultdict

    first_import = "torch._inductor.cudagraph_trees" not in sys.modules
    from torch._inductor import cudagraph_trees

    local = cudagraph_trees.local
    # (a thread that found the module unimported while another thread imported it was not
    # seeded by that import: it is seeded below, like any other)
    if first_import and hasattr(local, "tree_manager_containers"):
        # the import seeded this thread, stashing its objects in torch's store: off the main
        # thread they die with the thread, so the store must own a reference to them
        # (classify compiles on its main thread, but inductor imports this module at the
        # first call, which is on the device thread)
        if threading.current_thread() is not threading.main_thread():
            _own_stashed(local.tree_manager_containers, local.tree_manager_locks)
        return
    if hasattr(local, "tree_manager_containers") or torch._C._is_key_in_tls(
        "tree_manager_containers"
    ):
        return
    local.tree_manager_containers = {}
    local.tree_manager_locks = defaultdict(threading.Lock)
    for key in ("tree_manager_containers", "tree_manager_locks"):
        torch._C._stash_obj_in_tls(key, getattr(local, key))
    _own_stashed(local.tree_manager_containers, local.tree_manager_locks)


def _own_stashed(*values: object) -> None:
    """Give torch's thread-local store the reference to each of ``values`` (just stashed in it)
    that it releases when the thread ends, where the store took none.

    Before torch 2.13 it took none: torch stashes only the importing thread's objects, which
    live as long as the process. A device thread's objects die with the thread, so that
    release freed them twice and a job crashed or hung as its threads ended (torch 2.11: 6 runs
    of 6 with 20 seeded threads)."""
    if not _store_takes_a_reference():
        for value in values:
            ctypes.pythonapi.Py_IncRef(ctypes.py_object(value))


def _store_takes_a_reference() -> bool:
    """Whether torch's thread-local store takes a reference to what it keeps (torch >= 2.13),
    probed on an object of kennel's own (a few microseconds, once a seeded thread)."""
    probe: dict = {}
    before = sys.getrefcount(probe)
    torch._C._stash_obj_in_tls("kennel_store_probe", probe)
    takes = sys.getrefcount(probe) > before
    if not takes:  # the reference the store releases as this thread ends
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(probe))
    return takes

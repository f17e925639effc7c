"""The demo on a real SLURM, through `snakemake --profile slurm` as a user types it.

A one-node cluster started on this machine presents 64 CPUs and 4 GPUs (gres.conf names four
character devices, so SLURM sets CUDA_VISIBLE_DEVICES), with accounting disabled. While the demo
runs, a thread polls the scheduler's own records (`scontrol show job`, `scontrol show node`) and
kills one GPU job once with scancel. From those records: four GPU jobs ran side by side on
distinct devices and filled the node while a fifth waited for resources; each job's log names the
device SLURM gave it; the killed job was retried and the run completed; CPU rules ran on the CPU
partition with their own threads; and the outputs equal a local run's.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import socket
import stat
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np
import pysam
import pytest
import yaml

from tests.conftest import in_ci

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[1]
NODE = "kennel-node"
CPU_PARTITION = "kennel-cpu"
GPU_PARTITION = "kennel-gpu"
GPU_RULES = ("classify", "score_snps")
NODE_CPUS, NODE_GPUS, NODE_MEMORY_MB = 64, 4, 256_000
# The job step runs without SLURM_CONF, so the config must be where SLURM looks by default.
SLURM_CONF = Path("/etc/slurm/slurm.conf")
GRES_CONF = SLURM_CONF.with_name("gres.conf")
MARK = "# kennel tests/test_slurm.py: a throwaway one-node cluster, removed after the test\n"
TOOLS = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "squeue", "scontrol", "scancel")
# Accuracy is not this test's concern: small inputs, and 2 samples x 3 shards + 2 slices give
# eight GPU jobs, enough for four at once with more waiting.
DEMO = {
    "demo": {"trna_reads": 300, "trna_train_reads": 800, "trna_train_epochs": 2},
    "trna": {"shards": 3},
}
SAMPLES = ("demo_a", "demo_b")


def unavailable(reason: str):
    """Skip where SLURM cannot run here; in CI the test must run, so fail instead."""
    if in_ci():
        pytest.fail(f"CI must run the SLURM test, but {reason}", pytrace=False)
    pytest.skip(reason)


def clean_environment() -> dict[str, str]:
    """This process's environment without anything that would choose a device or a cluster."""
    dropped = ("CUDA_VISIBLE_DEVICES", "KENNEL_FAKE_GPU_COUNT", "KENNEL_GPU_SLOT_DIR", "SLURM_CONF")
    return {
        key: value
        for key, value in os.environ.items()
        if key not in dropped and not key.startswith(("SLURM_", "SBATCH_", "SRUN_"))
    }


def copy_workflow(target: Path) -> Path:
    """The working tree as a fresh clone has it, links included (`slurm` is one)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")
    for relative in filter(None, listed):
        source, destination = REPO / relative, target / relative
        if source.is_symlink() or source.is_file():
            destination.parent.mkdir(parents=True, exist_ok=True)
            if source.is_symlink():
                destination.symlink_to(os.readlink(source))
            else:
                shutil.copy2(source, destination)
    return target


def write_yaml(path: Path, content: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(content, sort_keys=False))
    return path


def tail(path: Path, characters: int = 3000) -> str:
    try:
        return f"\n--- {path}\n{path.read_text(errors='replace')[-characters:]}"
    except OSError:
        return f"\n--- {path}: unreadable"


# --- the cluster ------------------------------------------------------------------------------


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for sock in sockets:
        sock.bind(("127.0.0.1", 0))
    ports = [sock.getsockname()[1] for sock in sockets]
    for sock in sockets:
        sock.close()
    return ports


def make_gpu_devices(directory: Path) -> str:
    """Four distinct character devices named like GPUs; SLURM only looks them up."""
    directory.mkdir()
    for index, (name, minor) in enumerate((("null", 3), ("zero", 5), ("full", 7), ("random", 8))):
        path = directory / f"kennel-gpu{index}"
        try:
            os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, minor))
        except PermissionError:  # no CAP_MKNOD: links to the same four devices
            path.symlink_to(f"/dev/{name}")
    return f"{directory}/kennel-gpu[0-{NODE_GPUS - 1}]"


def slurm_conf(directory: Path, munge_socket: Path, ports: list[int]) -> str:
    host = socket.gethostname().split(".")[0]
    settings = {
        "ClusterName": "kenneltest",
        "SlurmctldHost": f"{host}(127.0.0.1)",
        "SlurmctldPort": ports[0],
        "SlurmdPort": ports[1],
        "SlurmUser": "root",
        "SlurmdUser": "root",
        "AuthType": "auth/munge",
        "CredType": "cred/munge",
        "AuthInfo": f"socket={munge_socket}",
        "StateSaveLocation": directory / "state",
        "SlurmdSpoolDir": directory / "spool",
        "SlurmctldPidFile": directory / "slurmctld.pid",
        "SlurmdPidFile": directory / "slurmd.pid",
        "SlurmctldLogFile": directory / "slurmctld.log",
        "SlurmdLogFile": directory / "slurmd.log",
        # no cgroups on a test machine: plain process tracking, no task binding
        "ProctrackType": "proctrack/linuxproc",
        "TaskPlugin": "task/none",
        "JobAcctGatherType": "jobacct_gather/none",
        "AccountingStorageType": "accounting_storage/none",
        "JobCompType": "jobcomp/none",
        "MpiDefault": "none",
        "SwitchType": "switch/none",
        "SchedulerType": "sched/backfill",
        "SelectType": "select/cons_tres",
        "SelectTypeParameters": "CR_Core_Memory",
        "GresTypes": "gpu",
        # a 2-core machine presents the node's configured 64 CPUs and 256 GB
        "SlurmdParameters": "config_overrides",
        "ReturnToService": 2,
        # squeue (the profile's status command) keeps ended jobs this long
        "MinJobAge": 300,
    }
    lines = [f"{key}={value}" for key, value in settings.items()]
    lines += [
        f"NodeName={NODE} NodeHostname={host} NodeAddr=127.0.0.1 Sockets=4 CoresPerSocket=16 "
        f"ThreadsPerCore=1 RealMemory={NODE_MEMORY_MB} Gres=gpu:{NODE_GPUS} State=UNKNOWN",
        f"PartitionName={CPU_PARTITION} Nodes={NODE} Default=YES MaxTime=INFINITE State=UP",
        f"PartitionName={GPU_PARTITION} Nodes={NODE} MaxTime=INFINITE State=UP",
    ]
    return MARK + "\n".join(lines) + "\n"


def slurm(*arguments: str, check: bool = False) -> subprocess.CompletedProcess:
    return subprocess.run(arguments, capture_output=True, text=True, timeout=30, check=check)


def wait_for_node(processes: dict[str, subprocess.Popen], logs: list[Path]) -> None:
    """Until the node is idle; a node that registered down is resumed."""
    deadline = time.monotonic() + 90
    state = ""
    while time.monotonic() < deadline:
        for name, process in processes.items():
            if process.poll() is not None:
                unavailable(f"{name} exited ({process.returncode}){''.join(map(tail, logs))}")
        try:
            state = slurm("sinfo", "-h", "-n", NODE, "-o", "%T").stdout.strip().rstrip("*~#$@")
        except subprocess.TimeoutExpired:
            state = "(sinfo timed out)"
        if state == "idle":
            return
        if state.startswith(("down", "drain")):
            slurm("scontrol", "update", f"nodename={NODE}", "state=resume")
        time.sleep(0.5)
    unavailable(f"node {NODE} did not become idle (state {state!r}){''.join(map(tail, logs))}")


def stop_cluster(processes: dict[str, subprocess.Popen]) -> None:
    """Cancel what is left, then stop the daemons this test started, by PID, last first."""
    if "slurmctld" in processes and processes["slurmctld"].poll() is None:
        try:
            jobs = slurm("squeue", "-h", "-o", "%i").stdout.split()
            if jobs:
                slurm("scancel", *jobs)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and slurm("squeue", "-h", "-o", "%i").stdout.strip():
                time.sleep(0.5)
        except subprocess.TimeoutExpired:
            pass
    for process in reversed(list(processes.values())):
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.fixture(scope="module")
def slurm_cluster(tmp_path_factory):
    """munged, slurmctld and slurmd for one 64-CPU, 4-GPU node, stopped after the module."""
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        unavailable(f"SLURM is not installed (no {', '.join(missing)}; .ci/run installs it)")
    if os.geteuid() != 0:
        unavailable("slurmd must run as root to start jobs")
    for path in (SLURM_CONF, GRES_CONF):
        if path.exists() and not path.read_text().startswith(MARK):
            unavailable(f"{path} belongs to an installed SLURM; not overwriting it")
    directory = tmp_path_factory.mktemp("slurm")
    for name in ("state", "spool"):
        (directory / name).mkdir()
    munge = directory / "munge"
    munge.mkdir(mode=0o700)
    key = munge / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    munge_socket = munge / "munge.socket"
    devices = make_gpu_devices(directory / "dev")
    logs = [directory / f"{name}.log" for name in ("munged", "slurmctld", "slurmd")]
    logs += [directory / f"{name}.out" for name in ("munged", "slurmctld", "slurmd")]
    processes: dict[str, subprocess.Popen] = {}

    def start(name: str, *arguments: str) -> None:
        with open(directory / f"{name}.out", "w") as out:
            processes[name] = subprocess.Popen(
                [name, *arguments], stdout=out, stderr=subprocess.STDOUT, cwd=directory
            )

    SLURM_CONF.parent.mkdir(parents=True, exist_ok=True)
    try:
        start(
            "munged",
            "--foreground",
            "--force",
            f"--key-file={key}",
            f"--socket={munge_socket}",
            f"--pid-file={directory / 'munged.pid'}",
            f"--log-file={directory / 'munged.log'}",
            f"--seed-file={directory / 'munged.seed'}",
        )
        deadline = time.monotonic() + 20
        while not munge_socket.exists():
            if time.monotonic() > deadline or processes["munged"].poll() is not None:
                unavailable(f"munged did not start{''.join(map(tail, logs))}")
            time.sleep(0.1)
        SLURM_CONF.write_text(slurm_conf(directory, munge_socket, free_ports(2)))
        GRES_CONF.write_text(f"{MARK}NodeName={NODE} Name=gpu File={devices}\n")
        start("slurmctld", "-D", "-i")
        start("slurmd", "-D", "-N", NODE)
        wait_for_node(processes, logs)
        yield directory
    finally:
        stop_cluster(processes)
        for path in (SLURM_CONF, GRES_CONF):
            if path.exists() and path.read_text().startswith(MARK):
                path.unlink()


# --- the scheduler's records ------------------------------------------------------------------


@dataclass(frozen=True)
class Job:
    """One job as `scontrol -d show job` reports it at one moment."""

    job_id: int
    state: str
    reason: str
    comment: str  # the plugin's rule_<rule>[_wildcards_<wildcards>]
    partition: str
    cpus: int
    memory_mb: int | None  # while allocated
    gpu: str | None  # the GPU index SLURM allocated, while allocated

    @property
    def rule(self) -> str:
        return re.fullmatch(r"rule_(.+?)(?:_wildcards_.*)?", self.comment).group(1)

    @property
    def wildcards(self) -> str:
        return self.comment.partition("_wildcards_")[2]

    @property
    def on_gpu(self) -> bool:
        return self.rule in GPU_RULES


@dataclass
class Snapshot:
    seconds: float
    jobs: dict[int, Job]
    node_cpus_allocated: int

    def gpu_jobs(self, state: str, reason: str | None = None) -> list[Job]:
        return [
            job
            for job in self.jobs.values()
            if job.on_gpu and job.state == state and reason in (None, job.reason)
        ]

    def is_packed(self) -> bool:
        """Four GPU jobs running on four distinct devices, and one more waiting for resources."""
        running = self.gpu_jobs("RUNNING")
        return (
            len(running) == NODE_GPUS
            and len({job.gpu for job in running}) == NODE_GPUS
            and bool(self.gpu_jobs("PENDING", "Resources"))
        )


def field_of(pattern: str, line: str) -> str | None:
    found = re.search(rf"(?:^|\s){pattern}", line)
    return found.group(1) if found else None


def read_jobs() -> dict[int, Job]:
    jobs = {}
    for line in slurm("scontrol", "-d", "-o", "show", "job").stdout.splitlines():
        if not line.startswith("JobId=") or not field_of(r"Comment=(rule_\S+)", line):
            continue
        memory = field_of(r"Mem=(\d+)", line)
        job = Job(
            job_id=int(field_of(r"JobId=(\d+)", line)),
            state=field_of(r"JobState=(\S+)", line),
            reason=field_of(r"Reason=(\S+)", line),
            comment=field_of(r"Comment=(\S+)", line),
            partition=field_of(r"Partition=(\S+)", line),
            cpus=int(field_of(r"NumCPUs=(\d+)", line)),
            memory_mb=int(memory) if memory else None,
            gpu=field_of(r"GRES=gpu(?::[^(\s]*)?\(IDX:([^)]+)\)", line),
        )
        jobs[job.job_id] = job
    return jobs


def read_node_cpus_allocated() -> int:
    node = slurm("scontrol", "-o", "show", "node", NODE).stdout
    return int(field_of(r"CPUAlloc=(\d+)", node) or 0)


class Recorder:
    """Polls the scheduler twice a second in a thread. Once four GPU jobs share the node, it kills
    one other GPU job with scancel while that runs (a node failure, as far as Snakemake can tell).

    GPU jobs are held (see :func:`holding_kennel`) until it releases them: the four that filled
    the node once it has seen them do so, every other one once the kill has landed (so the job
    it kills is still running when scancel reaches it), and all of them when it stops.
    """

    def __init__(self, release: Path) -> None:
        self.snapshots: list[Snapshot] = []
        self.packed: Snapshot | None = None  # the first moment four GPU jobs filled the node
        self.killed: int | None = None  # the scancelled job, once SLURM reports it CANCELLED
        self._cancelling: int | None = None
        self._release = release
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        self._thread.join(timeout=60)
        (self._release / RELEASE_ALL).touch()  # nothing stays held after the run, even failed

    def _let_go(self) -> None:
        if self.killed is not None:
            (self._release / RELEASE_ALL).touch()
        elif self.packed is not None:
            for job in self.packed.gpu_jobs("RUNNING"):
                (self._release / str(job.job_id)).touch()

    def _poll(self) -> None:
        try:
            self._record()
        finally:  # a thread that died (a parse error, a hung scancel) must not hold the jobs
            (self._release / RELEASE_ALL).touch()

    def _record(self) -> None:
        start = time.monotonic()
        while not self._done.is_set():
            try:
                # node, jobs, node: a job may start or end between two scontrol calls, so a
                # snapshot counts only if the node's allocation did not move while jobs were read
                allocated = read_node_cpus_allocated()
                jobs = read_jobs()
                if read_node_cpus_allocated() != allocated:
                    continue
            except subprocess.TimeoutExpired:
                continue
            snapshot = Snapshot(time.monotonic() - start, jobs, allocated)
            self.snapshots.append(snapshot)
            if self.packed is None and snapshot.is_packed():
                self.packed = snapshot
            self._kill_once(snapshot)
            self._let_go()
            self._done.wait(0.5)

    def _kill_once(self, snapshot: Snapshot) -> None:
        if self.packed is None or self.killed is not None:
            return
        if self._cancelling is not None:
            job = snapshot.jobs.get(self._cancelling)
            if job is not None and job.state == "CANCELLED":
                self.killed = self._cancelling
            elif job is not None and job.state in ("COMPLETED", "FAILED"):
                self._cancelling = None  # it ended before scancel landed: take another
            return
        packed = {job.job_id for job in self.packed.gpu_jobs("RUNNING")}
        for job in snapshot.gpu_jobs("RUNNING"):
            if job.job_id not in packed:
                self._cancelling = job.job_id
                slurm("scancel", str(job.job_id))
                return

    def last_seen(self) -> dict[int, Job]:
        """Every job's last record (ended jobs stay listed for MinJobAge)."""
        jobs = {}
        for snapshot in self.snapshots:
            jobs.update(snapshot.jobs)
        return jobs

    def running_records(self) -> dict[int, Job]:
        """Every job's last record while it ran (the GPU index is listed only then)."""
        jobs = {}
        for snapshot in self.snapshots:
            jobs.update({i: job for i, job in snapshot.jobs.items() if job.state == "RUNNING"})
        return jobs


# --- the two runs -----------------------------------------------------------------------------


# This small demo's GPU jobs end within seconds on the CPU, too soon for four to be seen running
# at once with a fifth waiting: a `kennel` ahead of the real one on PATH holds each GPU job until
# the Recorder releases it (by its SLURM job id, or all at once), so the test waits for what it
# must see and no longer (a fixed 20 s hold was once too short on a loaded 2-core host, and 40 s
# cost every GPU job 40 s). Outputs are unchanged; only the jobs' timing is. HOLD_AT_MOST_S ends
# a hold the Recorder never releases: the packing assertion then fails, not the run's timeout
# (eight GPU jobs, at most four at once: even three waves of whole holds fit its 900 s).
HOLD_AT_MOST_S = 150
RELEASE_ALL = "all"


def holding_kennel(directory: Path, release: Path) -> Path:
    real = shutil.which("kennel") or pytest.fail("kennel is not on PATH (pip install -e .)")
    shim = directory / "kennel"
    shim.write_text(
        "#!/bin/sh\n"
        'case "$1" in classify|score-snps)\n'
        f"  end=$(( $(date +%s) + {HOLD_AT_MOST_S} ))\n"
        f"  release={shlex.quote(str(release))}\n"
        f'  until [ -e "$release/{RELEASE_ALL}" ] || [ -e "$release/${{SLURM_JOB_ID:-none}}" ] '
        '|| [ "$(date +%s)" -ge "$end" ]; do sleep 0.2; done;;\n'
        "esac\n"
        f'exec {shlex.quote(real)} "$@"\n'
    )
    shim.chmod(0o755)
    return directory


def run_snakemake(
    directory: Path, *arguments: str, timeout: int, path_prefix: Path | None = None
) -> str:
    environment = clean_environment()
    if path_prefix is not None:
        environment["PATH"] = f"{path_prefix}{os.pathsep}{environment['PATH']}"
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", *arguments],
        cwd=directory,
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    output = result.stdout + result.stderr
    if result.returncode != 0:
        logs = sorted((directory / "logs").rglob("*.log"))
        logs += sorted((directory / ".snakemake/slurm_logs").rglob("*.log"))
        raise AssertionError(f"snakemake failed:\n{output[-6000:]}{''.join(map(tail, logs))}")
    return output


@pytest.fixture(scope="module")
def local_run(tmp_path_factory) -> Path:
    """The same demo with `snakemake --cores 2`: the reference, and the inputs both runs use."""
    directory = copy_workflow(tmp_path_factory.mktemp("local"))
    config = write_yaml(tmp_path_factory.mktemp("config") / "demo.yaml", DEMO)
    run_snakemake(directory, "--cores", "2", "--configfile", str(config), timeout=900)
    return directory


def site_profile(workflow: Path, directory: Path) -> Path:
    """The profile's placeholders filled in for this cluster, given as a second profile: its
    partitions, no account; and a first status check after 2 s instead of 40."""
    shipped = yaml.safe_load((workflow / "profiles/slurm/config.yaml").read_text())
    defaults = dict(shipped["default-resources"], slurm_partition=CPU_PARTITION)
    del defaults["slurm_account"]
    per_rule = {
        rule: dict(resources, slurm_partition=GPU_PARTITION)
        for rule, resources in shipped["set-resources"].items()
    }
    site = {
        "default-resources": defaults,
        "set-resources": per_rule,
        "slurm-init-seconds-before-status-checks": 2,
    }
    return write_yaml(directory / "config.yaml", site).parent


@dataclass
class SlurmRun:
    directory: Path
    output: str
    recorder: Recorder


@pytest.fixture(scope="module")
def slurm_run(slurm_cluster, local_run, tmp_path_factory) -> SlurmRun:
    """`snakemake --profile slurm` on the cluster, from the local run's demo inputs and bundle
    (so the comparison is of the runs, and the run starts at `shard`)."""
    directory = copy_workflow(tmp_path_factory.mktemp("on_slurm"))
    shutil.copytree(local_run / "resources", directory / "resources")
    site = site_profile(directory, tmp_path_factory.mktemp("site"))
    config = write_yaml(tmp_path_factory.mktemp("config") / "demo.yaml", DEMO)
    release = tmp_path_factory.mktemp("release")
    recorder = Recorder(release)
    recorder.start()
    try:
        output = run_snakemake(
            directory, "--profile", "slurm", "--profile", str(site), "--configfile", str(config),
            timeout=900, path_prefix=holding_kennel(tmp_path_factory.mktemp("bin"), release),
        )  # fmt: skip
    except (AssertionError, subprocess.TimeoutExpired) as error:
        raise AssertionError(f"{error}{tail(slurm_cluster / 'slurmctld.log')}") from None
    finally:
        recorder.stop()
    return SlurmRun(directory, output, recorder)


def logged_device(directory: Path, job: Job) -> str | None:
    """The CUDA_VISIBLE_DEVICES that `kennel` logged at the start of this GPU job."""
    head, _, last = job.wildcards.rpartition("_")  # {sample}_{shard} / {job}_{slice}
    log = (directory / "logs" / job.rule / f"{head}.{last}.log").read_text()
    found = re.search(r"CUDA_VISIBLE_DEVICES=(\S+)", log)
    return found.group(1) if found else None


# --- what the scheduler saw -------------------------------------------------------------------


def test_profile_slurm_resolves_from_the_repository_root(slurm_run):
    # that `slurm` links to profiles/slurm is test_profiles' concern; here, snakemake used it
    assert "Using profiles slurm and " in slurm_run.output


def test_four_gpu_jobs_fill_the_node_on_distinct_devices_while_a_fifth_waits(slurm_run):
    recorder = slurm_run.recorder
    most = max((len(s.gpu_jobs("RUNNING")) for s in recorder.snapshots), default=0)
    assert recorder.packed is not None, f"at most {most} GPU jobs ran at once, none waiting"
    packed = recorder.packed
    running = packed.gpu_jobs("RUNNING")
    assert sorted(job.gpu for job in running) == [str(i) for i in range(NODE_GPUS)]
    assert packed.node_cpus_allocated == NODE_CPUS  # four x 16 CPUs: the node is full
    for job in running:
        assert (job.partition, job.cpus) == (GPU_PARTITION, NODE_CPUS // NODE_GPUS)
        assert job.memory_mb == NODE_MEMORY_MB // NODE_GPUS
        # the job's own log names the device SLURM allocated to it
        assert logged_device(slurm_run.directory, job) == job.gpu, job.comment
    waiting = packed.gpu_jobs("PENDING", "Resources")
    ran_later = recorder.running_records()
    assert all(job.job_id in ran_later for job in waiting), "a waiting job never ran"


def test_every_gpu_job_logs_the_device_slurm_gave_it(slurm_run):
    last_run = {}
    for job in sorted(slurm_run.recorder.running_records().values(), key=lambda j: j.job_id):
        if job.on_gpu:
            last_run[job.comment] = job  # a retried job's log is its last attempt's
    assert len(last_run) == len(SAMPLES) * DEMO["trna"]["shards"] + 2  # 6 classify, 2 slices
    for job in last_run.values():
        assert job.gpu is not None and logged_device(slurm_run.directory, job) == job.gpu


def test_a_gpu_job_killed_once_is_retried_and_the_run_completes(slurm_run):
    recorder = slurm_run.recorder
    assert recorder.killed is not None, "no running GPU job could be cancelled"
    jobs = recorder.last_seen()
    killed = jobs[recorder.killed]
    attempts = sorted(j.job_id for j in jobs.values() if j.comment == killed.comment)
    assert [jobs[i].state for i in attempts] == ["CANCELLED", "COMPLETED"], killed.comment
    assert "Trying to restart job" in slurm_run.output


def test_cpu_rules_run_on_the_cpu_partition_with_their_own_threads(slurm_run):
    jobs = slurm_run.recorder.last_seen().values()
    rules = {job.rule for job in jobs}
    assert {"shard", "extract", "merge_bam", "summarize", "slice_vcf", "merge_scores"} <= rules
    assert set(GPU_RULES) <= rules
    config = yaml.safe_load((slurm_run.directory / "config/config.yaml").read_text())
    threads = {
        "extract": config["trna"]["extract"]["threads"],
        "merge_bam": config["trna"]["merge"]["threads"],
        "shard": config["trna"]["shard"]["threads"],
        "summarize": 1,
    }
    for job in jobs:
        if job.on_gpu:
            assert job.partition == GPU_PARTITION, job.comment
            continue
        assert job.partition == CPU_PARTITION and job.gpu is None, job.comment
        if job.rule in threads:
            assert job.cpus == threads[job.rule], job.comment


def bam_records(path: Path) -> list[str]:
    with pysam.AlignmentFile(str(path)) as bam:
        return [record.to_string() for record in bam.fetch(until_eof=True)]


def h5_contents(path: Path) -> dict[str, object]:
    contents: dict[str, object] = {}

    def collect(name, item):
        if isinstance(item, h5py.Dataset):
            contents[name] = item[()]

    with h5py.File(path) as handle:
        contents.update({f"@{key}": str(value) for key, value in handle.attrs.items()})
        handle.visititems(collect)
    return contents


def test_outputs_equal_a_local_run(slurm_run, local_run):
    for sample in SAMPLES:
        merged = f"results/trna/{sample}/{sample}.classified.bam"
        assert bam_records(slurm_run.directory / merged) == bam_records(local_run / merged)
        for table in ("counts", "classes"):
            summary = f"results/trna/{sample}/summary/{table}.tsv"
            assert (slurm_run.directory / summary).read_text() == (local_run / summary).read_text()
    on_slurm = h5_contents(slurm_run.directory / "results/snp/demo_snp/scores.h5")
    local = h5_contents(local_run / "results/snp/demo_snp/scores.h5")
    assert on_slurm.keys() == local.keys()
    for name, value in local.items():
        np.testing.assert_array_equal(on_slurm[name], value, err_msg=name)

"""A stand-in for `conda` (no conda channel is reachable here or in CI) that does what
`snakemake --sdm conda` needs of it, and of `conda env create` only the step a checkout-relative
path depends on: conda writes the env file's pip section to a requirements file beside the env
file Snakemake copied into .snakemake/conda/, and runs pip from that directory.

Here pip resolves only the local (`-e`) lines, dry, and writes its report to
``$FAKE_CONDA_REPORT``; conda packages and PyPI names are not installed (they need channels and
an index, and do not depend on where pip runs). pip's exit status is conda's.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import yaml


def create(arguments: list[str]) -> int:
    env_file = Path(arguments[arguments.index("--file") + 1])
    prefix = Path(arguments[arguments.index("--prefix") + 1])
    spec = yaml.safe_load(env_file.read_text())
    pip = next(item["pip"] for item in spec["dependencies"] if isinstance(item, dict))
    workdir = env_file.parent
    requirements = workdir / "condaenv.fake.requirements.txt"
    requirements.write_text("".join(f"{line}\n" for line in pip if line.startswith("-e ")))
    command = [sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps", "--quiet"]
    if importlib.util.find_spec("setuptools"):
        command.append("--no-build-isolation")  # kennel's build backend is already here
    command += ["--report", os.environ["FAKE_CONDA_REPORT"], "-r", requirements.name]
    status = subprocess.run(command, cwd=workdir).returncode
    requirements.unlink()
    if status == 0:
        (prefix / "bin").mkdir(parents=True, exist_ok=True)
    return status


def main(arguments: list[str]) -> int:
    words = " ".join(arguments)
    if words == "--version":
        print("conda 24.7.1")
    elif words == "info --json":
        root = os.environ["FAKE_CONDA_ROOT"]
        print(json.dumps({"conda_prefix": root, "root_prefix": root, "platform": "linux-64"}))
    elif words.startswith("config --get channel_priority"):
        print(json.dumps({"get": {"channel_priority": "strict"}}))
    elif arguments[:1] == ["clean"]:
        pass  # no package cache to clean
    elif arguments[:2] == ["env", "create"]:
        return create(arguments[2:])
    else:
        print(f"fake conda: {words!r} is not imitated", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

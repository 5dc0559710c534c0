"""Replay: rebuild a version's kernels from its job folder alone and say whether they are the recorded ones.

    python -m workers.compile.replay JOB_DIR [vN] [--from-params]   (default: every version that compiled)
    orchestrator replay JOB [vN]

The inputs are the job's model_linalg.mlir and model_info.json and the version's params.json,
transform.mlir and pass_pipeline.txt: build.py runs the same path that compiled it. With --from-params,
today's compiler first writes transform.mlir and pass_pipeline.txt again from params.json (in a scratch
folder): a check that a change to the compiler keeps the recorded kernels. Exit 0 when every version's
kernels.ptx and config.json come out byte for byte the same, 1 when one differs, 2 on bad input.
"""
from __future__ import annotations

import argparse
import difflib
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass

from workers.compile import mlir
from workers.compile.build import PARAMS_FILE, PIPELINE_FILE, TRANSFORM_FILE, Build, build
from workers.compile.driver import write_version
from workers.compile.host import HostComputeError
from workers.jsonrecord import JsonRecord
from workers.layout import COMPILE_RESULT_FILE, LINALG_FILE, MODEL_INFO_FILE, version_dir
from workers.compile.schedule import ScheduleError
from workers.records import CompileResult, ScheduleParams

RECORD = (LINALG_FILE, MODEL_INFO_FILE)  # of the job; and of each version:
VERSION_RECORD = (PARAMS_FILE, TRANSFORM_FILE, PIPELINE_FILE, "kernels.ptx", "config.json")


class ReplayError(Exception):
    """The folder does not hold what a replay needs; the message says what is missing."""


@dataclass
class Replay(JsonRecord):
    version: int
    ptx_identical: bool
    config_identical: bool
    difference: str = ""  # the first differing lines, where the kernels differ

    @property
    def identical(self) -> bool:
        return self.ptx_identical and self.config_identical


def _first_difference(recorded: str, rebuilt: str, what: str) -> str:
    diff = difflib.unified_diff(recorded.splitlines(), rebuilt.splitlines(), f"recorded {what}", f"rebuilt {what}",
                                lineterm="", n=1)
    return "\n".join(list(diff)[:12])


def replay(job_dir: str, version: int, from_params: bool = False) -> Replay:
    vdir = version_dir(job_dir, version)
    missing = [os.path.join(job_dir, f) for f in RECORD] + [os.path.join(vdir, f) for f in VERSION_RECORD]
    missing = [path for path in missing if not os.path.isfile(path)]
    if missing:
        raise ReplayError(f"v{version} of {job_dir} cannot be replayed: {', '.join(missing)} missing")
    try:
        built = _rebuilt_from_params(job_dir, vdir) if from_params else build(job_dir, vdir)
    except (mlir.MlirError, HostComputeError, ScheduleError, ValueError) as e:
        raise ReplayError(f"v{version} of {job_dir} does not build from its record: {e}") from None
    with open(os.path.join(vdir, "kernels.ptx"), "rb") as f:
        ptx = f.read()
    with open(os.path.join(vdir, "config.json")) as f:
        config = f.read()
    rebuilt_config = built.config.to_json(indent=2)
    result = Replay(version, built.ptx == ptx, rebuilt_config == config)
    if not result.ptx_identical:
        result.difference = _first_difference(ptx.decode(errors="replace"), built.ptx.decode(errors="replace"),
                                              "kernels.ptx")
    elif not result.config_identical:
        result.difference = _first_difference(config, rebuilt_config, "config.json")
    return result


def _rebuilt_from_params(job_dir: str, vdir: str) -> Build:
    """The version's kernels as today's compiler makes them from its params.json, in a scratch job folder."""
    with tempfile.TemporaryDirectory() as scratch:
        for name in RECORD:
            shutil.copy(os.path.join(job_dir, name), scratch)
        rebuilt = os.path.join(scratch, os.path.basename(vdir))
        os.makedirs(rebuilt)
        with open(os.path.join(vdir, PARAMS_FILE)) as f:
            write_version(scratch, rebuilt, ScheduleParams.from_json(f.read()))
        return build(scratch, rebuilt)


def compiled_versions(job_dir: str) -> list[int]:
    """The versions of the job folder that compiled (their compile_result.json says so)."""
    versions = []
    for name in os.listdir(job_dir):
        path = os.path.join(job_dir, name, COMPILE_RESULT_FILE)
        if re.fullmatch(r"v\d+", name) and os.path.isfile(path):
            with open(path) as f:
                if CompileResult.from_json(f.read()).ok:
                    versions.append(int(name[1:]))
    return sorted(versions)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("job_dir", help="a job folder (OUT/<model>)")
    parser.add_argument("version", nargs="?", help="vN or N (default: every version that compiled)")
    parser.add_argument("--from-params", action="store_true",
                        help="write transform.mlir and pass_pipeline.txt again from params.json with today's compiler")
    args = parser.parse_args(argv)
    if not os.path.isdir(args.job_dir):
        print(f"replay: {args.job_dir} is no job folder", file=sys.stderr)
        return 2
    versions = [int(args.version.lstrip("v"))] if args.version else compiled_versions(args.job_dir)
    if not versions:
        print(f"replay: {args.job_dir} has no version that compiled", file=sys.stderr)
        return 2
    differ = False
    for version in versions:
        try:
            result = replay(args.job_dir, version, args.from_params)
        except ReplayError as e:
            print(f"replay: {e}", file=sys.stderr)
            return 2
        differ |= not result.identical
        print(f"v{version}: " + ("kernels.ptx and config.json rebuilt byte for byte" if result.identical else
                                 f"the rebuilt kernels differ from the recorded ones\n{result.difference}"))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())

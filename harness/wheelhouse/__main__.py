"""``python -m harness.wheelhouse {build,stage-plan,stage,status,install,verify}``.

Only ``build`` is imported on demand: it needs zstandard, which the runner does not have
until ``install`` has unpacked it; everything else here is standard library.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from harness import ROOT
from harness.base import cli
from harness.base.results import OUTPUT_DIR
from harness.wheelhouse import install, received, transfer, verify
from harness.wheelhouse.manifest import MANIFEST_NAME, Manifest
from harness.wheelhouse.pins import releases
from harness.wheelhouse.table import mib

# The git-ignored folder a runner call carries, relative to the repository: the runner copies from there.
CARRY = str((OUTPUT_DIR / "carry" / "wheelhouse").relative_to(ROOT))


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a positive number")
    return value


def _whole(low: int, high: int):
    """An int option within low..high (zstd's own bounds), said in one line when not."""

    def parse(text: str) -> int:
        if not text.strip().lstrip("-").isdigit() or not low <= int(text) <= high:
            raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number in {low}..{high}")
        return int(text)

    return parse


def _manifest(folder: Path) -> Manifest:
    """Manifest.read, with a damaged manifest said in one line (read trusts the file's shape)."""
    try:
        return Manifest.read(folder)
    except json.JSONDecodeError as error:
        problem = f"not valid JSON ({error.msg} at line {error.lineno})"
    except (KeyError, TypeError, AttributeError) as error:
        problem = f"not a wheelhouse manifest this code reads ({type(error).__name__}: {error})"
    raise ValueError(f"{folder / MANIFEST_NAME}: {problem}; copy it again from the build's --out folder")


def _build(args) -> int:
    from harness.wheelhouse import build

    manifest = build.build(args.out, args.sglang, args.transfer_mib, args.level, args.window_log)
    print(build.report(manifest, args.out))
    return 0


def _stage_plan(args) -> int:
    print(transfer.plan_text(_manifest(args.parts), args.parts, args.carry))
    return 0


def _stage(args) -> int:
    manifest = _manifest(args.parts)
    stage_bytes = sum(stage.size for stage in manifest.stages if stage.stage == args.number)
    transfer.check_call_size(stage_bytes + (args.parts / MANIFEST_NAME).stat().st_size,
                             transfer.working_tree_bytes(Path.cwd()), args.number)
    copied = transfer.copy_stage(manifest, args.parts, args.number, args.into)
    total = sum(path.stat().st_size for path in copied)
    print(f"stage {args.number}/{len(manifest.stages)}: {len(copied)} files, {mib(total)} in {args.into}")
    print(f"runner: {transfer.runner_command(manifest, args.number, str(args.into))}")
    return 0


def _status(args) -> int:
    print(received.status_line(received.check(_manifest(args.parts), args.parts), args.parts))
    return 0


def _install(args) -> int:
    _manifest(args.parts)
    work = args.work or args.parts / "unpacked"
    print(install.install(args.parts, args.target, work, args.force))
    return 0


def _verify(args) -> int:
    _manifest(args.target)
    ok, text = verify.verify(args.target)
    print(text)
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = cli.Parser(
        prog="python -m harness.wheelhouse",
        description="Offline wheelhouse for the air-gapped GPU runner (see harness/wheelhouse/RUNBOOK.md).")
    commands = parser.add_subparsers(dest="command", required=True)

    known = releases()
    build = commands.add_parser("build", help="download, repack, compress and split one release's pinned wheels")
    build.add_argument("--sglang", choices=known, default=known[-1],
                       help=f"the release whose pins/sglang-<release>.txt to build ({known[-1]})")
    build.add_argument("--out", type=cli.output_folder, required=True, help="folder for the parts (outside the repo)")
    build.add_argument("--transfer-mib", type=_positive, default=48.0,
                       help="most wheelhouse bytes per runner call; 64 MiB less this is left for the "
                       "working tree (48: the tree is about 12 MiB)")
    build.add_argument("--level", type=_whole(1, 22), default=3, help="zstd level (3; RUNBOOK.md has the measurements)")
    build.add_argument("--window-log", type=_whole(10, 31), default=31, help="zstd window log, long matching (31)")
    build.set_defaults(run=_build)

    plan = commands.add_parser("stage-plan", help="print the transfer batches from the manifest")
    plan.add_argument("--parts", type=cli.input_folder, required=True, help="the build's --out folder")
    plan.add_argument("--carry", default=CARRY,
                      help="git-ignored folder in the repo that the runner call carries")
    plan.set_defaults(run=_stage_plan)

    stage = commands.add_parser("stage", help="put one stage's files into the carried folder")
    stage.add_argument("number", type=cli.positive_int)
    stage.add_argument("--parts", type=cli.input_folder, required=True, help="the build's --out folder")
    stage.add_argument("--into", type=cli.output_folder, default=CARRY)
    stage.set_defaults(run=_stage)

    status = commands.add_parser("status", help="on the runner: which stages are here, which to send")
    status.add_argument("--parts", type=cli.input_folder, required=True, help="folder the stages are copied into")
    status.set_defaults(run=_status)

    inst = commands.add_parser("install", help="check, decompress and pip-install (stdlib only)")
    inst.add_argument("--parts", type=cli.input_folder, required=True, help="folder holding every stage's files")
    inst.add_argument("--target", type=cli.output_folder, required=True, help="pip --target folder")
    inst.add_argument("--work", type=cli.output_folder, help="where wheels are unpacked (PARTS/unpacked)")
    inst.add_argument("--force", action="store_true", help="reinstall even if the target is current")
    inst.set_defaults(run=_install)

    ver = commands.add_parser("verify", help="smoke-import the installed wheelhouse")
    ver.add_argument("--target", type=cli.input_folder, required=True)
    ver.set_defaults(run=_verify)

    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except (FileNotFoundError, ValueError, RuntimeError) as error:
        print(f"error: {error}", file=sys.stderr)
    except OSError as error:
        print(f"error: {cli.os_problem(error)}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())

"""The sglang bugs attn-harness found, as packets a maintainer can act on without the harness.

Each ``findings/<slug>/`` holds a ``finding.yaml`` (the facts below, validated strictly), the
upstream-ready write-up ``README.md``, a standalone ``repro.py`` (sglang, torch and the kernel
library only, on ``findings/sglang_standin.py``) that exits 1 on stock sglang and 0 with ``fix.diff``
applied, and what was measured with it (``measured/*.json``). This module lists the packets with
their upstream status, runs the reproducers stock and fixed against the installed sglang (a patched
copy of it on PYTHONPATH, never the installed files), records what they measured, and bundles a
reproducer into one script for an upstream issue.

    python -m harness findings                     # the packets, their status and what was measured
    python -m harness findings run [SLUG ...]      # stock and fixed, here -> out/findings/
    python -m harness findings record              # out/findings/<slug>/*.json -> findings/<slug>/measured/
    python -m harness findings bundle SLUG         # one self-contained script -> out/findings/<slug>/
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from harness import ROOT, cli
from harness.releases import KNOWN_RELEASES
from harness.results import OUTPUT_DIR

FINDINGS_DIR = ROOT / "findings"
STANDIN = "sglang_standin.py"
OUT = OUTPUT_DIR / "findings"
PROJECTS = ("sglang", "flashinfer", "flash-attention")  # where a root cause can live
THREAD = r"^[\w.-]+/[\w.-]+#\d+$"  # owner/repo#N: an issue or a pull request


class FindingError(ValueError):
    """A packet is malformed; the message names the file and the field."""


class Thread(BaseModel):
    """One upstream thread read for the finding, as it stood when read."""

    model_config = ConfigDict(extra="forbid", strict=True)
    thread: str = Field(pattern=THREAD, description="owner/repo#N")
    state: Literal["open", "closed", "merged", "closed unmerged"]
    relation: Literal["same bug", "fix proposed", "introduced it", "fixed it", "same class", "related"]
    note: str = Field(min_length=1, description="what the thread says, in a sentence")

    @property
    def url(self) -> str:
        repo, number = self.thread.split("#")
        return f"https://github.com/{repo}/issues/{number}"


class CodePath(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    releases: str = Field(min_length=1, description="the sglang releases this path holds for, e.g. 0.5.17-0.5.23")
    where: str = Field(min_length=1, description="file:function (lines) where the bug lives")


class Serving(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    config: str = Field(min_length=1, description="one real configuration that reaches it: model, TP/DP, backend, flags")
    needs_speculative: bool
    why: str = Field(min_length=1)


class Finding(BaseModel):
    """finding.yaml: what a maintainer needs to act on one bug."""

    model_config = ConfigDict(extra="forbid", strict=True)
    title: str = Field(min_length=1)
    status: Literal["new", "duplicate", "fixed"] = Field(
        description="new: no upstream thread; duplicate: a thread tracks the same bug (say what this adds); "
                    "fixed: a released sglang or kernel library fixes it (fixed_in)")
    root_cause: Literal[PROJECTS] = Field(description="the project whose code is wrong")
    fixed_in: str | None = Field(default=None, description="'<project> <release> (<thread>)' where status is fixed")
    affected: list[str] = Field(min_length=1, description="sglang releases whose stock stack shows it")
    code_path: list[CodePath] = Field(min_length=1)
    serving: Serving
    upstream: list[Thread] = Field(default=[], description="threads read; status duplicate needs a 'same bug' one")
    read_on: str = Field(min_length=1, description="when the threads were read, and how current the copy was")
    adds: str | None = Field(default=None, description="what this finding adds to the threads (duplicates)")
    known_failures: list[str] = Field(default=[], description="KNOWN_FAILURES.md entries of its cells")
    fix: str = Field(min_length=1, description="the harness fix (harness/seed_bugs.py FIXES) fix.diff is made from")

    @model_validator(mode="after")
    def _status_has_its_evidence(self) -> "Finding":
        unknown = [release for release in self.affected if release not in KNOWN_RELEASES]
        if unknown:
            raise ValueError(f"affected: {unknown[0]} is no known release ({', '.join(KNOWN_RELEASES)})")
        if self.status == "fixed" and not self.fixed_in:
            raise ValueError("fixed_in: required where status is fixed ('<project> <release> (<thread>)')")
        if self.status != "fixed" and self.fixed_in:
            raise ValueError(f"fixed_in: given, but status is {self.status}; a fixed bug says status: fixed")
        same = [thread for thread in self.upstream if thread.relation == "same bug"]
        if self.status == "duplicate" and not (same and self.adds):
            raise ValueError("upstream: a duplicate names the thread of the same bug (relation: same bug) and says "
                             "what it adds (adds)")
        if self.status == "new" and same:
            raise ValueError(f"status: new, but {same[0].thread} is the same bug; say status: duplicate")
        return self

    def affects(self, release: str) -> bool:
        return release in self.affected


def _one_line(error: ValidationError) -> str:
    first = error.errors()[0]
    field = ".".join(str(part) for part in first["loc"]) or "(the file)"
    return f"field '{field}': {first['msg']}"


def load(slug: str) -> Finding:
    path = FINDINGS_DIR / slug / "finding.yaml"
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as error:
        raise FindingError(f"{path.relative_to(ROOT)}: {error}") from None
    try:
        return Finding.model_validate(data)
    except ValidationError as error:
        raise FindingError(f"{path.relative_to(ROOT)}: {_one_line(error)}") from None


def slugs() -> list[str]:
    return sorted(path.parent.name for path in FINDINGS_DIR.glob("*/finding.yaml"))


def load_all() -> dict[str, Finding]:
    return {slug: load(slug) for slug in slugs()}


def upstream_status(finding: Finding) -> str:
    """The status in one phrase: new, duplicate of <thread>, or fixed in <release>."""
    if finding.status == "fixed":
        return f"fixed in {finding.fixed_in}"
    if finding.status == "duplicate":
        same = [thread.thread for thread in finding.upstream if thread.relation == "same bug"]
        return f"duplicate of {', '.join(same)}"
    return "new"


# --- running the reproducers --------------------------------------------------------------------

def _installed_sglang() -> Path:
    spec = importlib.util.find_spec("sglang")
    if spec is None or spec.origin is None:
        raise cli.UsageError("sglang is not installed in this environment")
    return Path(spec.origin).parent


def patched_sglang(slug: str, into: Path) -> Path:
    """A copy of the installed sglang with the finding's fix applied: the same patch fix.diff was made
    from (harness/seed_bugs.py; fix.diff is its diff against the newest release), rewritten into each
    file it touches. Returns the folder to put first on PYTHONPATH; the installed files stay as they are."""
    from harness.seed_bugs import FIXES, patched_file

    root = into / slug
    if root.exists():
        shutil.rmtree(root)
    installed = _installed_sglang()
    shutil.copytree(installed, root / "sglang", ignore=shutil.ignore_patterns("__pycache__"))
    patches = FIXES[load(slug).fix].source
    for path in dict.fromkeys(patch.path_in(installed.parent) for patch in patches):
        _, patched = patched_file(tuple(p for p in patches if p.path_in(installed.parent) == path), path)
        (root / path.relative_to(installed.parent)).write_text(patched)
    return root


def run_repro(slug: str, pythonpath: Path | None, timeout_s: float) -> dict:
    """One run of the finding's reproducer in a fresh process; what it said and how it ended."""
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(pythonpath), env.get("PYTHONPATH")]))
    started = time.monotonic()
    try:
        done = subprocess.run([sys.executable, str(FINDINGS_DIR / slug / "repro.py")], env=env, cwd=ROOT,
                              capture_output=True, text=True, timeout=timeout_s)
        status, output = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as expired:
        status, output = None, f"{expired.stdout or ''}{expired.stderr or ''}\ntimed out after {timeout_s:g} s"
    lines = [line for line in output.splitlines() if line.startswith(("BUG:", "OK:"))]
    tail = [line for line in output.splitlines() if line.strip()][-12:]
    return dict(exit=status, seconds=round(time.monotonic() - started, 1), said=lines,
                tail=tail if not any(line.startswith("OK:") for line in lines) else [])


def outcome(result: dict) -> str:
    """'bug' (a BUG line and a failing exit), 'ok' (exit 0 and an OK line), else 'broken'."""
    said = " ".join(result["said"])
    if result["exit"] not in (0, None) and "BUG:" in said:
        return "bug"
    if result["exit"] == 0 and "OK:" in said and "BUG:" not in said:
        return "ok"
    return "broken"


def verdict(finding: Finding, release: str, stock: str, fixed: str) -> tuple[bool, str]:
    """Whether the pair of runs is what the packet claims on this release, and in words."""
    if finding.affects(release):
        return (stock, fixed) == ("bug", "ok"), f"stock {stock}, fixed {fixed} (expected: stock bug, fixed ok)"
    return (stock, fixed) == ("ok", "ok"), (f"stock {stock}, fixed {fixed} (sglang {release} is not affected: "
                                            "expected ok both ways)")


def _stack() -> dict:
    from harness import platform

    return dict(versions={k: v for k, v in platform.versions().items() if v}, device=platform.device_description())


def run_finding(slug: str, scratch: Path, timeout_s: float) -> dict:
    from harness.releases import installed
    from harness.seed_bugs import ReplayError

    finding = load(slug)
    release = installed().contracts
    stock = run_repro(slug, None, timeout_s)
    try:
        fixed = run_repro(slug, patched_sglang(slug, scratch), timeout_s)
    except (ReplayError, OSError) as error:
        fixed = dict(exit=None, seconds=0.0, said=[], tail=[str(error)])
    expected, words = verdict(finding, release, outcome(stock), outcome(fixed))
    return dict(finding=slug, release=release, date=time.strftime("%Y-%m-%d"), **_stack(), stock=stock,
                fixed=fixed, as_claimed=expected, verdict=words)


def _record_name(result: dict) -> str:
    device = (result["device"]["device"] or "cpu").split("(")[0].strip().replace(" ", "-")
    return f"sglang-{result['release']}-{device}.json"


def run_command(args) -> int:
    chosen = args.slugs or slugs()
    unknown = [slug for slug in chosen if slug not in slugs()]
    if unknown:
        raise cli.UsageError(f"no finding {unknown[0]!r}; findings: {', '.join(slugs())}")
    scratch = OUT / "_patched"
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(lambda slug: run_finding(slug, scratch, args.timeout), chosen))
    shutil.rmtree(scratch, ignore_errors=True)
    for result in results:
        path = OUT / result["finding"] / _record_name(result)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=1) + "\n")
        mark = "as claimed" if result["as_claimed"] else "NOT AS CLAIMED"
        print(f"{result['finding']}: {mark}: {result['verdict']}; stock {result['stock']['seconds']} s, "
              f"fixed {result['fixed']['seconds']} s -> {path.relative_to(ROOT)}")
        for run in ("stock", "fixed"):
            for line in result[run]["said"] + result[run]["tail"][-4:]:
                print(f"  {run}: {line}")
    return 0 if all(result["as_claimed"] for result in results) else 1


def record_command(args) -> int:
    written = []
    for source in sorted(OUT.glob("*/*.json")):
        if source.parent.name not in slugs():
            continue
        target = FINDINGS_DIR / source.parent.name / "measured" / source.name
        target.parent.mkdir(exist_ok=True)
        shutil.copyfile(source, target)
        written.append(target)
    if not written:
        print(f"python -m harness findings record: nothing under {OUT.relative_to(ROOT)}; run "
              "`python -m harness findings run` first", file=sys.stderr)
        return 2
    for path in written:
        print(f"recorded {path.relative_to(ROOT)}")
    return 0


_IMPORT = re.compile(r"sys\.path\.insert\(0, [^\n]*\n(from sglang_standin import \([^)]*\)|from sglang_standin import [^\n]*)[^\n]*\n")


def bundle(slug: str) -> str:
    """The reproducer as one script: the stand-in's text where the reproducer imports it."""
    repro = (FINDINGS_DIR / slug / "repro.py").read_text()
    standin = (FINDINGS_DIR / STANDIN).read_text().replace("from __future__ import annotations\n", "")
    block = f"# --- findings/{STANDIN} of attn-harness, inlined ---\n{standin}\n# --- the reproducer ---\n"
    bundled, count = _IMPORT.subn(lambda _: block, repro, count=1)
    if not count:
        raise cli.UsageError(f"findings/{slug}/repro.py does not import {STANDIN} the way the bundler expects")
    return bundled


def bundle_command(args) -> int:
    path = OUT / args.slug / "repro_standalone.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(bundle(args.slug))
    print(f"wrote {path.relative_to(ROOT)}: python {path.relative_to(ROOT)}")
    return 0


def measured(slug: str) -> list[dict]:
    return [json.loads(path.read_text()) for path in sorted((FINDINGS_DIR / slug / "measured").glob("*.json"))]


def list_command(args) -> int:
    print("| finding | upstream | root cause | affected | measured stock / fixed |")
    print("| --- | --- | --- | --- | --- |")
    for slug, finding in load_all().items():
        runs = "; ".join(f"{m['release']} {m['device']['device']}: {outcome(m['stock'])} / {outcome(m['fixed'])}"
                         for m in measured(slug)) or "not run"
        affected = f"{finding.affected[0]}-{finding.affected[-1]}" if len(finding.affected) > 1 else finding.affected[0]
        print(f"| {slug} | {upstream_status(finding)} | {finding.root_cause} | {affected} | {runs} |")
    return 0


def add_commands(commands) -> None:
    """`findings` and its verbs, on the main command line (harness/__main__.py)."""
    findings = commands.add_parser("findings", help="the sglang bugs found: list, run stock and fixed, record, bundle")
    verbs = findings.add_subparsers(dest="verb", metavar="{list,run,record,bundle}")
    findings.set_defaults(func=list_command)
    verbs.add_parser("list", help="each finding, its upstream status and what was measured").set_defaults(
        func=list_command)
    run = verbs.add_parser("run", help="run reproducers stock and with fix.diff, here -> out/findings/")
    run.add_argument("slugs", nargs="*", help="findings to run (default: all)")
    run.add_argument("-j", "--jobs", type=cli.positive_int, default=4, help="reproducers at once (default 4)")
    run.add_argument("--timeout", type=float, default=900, help="seconds one run may take (default 900)")
    run.set_defaults(func=run_command)
    verbs.add_parser("record", help="copy out/findings/<slug>/*.json into findings/<slug>/measured/").set_defaults(
        func=record_command)
    packet = verbs.add_parser("bundle", help="one self-contained reproducer script -> out/findings/<slug>/")
    packet.add_argument("slug", choices=slugs())
    packet.set_defaults(func=bundle_command)

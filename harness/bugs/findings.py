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

import ast
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
from harness import ROOT
from harness.base import cli
from harness.bugs.finding_packets import FINDINGS_DIR, Finding, load, load_all, slugs, upstream_status
from harness.base.releases import KNOWN_RELEASES
from harness.base.results import OUTPUT_DIR

STANDIN = "sglang_standin.py"
OUT = OUTPUT_DIR / "findings"


# --- running the reproducers --------------------------------------------------------------------

def _installed_sglang() -> Path:
    spec = importlib.util.find_spec("sglang")
    if spec is None or spec.origin is None:
        raise cli.UsageError("sglang is not installed in this environment")
    return Path(spec.origin).parent


def patched_sglang(slug: str, into: Path) -> Path:
    """A copy of the installed sglang with the finding's fix applied: the same patch fix.diff was made
    from (harness/bugs/seed_bugs.py; fix.diff is its diff against the newest release), rewritten into each
    file it touches. Returns the folder to put first on PYTHONPATH; the installed files stay as they are."""
    from harness.bugs.seed_bugs import FIXES, patched_file

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
    lines = list(dict.fromkeys(line for line in output.splitlines() if line.startswith(SAID)))
    tail = [line for line in output.splitlines() if line.strip()][-12:]
    return dict(exit=status, seconds=round(time.monotonic() - started, 1), said=lines,
                tail=tail if not any(line.startswith("OK:") for line in lines) else [])


SAID = ("BUG:", "OK:", "UNGUARDED:")  # the lines a reproducer says its verdict with, and the unguarded call


def outcome(result: dict) -> str:
    """'bug' (a BUG line and a failing exit, or a death by signal right after an UNGUARDED line: the
    call it names overran memory and the heap corruption aborted the process before the check could
    say so, as an out-of-bounds write on the CPU may), 'ok' (exit 0 and an OK line), else 'broken'."""
    said = " ".join(result["said"])
    aborted_unguarded = (result["exit"] or 0) < 0 and any(line.startswith("UNGUARDED:") for line in result["said"][-1:])
    if result["exit"] not in (0, None) and ("BUG:" in said or aborted_unguarded):
        return "bug"
    if result["exit"] == 0 and "OK:" in said and "BUG:" not in said:
        return "ok"
    return "broken"


def verdict(finding: Finding, release: str, stock: str, fixed: str | None) -> tuple[bool, str]:
    """Whether the pair of runs is what the packet claims on this release, and in words; ``fixed`` is
    None for a packet that proposes no fix (the stock run alone is judged)."""
    if fixed is None:
        claimed = "bug" if finding.affects(release) else "ok"
        return stock == claimed, f"stock {stock} (expected: {claimed}; no fix proposed)"
    if finding.affects(release):
        return (stock, fixed) == ("bug", "ok"), f"stock {stock}, fixed {fixed} (expected: stock bug, fixed ok)"
    return (stock, fixed) == ("ok", "ok"), (f"stock {stock}, fixed {fixed} (sglang {release} is not affected: "
                                            "expected ok both ways)")


def _stack() -> dict:
    from harness.base import platform

    return dict(versions={k: v for k, v in platform.versions().items() if v}, device=platform.device_description())


def run_finding(slug: str, scratch: Path, timeout_s: float) -> dict:
    from harness.base.releases import installed
    from harness.bugs.seed_bugs import ReplayError

    finding = load(slug)
    release = installed().contracts
    stock = run_repro(slug, None, timeout_s)
    try:
        fixed = run_repro(slug, patched_sglang(slug, scratch), timeout_s) if finding.fix else None
    except (ReplayError, OSError) as error:
        fixed = dict(exit=None, seconds=0.0, said=[], tail=[str(error)])
    expected, words = verdict(finding, release, outcome(stock), outcome(fixed) if fixed else None)
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
        fixed = f", fixed {result['fixed']['seconds']} s" if result["fixed"] else ""
        print(f"{result['finding']}: {mark}: {result['verdict']}; stock {result['stock']['seconds']} s{fixed} "
              f"-> {path.relative_to(ROOT)}")
        for run in ("stock", "fixed")[: 2 if result["fixed"] else 1]:
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


_FUTURE = "from __future__ import annotations\n"


def bundle(slug: str) -> str:
    """The reproducer as one script: the stand-in's text where the reproducer imports it. The stand-in's
    ``from __future__`` import (its annotations name classes defined below them) moves to the script's
    top, right after the reproducer's docstring, the one place Python takes it."""
    repro = (FINDINGS_DIR / slug / "repro.py").read_text()
    standin = (FINDINGS_DIR / STANDIN).read_text().replace(_FUTURE, "")
    block = f"# --- findings/{STANDIN} of attn-harness, inlined ---\n{standin}\n# --- the reproducer ---\n"
    bundled, count = _IMPORT.subn(lambda _: block, repro, count=1)
    if not count:
        raise cli.UsageError(f"findings/{slug}/repro.py does not import {STANDIN} the way the bundler expects")
    first = ast.parse(repro).body[0]
    docstring_end = first.end_lineno if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) else 0
    lines = bundled.splitlines(keepends=True)
    return "".join(lines[:docstring_end]) + "\n" + _FUTURE + "".join(lines[docstring_end:])


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
        runs = "; ".join(f"{m['release']} {m['device']['device']}: {outcome(m['stock'])} / "
                         f"{outcome(m['fixed']) if m['fixed'] else 'no fix'}" for m in measured(slug)) or "not run"
        affected = f"{finding.affected[0]}-{finding.affected[-1]}" if len(finding.affected) > 1 else finding.affected[0]
        print(f"| {slug} | {upstream_status(finding)} | {finding.root_cause} | {affected} | {runs} |")
    return 0


BEGIN, END = "<!-- finding.yaml and measured/: python -m harness findings render -->", "<!-- end of the rendered part -->"


def _say(lines: list[str]) -> str:
    return "; ".join(dict.fromkeys(line.removeprefix("BUG: ").removeprefix("OK: ") for line in lines)) or "nothing"


def rendered(slug: str) -> str:
    """The README's status part, from finding.yaml and measured/*.json (the one place each fact lives)."""
    finding = load(slug)
    threads = "".join(f"\n  - [{t.thread}]({t.url}) ({t.state}, {t.relation}): {t.note}" for t in finding.upstream)
    paths = "".join(f"\n  - {path.releases}: {path.where}" for path in finding.code_path)
    lines = [
        BEGIN, "", "## Status", "",
        f"- **Upstream: {upstream_status(finding)}.** Threads read on {finding.read_on}:{threads or ' none found'}",
        *([f"- **What this adds:** {finding.adds}"] if finding.adds else []),
        f"- **Root cause in:** {finding.root_cause}; **affected sglang releases:** {', '.join(finding.affected)}",
        f"- **Reached in production by:** {finding.serving.config}. "
        f"**Needs speculative decoding:** {'yes' if finding.serving.needs_speculative else 'no'}: {finding.serving.why}",
        f"- **Code path:**{paths}",
        f"- **Known failures:** {', '.join(finding.known_failures) or 'none'}; "
        + (f"**harness fix:** `--apply-fix {finding.fix}`" if finding.fix else f"**no fix proposed:** {finding.no_fix}"),
        "", "## Standalone reproducer", "",
        f"[repro.py](repro.py) needs sglang, torch and the kernel library only (and [../{STANDIN}](../{STANDIN})); "
        "it exits 1 when the bug shows and 0 when it does not."
        + (f" [fix.diff](fix.diff) is the fix against sglang {KNOWN_RELEASES[-1]}." if finding.fix else ""),
        "", "```bash",
        f"python findings/{slug}/repro.py                 # on the sglang you have",
        f"python -m harness findings run {slug}     # stock" + (", then with the fix (a patched copy of sglang)"
                                                             if finding.fix else ""),
        f"python -m harness findings bundle {slug}  # repro.py and the stand-in as one script, for an issue",
        "```", "",
    ]
    runs = measured(slug)
    for run in runs:
        lines.append(f"- {run['device']['device']}, sglang {run['release']} ({', '.join(f'{k} {v}' for k, v in run['versions'].items() if k in ('torch', 'flashinfer', 'sgl_kernel'))}), "
                     f"{run['date']}: stock **{outcome(run['stock'])}** (exit {run['stock']['exit']}, {run['stock']['seconds']} s): "
                     f"{_say(run['stock']['said'])}"
                     + (f"; fixed **{outcome(run['fixed'])}** ({run['fixed']['seconds']} s): {_say(run['fixed']['said'])}"
                        if run["fixed"] else ""))
    if not runs:
        lines.append("- not run yet")
    return "\n".join([*lines, "", END])


def render(slug: str, check: bool) -> bool:
    """Write (or, with ``check``, compare) the README's rendered part; True when it was already current."""
    path = FINDINGS_DIR / slug / "README.md"
    text = path.read_text()
    head, _, rest = text.partition(BEGIN)
    tail = rest.partition(END)[2] if rest else ""
    title, _, body = head.partition("\n")
    if not rest:  # first render: right below the title
        tail, head = "\n" + body, title + "\n\n"
    new = head + rendered(slug) + tail
    if check or new == text:
        return new == text
    path.write_text(new)
    return False


def render_command(args) -> int:
    stale = [slug for slug in slugs() if not render(slug, args.check)]
    if args.check and stale:
        print(f"python -m harness findings render --check: {', '.join(stale)}: README.md differs from finding.yaml and "
              "measured/; run python -m harness findings render", file=sys.stderr)
        return 1
    for slug in ([] if args.check else stale):
        print(f"rendered findings/{slug}/README.md")
    return 0


def add_commands(commands) -> None:
    """`findings` and its verbs, on the main command line (harness/__main__.py)."""
    findings = commands.add_parser("findings", help="the sglang bugs found: list, run stock and fixed, record, bundle")
    verbs = findings.add_subparsers(dest="verb", metavar="{list,run,record,render,bundle}")
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
    render_verb = verbs.add_parser("render", help="write each README's status part from finding.yaml and measured/")
    render_verb.add_argument("--check", action="store_true", help="only compare; exit 1 where a README is stale")
    render_verb.set_defaults(func=render_command)
    packet = verbs.add_parser("bundle", help="one self-contained reproducer script -> out/findings/<slug>/")
    packet.add_argument("slug", choices=slugs())
    packet.set_defaults(func=bundle_command)

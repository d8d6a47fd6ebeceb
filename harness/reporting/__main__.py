"""`python -m harness.reporting <subcommand>`: one subcommand per report.

Exit status: 0 success; 1 the check failed (readme-matrix --check drift, digest with new
failures, crashes or cells not run, same-outcomes with a cell whose outcome differs, coverage --check
with a possible pair of axis values no cell has, rejudge with a failing cell no entry holds inside its
signature or an entry over a cell that passed); 2 unusable input (the message names the file and what to fix).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.base import cli
from harness.case.cases import CASES_DIR
from harness.ledger.known_failures import KnownFailuresError, load_known_failures
from harness.reporting.cell_schema import ReportingError, load_results
from harness.reporting.digest import compare, render_digest
from harness.reporting.junit import write_junit
from harness.reporting.merge import merge_runs, write_results
from harness.reporting.outcomes import report as outcomes_report
from harness.reporting.phases import render_phases
from harness.reporting.readme_matrix import MATRIX_PAGE, SECTIONS, page_with_matrix, readme_diff
from harness.reporting.summary import render_summary
from harness.reporting.totals import totals_line
from harness.base.results import OUTPUT_DIR, SECTION

# Defaults are text so that argparse checks them like a path the user typed: this machine's
# section of the output folder, where `python -m harness run` writes.
REPORTS = str(OUTPUT_DIR / SECTION)
RESULTS = f"{REPORTS}/results.json"


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    print(f"wrote {path}")


def cmd_merge(args: argparse.Namespace) -> int:
    merged = merge_runs(args.run_dirs)
    for warning in merged.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    write_results(merged.results, args.out_dir / "results.json")
    write_junit(merged.results["cells"], args.out_dir / "junit.xml")
    print(f"merged {len(merged.results['cells'])} cells from {len(args.run_dirs)} run(s) into {args.out_dir}/")
    if not args.no_totals:
        print(totals_line(merged.results["cells"], str(args.out_dir / "results.json")))
    return 0


def cmd_phases(args: argparse.Namespace) -> int:
    print(render_phases(merge_runs(args.run_dirs).results), end="")
    return 0


def cmd_summary(args: argparse.Namespace) -> int:
    _write(args.out, render_summary(load_results(args.results), load_known_failures(args.known_failures)))
    return 0


def cmd_junit(args: argparse.Namespace) -> int:
    write_junit(load_results(args.results)["cells"], args.out)
    print(f"wrote {args.out}")
    return 0


def cmd_heatmap(args: argparse.Namespace) -> int:
    from harness.reporting.heatmap import draw_heatmap  # matplotlib only for this subcommand

    draw_heatmap(load_results(args.results), args.out)
    print(f"wrote {args.out}")
    return 0


def cmd_readme_matrix(args: argparse.Namespace) -> int:
    current, expected = page_with_matrix(args.readme, load_results(args.results), args.section)
    if args.check:
        diff = readme_diff(current, expected, str(args.readme))
        if diff:
            print(diff, end="")
            print(
                f"{args.readme}: the {args.section} matrix differs from {args.results}; run "
                f"python -m harness.reporting readme-matrix --results {args.results} "
                f"--readme {args.readme} --section {args.section}",
                file=sys.stderr,
            )
            return 1
        return 0
    if expected != current:
        _write(args.readme, expected)
    return 0


def cmd_digest(args: argparse.Namespace) -> int:
    today, yesterday = load_results(args.today), load_results(args.yesterday)
    digest = compare(today, yesterday)
    text = render_digest(digest, today, yesterday)
    print(text, end="")
    _write(args.out, text)
    return 1 if digest.alarming else 0


def cmd_same_outcomes(args: argparse.Namespace) -> int:
    identical, text = outcomes_report(args.before, args.after, args.errors_within)
    print(text, end="")
    return 0 if identical else 1


def cmd_coverage(args: argparse.Namespace) -> int:
    from harness.case.cases import CaseFileError, load_all_cases
    from harness.search.pair_coverage import coverage, uncovered_lines
    from harness.reporting.coverage import render_coverage

    try:
        table = coverage(load_all_cases(args.cases_dir))
    except CaseFileError as err:
        raise ReportingError(str(err)) from None
    _write(args.out, render_coverage(table))
    missing = uncovered_lines(table)
    if missing:
        print(f"{len(missing)} possible pair(s) of axis values have no cell (listed in {args.out}); "
              "python -m harness.search.pair_cover proposes case variants that cover them", file=sys.stderr)
    return 1 if missing and args.check else 0


def cmd_rejudge(args: argparse.Namespace) -> int:
    from harness.case.cases import CaseFileError, load_all_cases
    from harness.base.releases import installed
    from harness.reporting.rejudge import ALARMING, rejudge, render
    from harness.reporting.runs import contracts_ran

    results = load_results(args.results)
    try:
        cases = load_all_cases(args.cases_dir)
    except CaseFileError as err:
        raise ReportingError(str(err)) from None
    release = contracts_ran(results["runs"], str(args.results))
    if release is None:
        print(f"note: {args.results} does not say which sglang ran it; judged with the entries of the "
              f"installed {installed().version}", file=sys.stderr)
    judged = rejudge(results["cells"], load_known_failures(args.known_failures), cases, release)
    print(render(judged), end="")
    return 1 if any(j.verdict in ALARMING for j in judged) else 0


def results_or_run(text: str) -> Path:
    """A results.json or a run folder (out/cells/<run>/)."""
    return cli.input_folder(text) if Path(text).is_dir() else cli.input_file(text)


IMAGE_SUFFIXES = (".png", ".svg", ".pdf")


def image_file(text: str) -> Path:
    """heatmap --out: matplotlib picks the format from the suffix, so only these are accepted."""
    path = cli.output_file(text)
    if path.suffix.lower() not in IMAGE_SUFFIXES:
        raise argparse.ArgumentTypeError(f"{text}: give a file ending in {', '.join(IMAGE_SUFFIXES)}")
    return path


def build_parser() -> argparse.ArgumentParser:
    parser = cli.Parser(prog="python -m harness.reporting", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    merge = sub.add_parser("merge", help="cell lines of run folders -> results.json + junit.xml")
    merge.add_argument("run_dirs", nargs="+", type=cli.input_folder,
                       help="out/cells/<run_id> folders; later ones win")
    merge.add_argument("--out-dir", type=cli.output_folder, default=REPORTS)
    merge.add_argument("--no-totals", action="store_true",
                       help="leave out the totals line (python -m harness run: pytest printed it already)")
    merge.set_defaults(func=cmd_merge)

    phases = sub.add_parser("phases", help="run folders -> where the cells' time went, per phase (markdown)")
    phases.add_argument("run_dirs", nargs="+", type=cli.input_folder, help="out/cells/<run_id> folders")
    phases.set_defaults(func=cmd_phases)

    summary = sub.add_parser("summary", help="results.json -> SUMMARY.md")
    summary.add_argument("--results", type=cli.input_file, default=RESULTS)
    summary.add_argument("--known-failures", type=cli.input_file, default="KNOWN_FAILURES.md")
    summary.add_argument("--out", type=cli.output_file, default=f"{REPORTS}/SUMMARY.md")
    summary.set_defaults(func=cmd_summary)

    junit = sub.add_parser("junit", help="results.json (or a recorded results.json.gz) -> junit.xml")
    junit.add_argument("--results", type=cli.input_file, default=RESULTS)
    junit.add_argument("--out", type=cli.output_file, default=f"{REPORTS}/junit.xml")
    junit.set_defaults(func=cmd_junit)

    heatmap = sub.add_parser("heatmap", help="results.json -> matrix.png")
    heatmap.add_argument("--results", type=cli.input_file, default=RESULTS)
    heatmap.add_argument("--out", type=image_file, default=f"{REPORTS}/matrix.png")
    heatmap.set_defaults(func=cmd_heatmap)

    readme = sub.add_parser("readme-matrix", help="rewrite (or --check) a section's matrix on docs/results.md")
    readme.add_argument("--results", type=cli.input_file, required=True,
                        help="the recorded reports/<section>/results.json.gz the page shows")
    readme.add_argument("--readme", type=cli.input_file, default=str(MATRIX_PAGE),
                        help="the page holding the matrix markers (default docs/results.md)")
    readme.add_argument("--section", choices=SECTIONS, required=True)
    readme.add_argument("--check", action="store_true", help="exit 1 with a diff when the page is out of date")
    readme.set_defaults(func=cmd_readme_matrix)

    digest = sub.add_parser("digest", help="compare two results.json; exit 1 on new failures, crashes or cells not run")
    digest.add_argument("--today", type=cli.input_file, default=RESULTS)
    digest.add_argument("--yesterday", type=cli.input_file, required=True)
    digest.add_argument("--out", type=cli.output_file, default=f"{REPORTS}/DIGEST.md")
    digest.set_defaults(func=cmd_digest)

    pairs = sub.add_parser("coverage", help="the case matrix -> COVERAGE.md: the pairs of axis values each "
                                            "backend x mode can have, and the cells that cover them")
    pairs.add_argument("--cases-dir", type=cli.input_folder, default=str(CASES_DIR))
    pairs.add_argument("--out", type=cli.output_file, default=f"{REPORTS}/COVERAGE.md")
    pairs.add_argument("--check", action="store_true", help="exit 1 when a possible pair has no cell")
    pairs.set_defaults(func=cmd_coverage)

    again = sub.add_parser("rejudge", help="results.json judged again against KNOWN_FAILURES.md as it is now; "
                                           "exit 1 on a failing cell no entry holds or an entry over a pass")
    again.add_argument("--results", type=cli.input_file, default=RESULTS)
    again.add_argument("--known-failures", type=cli.input_file, default="KNOWN_FAILURES.md")
    again.add_argument("--cases-dir", type=cli.input_folder, default=str(CASES_DIR))
    again.set_defaults(func=cmd_rejudge)

    same = sub.add_parser("same-outcomes", help="exit 1 unless two runs give every cell the same (status, reason)")
    same.add_argument("before", type=results_or_run, help="results.json or an out/cells/<run> folder")
    same.add_argument("after", type=results_or_run, help="results.json or an out/cells/<run> folder")
    same.add_argument("--errors-within", type=float, default=None, metavar="TOL",
                      help="also exit 1 unless every cell passed in both has the same max_abs_err within TOL")
    same.set_defaults(func=cmd_same_outcomes)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ReportingError, KnownFailuresError) as err:
        print(f"error: {err}", file=sys.stderr)
    except OSError as err:
        print(f"error: {cli.os_problem(err)}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())

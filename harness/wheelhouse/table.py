"""Print a plain, aligned text table (the build, stage-plan and install reports)."""

from __future__ import annotations


def format_table(headers: list[str], rows: list[list[object]]) -> str:
    cells = [headers] + [[str(value) for value in row] for row in rows]
    widths = [max(len(row[col]) for row in cells) for col in range(len(headers))]
    lines = ["  ".join(value.ljust(width) for value, width in zip(row, widths, strict=True)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def mib(size: int) -> str:
    return f"{size / (1 << 20):.1f} MiB"

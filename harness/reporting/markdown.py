"""Markdown table helpers shared by SUMMARY.md and the docs matrix (docs/results.md)."""

from __future__ import annotations

from typing import Sequence


def md_cell(text: str) -> str:
    """Make free text (skip reasons, error messages) safe inside a Markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return [
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(row) + " |" for row in rows),
    ]

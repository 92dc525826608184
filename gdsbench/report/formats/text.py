"""`--format text`: the report as plain text, tables drawn by rich without colour (160 columns)."""

from __future__ import annotations

from rich.table import Table as RichTable

from gdsbench.report import register, tables
from gdsbench.report.sections import Lines, Notes, Report, Section, Table


def _lines(section: Lines) -> list[str | RichTable]:
    """The title, then each group's title indented above its status line."""
    return [f"{section.title}:", *(f"  {title}\n{line}" for title, line in section.items)]


def _table(section: Table) -> list[str | RichTable]:
    """A rich table with its title."""
    return [tables.rich_table(section.title, list(section.header), [list(row) for row in section.rows])]


def _notes(section: Notes) -> list[str | RichTable]:
    """The title, then one line per problem or warning."""
    return [f"{section.title}:", *section.lines]


PARTS = {Lines: _lines, Table: _table, Notes: _notes}


def parts(section: Section) -> list[str | RichTable]:
    """A section as the lines and tables plain_text prints."""
    return PARTS[type(section)](section)  # type: ignore[operator]


@register("text")
def render(report: Report) -> str:
    """Every section in order, as plain text."""
    return tables.plain_text(*(part for section in report.sections for part in parts(section)))

"""`--format text`: the report as plain text for the terminal's width ($COLUMNS when not a terminal, 160
columns into a file or pipe): tables wrap their cells and split into blocks of columns rather than cut."""

from __future__ import annotations

from gdsbench.report import register, textout
from gdsbench.report.sections import Legend, Lines, Notes, Report, Section, Table


def _legend(section: Legend, width: int) -> list[str]:
    """The title, then `label: what it stands for` per line."""
    return [f"{section.title}:", *(f"  {label}: {text}" for label, text in section.items)]


def _lines(section: Lines, width: int) -> list[str]:
    """The title, then each group's title indented above its status line."""
    return [f"{section.title}:", *(f"  {title}\n{line}" for title, line in section.items)]


def _table(section: Table, width: int) -> list[str]:
    """The table under its title, fitted to the width, then what its columns mean (its legend)."""
    rows = [list(row) for row in section.rows]
    table = textout.text_table(section.title, list(section.header), rows, section.keys, width)
    return [table, *(f"  {name}: {meaning}" for name, meaning in section.legend)]


def _notes(section: Notes, width: int) -> list[str]:
    """The title, then one line per problem or warning (prose: the terminal wraps it, grep finds it whole)."""
    return [f"{section.title}:", *section.lines]


PARTS = {Legend: _legend, Lines: _lines, Table: _table, Notes: _notes}


def parts(section: Section, width: int) -> list[str]:
    """A section as lines of text."""
    return PARTS[type(section)](section, width)  # type: ignore[operator]


@register("text")
def render(report: Report) -> str:
    """The headline in three lines, then every section in order, as plain text, a blank line between sections."""
    from gdsbench.report import headline  # pandas: imported when a report is rendered, not when the CLI starts

    width = textout.terminal_width()
    top = "\n".join(["headline:", *(f"  {line}" for line in headline.three_lines(report))])
    return "\n\n".join([top, *("\n".join(parts(section, width)) for section in report.sections)]) + "\n"

"""`--format markdown`: the report as GitHub-flavoured markdown, for pasting into a pull request."""

from __future__ import annotations

from gdsbench.report import register, tables
from gdsbench.report.sections import Lines, Notes, Report, Section, Table


def _lines(section: Lines) -> list[str]:
    """The status lines in one code block, each under a `# group` comment."""
    body = [text for title, line in section.items for text in (f"# {title}", line)]
    return [f"### {section.title}", "", "```", *body, "```"]


def _table(section: Table) -> list[str]:
    """A pipe table under its title."""
    return [f"### {section.title}", "", *tables.md_table(list(section.header), [list(row) for row in section.rows])]


def _notes(section: Notes) -> list[str]:
    """A bullet per problem or warning."""
    return [f"### {section.title}", "", *(f"- {line}" for line in section.lines)]


BLOCKS = {Lines: _lines, Table: _table, Notes: _notes}


def block(section: Section) -> list[str]:
    """A section as markdown lines."""
    return BLOCKS[type(section)](section)  # type: ignore[operator]


@register("markdown")
def render(report: Report) -> str:
    """Every section in order, separated by blank lines."""
    return "\n\n".join("\n".join(block(section)) for section in report.sections) + "\n"

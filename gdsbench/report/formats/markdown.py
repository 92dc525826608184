"""`--format markdown`: the report as GitHub-flavoured markdown, for pasting into a pull request."""

from __future__ import annotations

from gdsbench.report import register, textout
from gdsbench.report.sections import Legend, Lines, Notes, Report, Section, Table


def _legend(section: Legend) -> list[str]:
    """A bullet per label: what it stands for."""
    return [f"### {section.title}", "", *(f"- {label}: {text}" for label, text in section.items)]


def _lines(section: Lines) -> list[str]:
    """The status lines in one code block, each under a `# group` comment."""
    body = [text for title, line in section.items for text in (f"# {title}", line)]
    return [f"### {section.title}", "", "```", *body, "```"]


def _table(section: Table) -> list[str]:
    """A pipe table under its title, then what its columns mean (its legend) as bullets."""
    table = textout.md_table(list(section.header), [list(row) for row in section.rows])
    legend = ["", *(f"- {name}: {meaning}" for name, meaning in section.legend)] if section.legend else []
    return [f"### {section.title}", "", *table, *legend]


def _notes(section: Notes) -> list[str]:
    """A bullet per problem or warning."""
    return [f"### {section.title}", "", *(f"- {line}" for line in section.lines)]


BLOCKS = {Legend: _legend, Lines: _lines, Table: _table, Notes: _notes}


def block(section: Section) -> list[str]:
    """A section as markdown lines."""
    return BLOCKS[type(section)](section)  # type: ignore[operator]


@register("markdown")
def render(report: Report) -> str:
    """Every section in order, separated by blank lines."""
    return "\n\n".join("\n".join(block(section)) for section in report.sections) + "\n"

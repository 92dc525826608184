"""Plain-text and markdown output of tables: the terminal's width honoured, cells wrapped at spaces and never
cut; a table too wide for the width is split into blocks of columns, each repeating the rows' identity (as
pandas prints a wide frame), or a row number when the identity alone is too wide."""

from __future__ import annotations

import os
import re
import sys
import textwrap

#: Width of text written to a file or a pipe with no COLUMNS set (logs and CI jobs are wide).
FILE_WIDTH = 160
NARROWEST = 40
GAP = "  "
#: Above this share of the width, the identity columns are not repeated in every block: a row number is.
KEYS_SHARE = 0.6
#: An identity cell this short is never wrapped.
SHORT = 16
#: A spreadsheet reads a cell starting with one of these as a formula (OWASP's CSV injection list) ...
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
#: ... unless it is a number (-5, +1.5e3, -12%).
_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?%?")


def terminal_width() -> int:
    """The width to render for: $COLUMNS when set, else the terminal's, else FILE_WIDTH (a file or a pipe)."""
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        return max(int(columns), NARROWEST)
    if sys.stdout.isatty():
        return max(os.get_terminal_size(sys.stdout.fileno()).columns, NARROWEST)
    return FILE_WIDTH


def text_table(title: str, header: list[str], rows: list[list[str]], keys: int, width: int) -> str:
    """The table under its title, fitted to `width`: split into blocks of columns when too wide, each
    block repeating the first `keys` columns (or a row number `#` when those alone take half the width)."""
    named = keys  # identity columns: their short cells are never wrapped
    if keys and _natural(header, rows, range(keys)) > width * KEYS_SHARE:
        header, rows, keys, named = ["#", *header], [[str(n), *row] for n, row in enumerate(rows, 1)], 1, keys + 1
    parts = []
    for number, block in enumerate(_blocks(header, rows, keys, named, width)):
        name = title if number == 0 else f"{title} (continued)"
        cells = [[row[i] for i in block] for row in rows]
        parts.append(f"{name}:\n" + _draw([header[i] for i in block], cells, width, sum(i < named for i in block)))
    return "\n".join(parts)


def _blocks(header: list[str], rows: list[list[str]], keys: int, named: int, width: int) -> list[list[int]]:
    """Column indexes of each block: the `keys` columns repeated, then as many others as fit unbroken words."""
    blocks = [list(range(min(keys, len(header))))]
    for index in range(len(blocks[0]), len(header)):
        if len(blocks[-1]) > keys and _least(header, rows, [*blocks[-1], index], named) > width:
            blocks.append([*range(keys), index])
        else:
            blocks[-1].append(index)
    return blocks


def _words(header: list[str], rows: list[list[str]], index: int) -> list[str]:
    """Every word of a column, header included."""
    return [word for text in (header[index], *(row[index] for row in rows)) for word in text.split()]


def _natural_of(header: list[str], rows: list[list[str]], index: int) -> int:
    """The width of one column drawn unwrapped: its widest cell."""
    return max(len(text) for text in (header[index], *(row[index] for row in rows)))


def _natural(header: list[str], rows: list[list[str]], columns: range | list[int]) -> int:
    """The width of these columns drawn unwrapped."""
    widths = [_natural_of(header, rows, i) for i in columns]
    return sum(widths) + len(GAP) * (len(widths) - 1)


def _least_of(header: list[str], rows: list[list[str]], index: int, keys: int) -> int:
    """The narrowest a column can be: its longest word; in an identity column a short cell counts whole
    (`run 1` stays on one line, a long engine label may wrap)."""
    words = _words(header, rows, index)
    if index < keys:
        words += [row[index] for row in rows if len(row[index]) <= SHORT]
    return max(map(len, words), default=1)


def _least(header: list[str], rows: list[list[str]], columns: list[int], keys: int) -> int:
    """The narrowest these columns can be drawn without breaking a word."""
    widths = [_least_of(header, rows, i, keys) for i in columns]
    return sum(widths) + len(GAP) * (len(widths) - 1)


def _widths(header: list[str], rows: list[list[str]], width: int, keys: int) -> list[int]:
    """Each column's width: its widest cell when the table fits, else shrunk towards its longest word,
    the widest columns first."""
    least = [_least_of(header, rows, i, keys) for i in range(len(header))]
    widths = [_natural_of(header, rows, i) for i in range(len(header))]
    room = width - len(GAP) * (len(header) - 1)
    while sum(widths) > room:
        index = max(range(len(widths)), key=lambda i: widths[i] - least[i])
        if widths[index] <= least[index]:
            index = max(range(len(widths)), key=lambda i: widths[i])  # words must break: the widest column
            if widths[index] <= 1:
                break
        widths[index] -= 1
    return widths


def _numeric(cells: list[str]) -> bool:
    """True for a column of numbers (right-aligned): every filled cell starts with a digit."""
    filled = [c for c in cells if c not in ("", "-")]
    return bool(filled) and all(c[0].isdigit() for c in filled)


def _draw(header: list[str], rows: list[list[str]], width: int, keys: int) -> str:
    """A table as lines: the header (bottom-aligned), a rule, then each row, cells wrapped within their column."""
    widths = _widths(header, rows, width, keys)
    right = [_numeric([row[i] for row in rows]) for i in range(len(header))]
    lines = _row_lines(header, widths, right, bottom=True)
    lines.append(GAP.join("-" * w for w in widths))
    for row in rows:
        lines += _row_lines(row, widths, right)
    return "\n".join(line.rstrip() for line in lines)


def _row_lines(cells: list[str], widths: list[int], right: list[bool], bottom: bool = False) -> list[str]:
    """One row as lines of text: each cell wrapped at spaces (a word broken only when wider than its column),
    top-aligned (bottom-aligned for the header)."""
    wrapped = [textwrap.wrap(text, w, break_on_hyphens=False) or [""] for text, w in zip(cells, widths)]
    height = max(map(len, wrapped))
    if bottom:
        wrapped = [[""] * (height - len(part)) + part for part in wrapped]
    return [
        GAP.join(
            (part[n] if n < len(part) else "").rjust(w) if r else (part[n] if n < len(part) else "").ljust(w)
            for part, w, r in zip(wrapped, widths, right)
        )
        for n in range(height)
    ]


def formula_safe(text: str, mark: str = "'") -> str:
    """A cell a spreadsheet would evaluate (it starts with = + - @, a tab or a carriage return and is not a number,
    nor a lone '-') behind `mark`, so it reads as text; every other cell as it is."""
    if text.startswith(FORMULA_STARTS) and text != "-" and not _NUMBER.fullmatch(text):
        return mark + text
    return text


def md_cell(text: str) -> str:
    """A markdown table cell: on one line, pipes escaped, a spreadsheet formula behind a backslash (`formula_safe`:
    markdown draws `\\=` as `=`, a spreadsheet given the text reads it as text)."""
    return formula_safe(" ".join(text.splitlines()), "\\").replace("|", "\\|")


def md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A markdown pipe table (each cell an `md_cell`)."""
    lines = ["| " + " | ".join(map(md_cell, header)) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return lines + ["| " + " | ".join(map(md_cell, row)) + " |" for row in rows]

"""Every table of figures in ``bench/README.md`` and the README is written by the script that
measures it, between ``<!-- name -->`` markers the script rewrites (``bench/_common.py``:
``write_section``, ``write_text``): a re-run replaces the section whole, caveats included.
These tests fail when a section has no script, when its heading or its table's columns are
not what the script writes (a hand edit), or when a table of figures sits outside the markers."""

from __future__ import annotations

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
READMES = [BENCH / "README.md", ROOT / "README.md"]
SECTION = re.compile(r"<!-- ([\w-]+) -->\n(.*?)\n<!-- /\1 -->", re.S)
WRITES = re.compile(r"write_(?:section|text)\(\s*\"([\w-]+)\"")
# A markdown table row with a measured figure in it: a decimal number.
FIGURE_ROW = re.compile(r"^\|.*\|\s*-?\d+\.\d+\s*\|", re.M)


def _scripts() -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(BENCH.glob("*.py"))}


def _sections() -> list[tuple[str, str, str]]:
    """(README file name, section name, body) of every marked section."""
    found = []
    for readme in READMES:
        for name, body in SECTION.findall(readme.read_text()):
            found.append((readme.relative_to(ROOT).as_posix(), name, body))
    return found


def _writer(name: str) -> tuple[str, str]:
    writers = [(f, src) for f, src in _scripts().items() if name in WRITES.findall(src)]
    names = [f for f, _ in writers] or "no script"
    assert len(writers) == 1, f"section {name!r}: written by {names}"
    return writers[0]


def _literal_parts(line: str) -> list[str]:
    """The pieces of a written line a script's source must hold as they are: the text between
    the figures, dates, names and paths a run fills in."""
    return [p for p in re.split(r"[\d.,%]+|`[^`]*`|\([^)]*\)", line) if len(p.strip()) > 3]


def test_every_marked_section_has_one_script_that_writes_it():
    sections = _sections()
    assert len(sections) >= 12
    for readme, name, _ in sections:
        script, _ = _writer(name)
        assert (BENCH / script).exists(), (readme, name)


@pytest.mark.parametrize("readme, name, body", _sections(), ids=lambda v: str(v)[:30])
def test_a_sections_heading_and_columns_are_its_scripts(readme, name, body):
    """The heading line (### ...) and each column of the table: as the script writes them."""
    script, source = _writer(name)
    flat = " ".join(source.split())
    heading = next((line for line in body.splitlines() if line.startswith("#")), None)
    if heading is not None:
        for piece in _literal_parts(heading.lstrip("# ")):
            assert piece.strip() in flat, f"{readme} {name}: heading {piece!r} not in {script}"
    rows = [line for line in body.splitlines() if line.startswith("|")]
    if not rows:
        return
    assert re.search(r"^Measured \d{4}-\d{2}-\d{2} on .+\.$", body, re.M), (
        f"{readme} {name}: a table without the line write_section puts above it"
    )
    # A column is a literal of the script, or a template's (f"{contender} ms") filled with one.
    templates = re.findall(r'f"\{[^{}"]*\} ([^"{}]+)"', source)
    for column in (c.strip() for c in rows[0].strip("|").split("|")):
        filled = any(
            column.endswith(f" {t}") and f'"{column[: -len(t) - 1]}"' in source for t in templates
        )
        assert f'"{column}"' in source or filled, (
            f"{readme} {name}: column {column!r} is not one {script} writes"
        )


@pytest.mark.parametrize("readme", READMES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_table_of_figures_outside_the_markers(readme):
    text = SECTION.sub("", readme.read_text())
    stray = FIGURE_ROW.findall(text)
    assert not stray, f"{readme.name}: figures no script writes: {stray[:3]}"

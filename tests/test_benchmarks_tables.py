"""The one consistency test of the documents' tables: every table between markers in BENCHMARKS.md and docs/lab/ is
what benchmarks/tables.py renders from its committed record (the records themselves are checked against today's code by
the tests named in benchmarks/tables.py)."""

from __future__ import annotations

import re

from pathlib import Path

import pytest

from benchmarks import tables

ROOT = Path(__file__).resolve().parents[1]


def test_every_generated_table_is_its_record():
    assert tables.run(check=True) == []


def test_a_stale_an_unknown_or_an_unclosed_table_is_named(tmp_path):
    name = next(iter(tables.TABLES))
    doc = tmp_path / "doc.md"
    doc.write_text(f"# x\n\n<!-- {name} -->\n| stale |\n<!-- /{name} -->\n\n<!-- no-such-table -->\n| a |\n"
                   "<!-- /no-such-table -->\n\n<!-- expected-error -->\n| never closed |\n")
    problems = tables.run(check=True, paths=[doc])
    assert any("stale table(s) " + name in p for p in problems)
    assert any("no-such-table" in p and "names no table" in p for p in problems)
    assert any("<!-- expected-error --> is never closed" in p for p in problems)
    # check mode writes nothing, nor does the write mode while a marker is wrong; once mended, it puts the table in
    assert "| stale |" in doc.read_text()
    assert tables.run(check=False, paths=[doc]) and "| stale |" in doc.read_text()
    doc.write_text(f"# x\n\n<!-- {name} -->\n| stale |\n<!-- /{name} -->\n")
    assert tables.run(check=False, paths=[doc]) == []
    assert "| stale |" not in doc.read_text() and tables.TABLES[name]().strip() in doc.read_text()
    assert tables.run(check=True, paths=[doc]) == []


def test_benchmarks_md_is_a_short_document_of_claims():
    text = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 400
    # the suite's time, measured, under the 8 minutes of issue 44
    suite = re.search(r"## The test suite\n\n.*? in (\d+) s on", text, re.S)
    assert suite and int(suite.group(1)) <= 480, "BENCHMARKS.md states the test suite's measured time"
    # every lab note is indexed, and every note BENCHMARKS.md links to exists
    lab = ROOT / "docs" / "lab"
    index = (lab / "README.md").read_text(encoding="utf-8")
    notes = sorted(p.name for p in lab.glob("20*.md"))
    assert notes and all(f"]({n})" in index for n in notes)
    for link in {x.split(")")[0] for x in text.split("](docs/lab/")[1:]}:
        assert (lab / link).is_file(), link


@pytest.mark.parametrize("name", sorted(tables.TABLES))
def test_each_table_renders(name):
    body = tables.TABLES[name]()
    lines = body.splitlines()
    assert lines[0].startswith("| ") and set(lines[1]) <= set("|-") and len(lines) > 2


def test_every_quoted_benchmarks_section_still_resolves():
    """Code and docs cite the notebook's sections as BENCHMARKS.md, "name": each name is in BENCHMARKS.md, a claim's
    heading or a row of its table of where the notebook went (docs/lab/)."""
    import re

    bench = " ".join((ROOT / "BENCHMARKS.md").read_text(encoding="utf-8").split())
    cite = re.compile(r'BENCHMARKS(?:\.md)?,?\s+(?:section\s+)?"([^"]+)"')
    files = [*ROOT.glob("decodecalc/**/*.py"), *ROOT.glob("docs/*.md"), ROOT / "README.md"]
    missing = []
    for path in files:
        text = re.sub(r"\n\s*(?:#:?|\*)?\s*", " ", path.read_text(encoding="utf-8"))  # comments joined across lines
        missing += [f"{path.relative_to(ROOT)}: {m.group(1)}" for m in cite.finditer(text) if m.group(1) not in bench]
    assert missing == []

"""Issue 48: no README or docs number lacks a committed run. The rule is bench/doc_numbers.py's (read its docstring):

- a *figure* is a number with a unit of measure (ms, s, min, tok/s, MB/MiB/GB/GiB, GB/s, %, dB, x), an RTF/WER/CER
  value, a count "N of M", or a bare number under a table column that names its unit; it is a setting, not a
  measurement, when the words before it bound or set it (``at most 300 ms``, ``default 1000 ms``, ``every 100 ms``),
  the words after it make it an input or a limit (``200 ms of silence``, ``30 s limit``), its sentence is about
  configuration and reports nothing, its column's header names a default or a bound, or it is said to be an
  estimate; the rest are measured, except in a table, list or paragraph under a line ``<!-- not measured: why -->``;
- a measured figure needs a committed record named in its paragraph, bullet, table row or code block, or in the
  paragraph introducing its list or table, or in its section's lead paragraph: a path under bench/results/, a test
  file, or a benchmark whose bench/results/latest/NAME.json is committed; every path named must exist.

Which are checked by value and which by reference only: a figure is checked *by value* when a named record is text
(.json .md .txt .log .tsv .csv, or a directory of them) and holds it — written as the doc writes it, or as a number
that rounds to it at the doc's precision (times also as s <-> ms, % also as a fraction, sizes also in bytes). A
figure with one significant digit, or a whole number under 100 (``4 s``, ``17 min``), is found only as written (as a
number it is in any record by chance); whatever is not found stands *by reference only*: its paragraph names the run,
the listing says so, and a reviewer reads the figure against that record. The README's generated benchmark table is
test_bench_claims.py's (it is rendered from bench/results/latest's JSON); it is left out here.

The numbers checked are listed in a committed file, docs/numbers.md (``python -m bench.doc_numbers`` rewrites it),
rather than printed by the test: a print is seen only by whoever runs pytest with ``-rP``, while the listing shows
every figure, its record and how it was checked in the diff of the change that adds or moves a number, where the
reviewer looks. It holds no line numbers, so an edit elsewhere in a doc does not churn it.

Docs not yet covered are named in bench/doc_numbers.py ``NOT_YET`` (and in the listing's header)."""

from __future__ import annotations

from pathlib import Path

from bench import doc_numbers
from bench.doc_numbers import COVERED, LISTING, NOT_YET, ROOT, Block, blocks, check, figures, records, render


def _figures(text: str) -> list[str]:
    return [fig for b in blocks("x.md", text) for _, fig in figures(b)]


def test_every_doc_is_covered_or_named_as_not_yet():
    docs = sorted(["README.md", *(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md") if p != LISTING)])
    assert sorted(COVERED + NOT_YET) == docs
    assert not set(COVERED) & set(NOT_YET)


def test_every_measured_figure_stands_on_a_committed_record():
    problems = [f"{f.doc}:{f.line}: {f.text}: {f.problem}" for doc in COVERED for f in check(doc) if f.problem]
    assert not problems, (
        "measured figures without a committed record: name the run (a bench/results/ path, a test, a benchmark with"
        " committed results) in the figure's paragraph, or remove the figure:\n" + "\n".join(problems)
    )


def test_the_listing_of_checked_numbers_is_what_the_docs_say():
    assert LISTING.read_text() == render(), "docs/numbers.md is out of date: run `python -m bench.doc_numbers`"


def test_every_not_measured_marker_covers_a_figure():
    idle = {doc: lines for doc in COVERED if (lines := doc_numbers.idle_markers(doc))}
    assert not idle, f"markers `<!-- not measured: ... -->` above no figure (lines): {idle}"


def test_a_figure_is_a_measurement_unless_bounded_or_set():
    assert _figures("The final came 799 ms after speech end.") == ["799 ms"]
    assert _figures("It waits at most 300 ms, every 100 ms, ≤ 400 ms, for 30 minutes, with 1, 4 and 8 GiB.") == []
    assert _figures("Set `moss_sts.turn_commit_ms` (default 250 ms); the hangover is 400 ms by default.") == []
    assert _figures("The default hangover gave a median of 412 ms on 2026-11-29.") == ["412 ms"]
    assert _figures("Reload copies at the H2D bound (54.6 GB/s measured); budget (5 % or 1 %).") == ["54.6 GB/s"]
    assert _figures("15 of 20 picked right, RTF 0.206, WER 2.1%, 19 min\n22 s in all.") == [
        "15 of 20",
        "RTF 0.206",
        "WER 2.1%",
        "19 min 22 s",
    ]
    assert _figures("Set `x` to `300 ms`; see [it](#a-2026-11-29-5-ms).") == []  # inline code, link targets
    assert _figures('It feeds 200 ms of silence in 40 ms frames (a 30 s limit); "retry in 0.4 s", it says.') == []
    assert _figures("The context costs ~0.3 GB (an estimate). It took 0.3 GB.") == ["0.3 GB"]
    table = "| run | CER | wall (s) | 24 GB cards |\n|---|---|---|---|\n| a | **0.167** | 2.5 | 3 |\n"
    assert _figures(table) == ["CER 0.167", "2.5 s"]  # a column's unit; "24 GB cards" is a label
    assert _figures("| key | default |\n|---|---|\n| `x_ms` | 300 ms |\n") == []  # a table of defaults


def test_a_paragraph_names_its_records_and_missing_paths_are_found():
    found, missing = records(
        "Run: `bench/results/soak/`, `tests/project/test_bench_claims.py`, `python -m bench.run asr`,"
        " `bench/results/gpu/<card>/` (a placeholder), `bench/results/nowhere/`, `bench/readme.py`."
    )
    assert found == [
        "bench/results/soak/",
        "tests/project/test_bench_claims.py",
        "bench/results/latest/asr.json",
    ]
    assert missing == ["bench/results/nowhere/"]


def test_a_figure_is_checked_against_its_records_value(tmp_path, monkeypatch):
    doc = tmp_path / "d.md"
    doc.write_text(
        "# Runs\n\nSoak (`bench/results/soak/`): brain RSS grew 4.8 % and 9.9 %.\n\n"
        "# Another section\n\n- a bullet: 12.5 ms with no record\n\nA path that is not there: 3.25 s (`bench/results/nowhere/`).\n"
    )
    monkeypatch.setattr(doc_numbers, "ROOT", tmp_path)
    (tmp_path / "bench").symlink_to(ROOT / "bench")
    found = {f.text: f for f in check("d.md")}
    assert found["4.8 %"].by_value == "bench/results/soak/converse.json" and found["4.8 %"].problem is None
    assert found["9.9 %"].by_value is None and found["9.9 %"].problem is None  # by reference only
    assert found["12.5 ms"].problem == "names no committed record"
    assert "bench/results/nowhere/" in found["3.25 s"].problem


def test_blocks_carry_their_section_lead_and_list_intro():
    text = "# S\n\nLead `bench/results/soak/`.\n\nIntro:\n\n- item one\n  continued\n- item two\n\n| a |\n|---|\n"
    got = blocks("x.md", text)
    item = next(b for b in got if b.text.startswith("- item one"))
    assert isinstance(item, Block) and item.text == "- item one\n  continued"
    assert item.context == ["Lead `bench/results/soak/`.", "Intro:"]
    assert Path(ROOT / "bench/results/soak").is_dir()


def test_a_marker_covers_the_table_below_it_and_says_why():
    text = "# S\n\n<!-- not measured: objectives -->\n| slo | 99% |\n| b | 95% |\n\n| c | 98% |\n"
    got = [(b.text, b.marked) for b in blocks("x.md", text)]
    assert got == [("| slo | 99% |", "objectives"), ("| b | 95% |", "objectives"), ("| c | 98% |", None)]

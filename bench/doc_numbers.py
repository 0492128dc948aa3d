"""Every measured figure in the README and docs, and the committed record behind it (issue 48).

``python -m bench.doc_numbers`` rewrites docs/numbers.md, the list of every figure found and what stands behind it;
tests/project/test_doc_numbers.py fails when a figure has no record, a named record does not exist, or the list is
not what the docs say now.

The rule, in three steps:

1. **A figure** is a number with a unit of measure (ms, s, min, µs, tok/s, MB/MiB/GB/GiB, GB/s, %, dB, x or × for
   ratios), an RTF/WER/CER value (``RTF 0.206``), a count "N of M" (``7 of 15``), or a bare number in a table column
   whose header names its unit (``| CER |`` over ``| 0.167 |``), in prose, tables or code blocks; not inside inline
   code (settings, names, commands), quoted strings (messages, utterances), link targets or a table's header row.
2. **It is a setting, not a measurement,** when
   - the words just before it bound or set it (``at most 300 ms``, ``default 1000 ms``, ``every 100 ms``, ``≤ 400
     ms``, ``a floor of 2 s``: ``BOUND``), unless it is said to be measured right after (``(54.6 GB/s measured)``);
   - the words just after it make it the size of an input or a limit (``200 ms of silence``, ``40 ms frames``, ``a
     30 s limit``, ``3 s by default``: ``INPUT``);
   - its sentence is about configuration (``default``, a config key such as ``moss_sts.turn_commit_ms`` or
     ``health_probe_interval_seconds``, a code constant such as ``PAD_BEFORE``: ``SETTING``) and reports nothing
     (no ``measured``, ``median``, ``p95``, a date, ...: ``MEASURE``), or its table column's header names a default,
     a bound or a goal (``HEADER_SETTING``);
   - its sentence, its column's header or the paragraph introducing its list or table says it is an estimate
     (``ESTIMATE``).
   Where the rule still reads a table, list or paragraph of settings as measured (a test's scenario, a page's frame
   sizes), a line ``<!-- not measured: why -->`` above it says so (``MARKER``, up to the next blank line); the
   listing shows why, and a marker over no figure fails the test.
3. **Every other figure needs a record**: the paragraph, bullet, table row or code block it sits in — or the
   paragraph that introduces its list or table, or its section's lead paragraph — names one that exists in the
   repository: a path under ``bench/results/`` (a file or a directory, not ``bench/results/`` itself; a link
   ``../bench/results/...`` counts), a test file ``tests/....py``, or a benchmark (``bench/NAME.py``, ``python -m
   bench.run NAME``, ``make bench NAME``, ``python -m bench.NAME``) whose committed result
   ``bench/results/latest/NAME.json`` exists. A named path that does not exist is an error (a placeholder such as
   ``bench/results/gpu/<card>/`` names nothing).

Checked by value, where it can be: when a named record is text (.json .md .txt .log .tsv .csv; a directory: every
such file in it), the figure is looked for in it, the record named nearest the figure first: as written (also
``7/15`` for ``7 of 15``, ``18:27`` for ``18 min 27 s``), or as a number that rounds to the figure at its precision
(times also in s <-> ms, % also as a fraction, sizes also in bytes). A figure with one significant digit or a whole
number under 100 (``4 %``, ``17 min``) is found only as written: as a number it is in any record by chance. The
listing says which figures were found by value and which stand on their reference only (a test, code, a record
that writes the figure otherwise, or a figure derived from the record, such as a difference or a ratio).

Not caught: counts written ``N/M``, and a number with no unit outside a table column that names one (a
probability, a load average).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LISTING = ROOT / "docs" / "numbers.md"
# The files the rule covers (the listing is itself a doc: it is never scanned).
COVERED: list[str] = [
    "README.md",
    "docs/architecture.md",
    "docs/configuration.md",
    "docs/observability.md",
    "docs/security.md",
    "docs/router.md",
    "docs/gateway.md",
    "docs/scale.md",
    "docs/scheduling.md",
    "docs/leases.md",
    "docs/deploy.md",
    "docs/tts.md",
    "docs/asr.md",
    "docs/conversation.md",
]
# The docs the rule does not cover yet (issue 48's last item, doc by doc).
NOT_YET: list[str] = []

_NUM = r"\d+(?:,\d{3})*(?:\.\d+)?"
_UNIT = r"min(?:utes)?(?:\s+\d+\s?s)?|ms|µs|s|seconds?|tok/s|tokens/s|GB/s|MB/s|MiB|MB|GiB|GB|KiB|KB|kB|%|x|×|dB"
FIGURE = re.compile(
    rf"(?<![\w.,/-])(?P<a>{_NUM})(?:\s?(?:–|-|to)\s?(?P<b>{_NUM}))?\s?(?P<unit>{_UNIT})(?![\w/])"
    rf"|\b(?P<metric>RTF|WER|CER)\s(?:of\s|at\s|=\s?)?(?P<m>{_NUM})%?"
    rf"|(?<![\w.,/-])(?P<k>\d+) of (?P<n>\d+)\b"
)
# Words just before a figure that make it a bound or a setting, not a result.
BOUND = re.compile(
    r"(?:\b(?:at most|at least|up to|than|minus|under|below|above|over|every|after|per|for|with|defaults?(?: to)?"
    r"|limit|cap|capped at|budget|timeout|goal|target|threshold|max|min|maximum|minimum|between"
    r"|bound(?: is| of)?|floor(?: of)?|interval(?: of)?|pauses? of|hangover|period"
    r"|sets?|set to|use|sends?|longest|shortest)|≤|≥|<|>|=)"
    r"(?:\W+(?:the|a|an))?(?:\W*\d+(?:\.\d+)?\s*(?:%|[a-zA-Z]{1,3})?\s*(?:,|/|and|or))*\W*$",  # "with 1, 4 and 8 GiB": a list, all bounds
    re.IGNORECASE,
)
# Words just after a figure that make it the size of an input or a limit: "200 ms of silence", "40 ms frames",
# "30 s limit".
INPUT = re.compile(
    r"\s*(?:of\s+(?:the\s+[\w']+\s+)?(?:silence|audio|speech|tensors)\b"
    r"|(?:frames?|chunks?|pieces?|messages?|windows?|steps?|pauses?|gaps?|clips?|intervals?)\b"
    r"|(?:limit|timeout|deadline|budget|cap|by default)\b)"
)
# A sentence about configuration ...
SETTING = re.compile(
    r"\bdefaults?\b|\bconfig\b|configurable|\bsettings?\b|`[a-z_]+\.[a-z_.]+`|`[a-z_]+_(?:ms|seconds|mb|gb|bytes)`"
    r"|`[A-Z][A-Z0-9_]{2,}`|objectives?|thresholds?|buckets?"  # a code constant: `PAD_BEFORE`
    r"|\bburns?\b|\bvirtual\b"
)
# A table column of bounds or goals holds settings too ("| gate | bound |").
HEADER_SETTING = re.compile(SETTING.pattern + r"|\bbounds?\b|\blimits?\b|\bgoals?\b|\btargets?\b")
# An estimate is no measurement either: said in its sentence, its table's header or the paragraph introducing it.
ESTIMATE = re.compile(
    r"\bestimates\b|\ban estimate\b|\bestimated\b|\bunmeasured\b|\bnot measured\b|\bASSUMED\b|\bDERIVED\b"
)
# ... reports nothing unless it says so.
MEASURE = re.compile(
    r"\bmeasured\b|\bmedian\b|\bp50\b|\bp9[59]\b|\bmean\b|\btook\b|\bran\b|\bcame\b|\bgave\b|\bscored\b"
    r"|\bresults?\b|\bWER\b|\bCER\b|\bRTF\b|20\d\d-\d\d-\d\d",
)
# A line of its own before a paragraph, table or list whose figures the rule reads as measured and are not (a
# table of objectives, a test's scenario): it covers the blocks up to the next blank line, and says why.
MARKER = re.compile(r"^\s*<!-- not measured: (?P<why>.+?) -->\s*$")

TEXT_RECORDS = {".json", ".md", ".txt", ".log", ".tsv", ".csv"}
_PATH = re.compile(r"(?<![\w/.])(?:\.\./)*(bench/results/[\w./<>-]*|tests/[\w/]+\.py)")  # a link from docs/: ../
_BENCH = re.compile(
    r"bench/(?P<a>\w+)\.py|python -m bench\.run (?P<b>\w+)|make bench (?P<c>\w+)|python -m bench\.(?P<d>\w+)"
)


@dataclass
class Block:
    """A paragraph, list item, table row or code block, with the text that introduces it."""

    doc: str
    line: int
    text: str
    section: str
    context: list[str] = field(default_factory=list)  # the section's lead paragraph, the list's or table's intro
    marked: str | None = None  # why its figures are not measurements (a MARKER above it)
    marker_line: int = 0
    kind: str = "para"  # para, item, row or code
    intro: str = ""  # the paragraph introducing a list item, table row or code block
    header: str = ""  # a table row's table header (a column "default" makes every row a setting)


@dataclass
class Figure:
    doc: str
    line: int
    section: str
    text: str
    records: list[str]
    by_value: str | None  # the record that holds the value; None: by reference only
    problem: str | None = None
    marked: str | None = None

    def figure_text(self) -> str:
        return self.text.replace("|", "/")


def blocks(doc: str, text: str) -> list[Block]:
    """The document's blocks: paragraphs, list items (with their continuation lines), table rows, code blocks."""
    out: list[Block] = []
    section, lead, intro, marked, marker_line, header = "", None, None, None, 0, ""
    cur: list[str] = []
    start, kind = 0, None

    def flush() -> None:
        nonlocal cur, lead, intro, header
        if cur:
            body = "\n".join(cur)
            # a paragraph stands on its own and its section's lead; a list item, table row or code block also on the
            # paragraph that introduces it
            b = Block(
                doc,
                start,
                body,
                section,
                [c for c in (lead, intro if kind != "para" else None) if c],
                marked,
                marker_line,
            )
            b.kind = kind or "para"
            b.intro = intro if kind != "para" and intro else ""
            if kind == "row":
                header = header or body
                b.header = header
            out.append(b)
            if kind == "para":
                lead = lead or body
                intro = body
        cur = []

    lines = text.splitlines()
    fence = False
    for i, line in enumerate(lines, 1):
        stripped = line.strip()
        if stripped.startswith("```"):
            if fence:
                cur.append(line)
                flush()
                fence, kind = False, None
                continue
            flush()
            fence, kind, start = True, "code", i
            cur.append(line)
            continue
        if fence:
            cur.append(line)
            continue
        if MARKER.match(line):
            flush()
            marked, marker_line, kind = MARKER.match(line)["why"], i, None
            continue
        if not stripped:
            flush()
            kind, marked = None, None
            continue
        if stripped.startswith("#"):
            flush()
            section, lead, intro, kind, marked = stripped.lstrip("#").strip(), None, None, None, None
            continue
        item = re.match(r"(?:[-*+]|\d+\.)\s", stripped) and not line.startswith("   ") or stripped.startswith("|")
        if item or kind is None or (kind == "row"):
            flush()
            if kind != "row":
                header = ""
            kind, start = ("row" if stripped.startswith("|") else "item" if item else "para"), i
        cur.append(line)
    flush()
    return out


def _plain(text: str) -> str:
    """The text with inline code, link targets and HTML comments blanked (same length: offsets stay)."""
    text = re.sub(r"<!--.*?-->", lambda m: " " * len(m.group()), text, flags=re.S)
    text = re.sub(r"`[^`\n]*`", lambda m: " " * len(m.group()), text)
    text = re.sub(r'"[^"]{0,300}"', lambda m: re.sub(r"[^\n]", " ", m.group()), text)  # a quoted message or utterance
    return re.sub(r"\]\([^)\s]*\)", lambda m: "]" + " " * (len(m.group()) - 1), text)


# Where a sentence ends: ". " (not after e.g., i.e., vs., etc.), "; ", ": " before a capital, a blank line, a cell.
_SENTENCE_END = re.compile(r"(?<!\be\.g)(?<!\bi\.e)(?<!\bvs)(?<!\betc)[.!?]\s+|;\s+|:\s+(?=[A-Z*`(\[])|\n\s*\n|\|")


def _sentence(text: str, at: int) -> str:
    starts = [m.end() for m in _SENTENCE_END.finditer(text[:at])]
    ends = [m.start() for m in _SENTENCE_END.finditer(text[at:])]
    return text[(starts[-1] if starts else 0) : at + (ends[0] if ends else len(text) - at)]


def figures(block: Block) -> list[tuple[int, str]]:
    """The measured figures of a block: (offset, text)."""
    if block.kind == "row" and block.text == block.header:  # a table's header row: labels
        return []
    code = block.text.lstrip().startswith("```")  # a code block: its quoted strings are a config's values
    plain = re.sub(r'"[^"\n]*"', lambda m: " " * len(m.group()), block.text) if code else _plain(block.text)
    out = []
    for m in FIGURE.finditer(plain):
        before = re.split(r"[;:)]|,(?! ?\d)", " ".join(plain[max(0, m.start() - 40) : m.start()].split()))[-1]
        said_measured = re.match(r"\W{0,2}measured\b", plain[m.end() :])
        if BOUND.search(before) and not said_measured:  # "bound (54.6 GB/s measured)" is a result
            continue
        if INPUT.match(plain[m.end() :]):  # "200 ms of silence", "20 ms frames": what was fed, not what came out
            continue
        sentence = _sentence(plain, m.start())
        raw = _raw_sentence(block.text, m.start())
        head = _column_header(block, m.start())
        if (SETTING.search(raw) or HEADER_SETTING.search(head)) and not MEASURE.search(sentence):
            continue
        if ESTIMATE.search(raw) or ESTIMATE.search(head) or ESTIMATE.search(block.intro):
            continue
        out.append((m.start(), " ".join(m.group().split())))
    return out + _cells(block)


# A table column whose header names a unit gives it to the bare numbers under it ("| CER |" over "| 0.167 |").
_COLUMN_UNIT = re.compile(r"\b(?P<metric>CER|WER|RTF)\b|\b(?P<unit>ms|MB|MiB|GB|GiB)\b|(?P<pct>%)|\((?P<s>s)\)")


def _cells(block: Block) -> list[tuple[int, str]]:
    """The figures of a table row whose column header names their unit, unless the table holds settings."""
    if block.kind != "row" or not block.header or block.text == block.header or re.fullmatch(r"[|:\s-]+", block.text):
        return []
    if ESTIMATE.search(block.intro):
        return []
    out, at = [], 0
    heads, cells = block.header.strip().strip("|").split("|"), block.text.strip().strip("|").split("|")
    for head, cell in zip(heads, cells, strict=False):  # a row may have fewer cells than its header
        at = block.text.index(cell, at) if cell else at
        value = cell.strip().strip("*")
        if HEADER_SETTING.search(head) or ESTIMATE.search(head):
            continue
        unit = _COLUMN_UNIT.search(head)
        unit = None if unit and re.search(r"\d\s*" + re.escape(unit.group()), head) else unit  # "24 GB cards": a label
        if unit and re.fullmatch(r"-?\d[\d,]*(?:\.\d+)?", value):
            metric = unit["metric"]
            out.append(
                (
                    at + cell.index(value),
                    f"{metric} {value}" if metric else f"{value} {unit['unit'] or unit['pct'] or 's'}",
                )
            )
    return out


def _column_header(block: Block, at: int) -> str:
    """The header cell over the table cell at ``at`` ("" outside a table)."""
    if block.kind != "row" or not block.header:
        return ""
    heads = block.header.strip().strip("|").split("|")
    column = block.text[:at].count("|") - (1 if block.text.lstrip().startswith("|") else 0)
    return heads[column] if 0 <= column < len(heads) else ""


def _raw_sentence(text: str, at: int) -> str:
    return _sentence(re.sub(r"<!--.*?-->", lambda m: " " * len(m.group()), text, flags=re.S), at)


def records(text: str) -> tuple[list[str], list[str]]:
    """The records a text names (repository-relative): those that exist, and the paths named that do not. A path
    with a placeholder (``bench/results/gpu/<card>/``) names no record; a benchmark counts when its committed result
    exists."""
    found, missing = [], []
    for p in _PATH.findall(text):
        p = p.rstrip(".")
        if "<" not in p and p.rstrip("/") != "bench/results":  # the whole directory names no run
            (found if (ROOT / p).exists() else missing).append(p)
    for m in _BENCH.finditer(text):
        result = f"bench/results/latest/{next(g for g in m.groups() if g)}.json"
        if (ROOT / result).exists():
            found.append(result)
    return list(dict.fromkeys(found)), list(dict.fromkeys(missing))


def _files(record: str) -> list[Path]:
    """The text files of a record (a directory: every text file under it)."""
    p = ROOT / record
    files = sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p]
    return [f for f in files if f.suffix in TEXT_RECORDS and f != LISTING]


@cache
def _numbers(path: Path) -> tuple[str, list[float]]:
    """A text file's text (whitespace folded) and every number in it."""
    text = " ".join(path.read_text(errors="replace").split())
    return text, [float(n.replace(",", "")) for n in re.findall(r"\d+(?:,\d{3})*(?:\.\d+)?(?:e-?\d+)?", text)]


# How a record may write a figure's unit: the figure's value times each scale (ms as s, % as a fraction, bytes).
SCALES: dict[str, tuple[float, ...]] = {
    "µs": (1.0, 1e6),
    "ms": (1.0, 1000.0),
    "s": (1.0, 0.001, 1 / 60),
    "min": (1.0, 1 / 60),
    "%": (1.0, 100.0),
    "MB": (1.0, 1e-6),
    "GB": (1.0, 1e-9),
    "GB/s": (1.0, 1e-9),
    "MB/s": (1.0, 1e-6),
    "KiB": (1.0, 2**-10),
    "MiB": (1.0, 2**-20),
    "GiB": (1.0, 2**-30),
}


def _values(fig: str) -> list[tuple[float, int, tuple[float, ...]]]:
    """(value, decimals, scales) of each number a figure states that can be checked by number: one with decimals
    and two significant digits or more, or a whole number of three digits or more (``17 min`` or ``96 %`` would be
    in any record by chance: those are found only as written). Minutes and seconds count in seconds."""
    m = FIGURE.fullmatch(fig)
    if not m or m.group("k"):
        return []
    unit = m.group("unit").split()[0] if m.group("unit") else ""
    unit = {"second": "s", "seconds": "s", "minutes": "min", "×": "x", "tokens/s": "tok/s"}.get(unit, unit)
    mins = re.fullmatch(r"(\d+) min(?:utes)? (\d+) s", fig)
    if mins:
        return [(int(mins[1]) * 60 + int(mins[2]), 0, (1.0,))]
    out = []
    for g in ("a", "b", "m"):
        s = m.group(g)
        if s:
            s = s.replace(",", "")
            whole, _, decimals = s.partition(".")
            if len(s.replace(".", "").lstrip("0")) < 2 or (not decimals and len(whole) < 3):
                return []
            out.append((float(s), len(decimals), SCALES.get(unit, (1.0,))))
    return out


def _written(fig: str) -> list[str]:
    """How a record may write the figure as text: as the doc does, ``7/15`` for ``7 of 15``, ``18:27`` and
    ``0:18:27`` for ``18 min 27 s``."""
    out = [fig, fig.replace("–", "-")]
    k = re.fullmatch(r"(\d+) of (\d+)", fig)
    if k:
        out.append(f"{k[1]}/{k[2]}")
    mins = re.fullmatch(r"(\d+) min(?:utes)? (\d+) s", fig)
    if mins:
        out += [f" {mins[1]}:{int(mins[2]):02d}", f"({int(mins[1]) // 60}:{int(mins[1]) % 60:02d}:{int(mins[2]):02d})"]
    return out


def _holds(record: str, fig: str) -> str | None:
    """The text file of ``record`` that holds ``fig``'s value, if one does."""
    values, written = _values(fig), _written(fig)
    for f in _files(record):
        text, nums = _numbers(f)
        if any(w in text for w in written) or (
            values
            and all(any(abs(n * k - v) <= 0.5 * 10**-d + 1e-9 for n in nums for k in scales) for v, d, scales in values)
        ):
            return str(f.relative_to(ROOT))
    return None


def _unquoted(doc: str, text: str) -> str:
    """The README without its generated benchmark block (tests/project/test_bench_claims.py checks that one against
    bench/results/latest), its lines kept blank so line numbers stay."""
    if doc != "README.md":
        return text
    from bench.readme import END, START

    a, b = text.index(START), text.index(END) + len(END)
    return text[:a] + re.sub(r"[^\n]", "", text[a:b]) + text[b:]


def check(doc: str) -> list[Figure]:
    """Every measured figure of ``doc`` with its records and, where a text record holds it, the record."""
    out = []
    for block in blocks(doc, _unquoted(doc, (ROOT / doc).read_text())):
        found = figures(block)
        if not found:
            continue
        real, missing = records("\n".join([block.text, *block.context]))
        for at, fig in found:
            line = block.line + block.text[:at].count("\n")
            if block.marked:
                out.append(Figure(doc, line, block.section, fig, [], None, marked=block.marked))
                continue
            value = next(
                (held for held in map(lambda r, f=fig: _holds(r, f), _nearest(real, block.text, at)) if held), None
            )
            problem = None
            if missing:
                problem = f"names {', '.join(missing)}, which do not exist"
            elif not real:
                problem = "names no committed record"
            out.append(Figure(doc, line, block.section, fig, real, value, problem))
    return out


def _nearest(records: list[str], text: str, at: int) -> list[str]:
    """The records in the order to look for a figure at ``at`` in: files before directories, each by how near the
    figure its name is (a name in the block's context counts as far)."""

    def distance(record: str) -> tuple[bool, int]:
        where = [m.start() for m in re.finditer(re.escape(record), text)]
        return (ROOT / record).is_dir(), min((abs(w - at) for w in where), default=len(text) + 1)

    return sorted(records, key=distance)


def idle_markers(doc: str) -> list[int]:
    """The lines of the markers in ``doc`` that cover no figure the rule reads as measured (to drop)."""
    text = _unquoted(doc, (ROOT / doc).read_text())
    used = {b.marker_line for b in blocks(doc, text) if b.marked and figures(b)}
    return [i for i, line in enumerate(text.splitlines(), 1) if MARKER.match(line) and i not in used]


def render() -> str:
    """docs/numbers.md: every figure of the covered docs, what names its record, and how it was checked."""
    lines = [
        "# Measured figures in the README and docs, and the records behind them",
        "",
        "Generated by `python -m bench.doc_numbers` (rule: `bench/doc_numbers.py`; checked by",
        "`tests/project/test_doc_numbers.py`); do not edit. *value*: the record named holds the figure;",
        "*reference*: the paragraph names the record (a test, code, or a record whose text does not hold the figure as",
        "written). The README's generated benchmark table is checked by `tests/project/test_bench_claims.py` instead.",
        "",
        f"Covered: {', '.join(COVERED)}. Not yet covered: {', '.join(NOT_YET) or 'none'}.",
    ]
    for doc in COVERED:
        found = check(doc)
        lines += [
            "",
            f"## {doc} ({len(found)} figures)",
            "",
            "| section | figure | record | checked |",
            "|---|---|---|---|",
        ]
        for f in found:
            where = f.by_value or ", ".join(f.records) or f"**{f.problem}**" if not f.marked else "—"
            how = (
                f"not measured: {f.marked}"
                if f.marked
                else "**missing**"
                if f.problem
                else "value"
                if f.by_value
                else "reference"
            )
            lines.append(f"| {f.section.replace('|', '/')} | {f.figure_text()} | {where} | {how} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    LISTING.write_text(render())
    problems = [f for d in COVERED for f in check(d) if f.problem]
    for f in problems:
        print(f"{f.doc}:{f.line}: {f.text}: {f.problem}")
    print(f"{LISTING.relative_to(ROOT)} rewritten; {len(problems)} figures without a record")
    sys.exit(1 if problems else 0)

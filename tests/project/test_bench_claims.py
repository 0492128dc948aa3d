"""The README's benchmark figures are those of the committed `make bench` run (bench/results/latest/): regenerate
with `python -m bench.readme` after a run, and commit both. A hand edit of the README's numbers, or results
committed without the README (or the other way round), fails here; so does a quoted run from a busy machine (its
1-minute load average before it above its core count, or after it above twice the cores); so does a quoted run whose
measured code changed after it ran, unless the README says it is stale (bench/freshness.py)."""

from __future__ import annotations

import json
import shutil

import pytest

from bench import freshness, readme
from bench.harness import ALLOW_BUSY_ENV, RESULTS, BusyMachine, Row, busy, load_reports, markdown, write
from bench.run import BENCHMARKS


def test_a_committed_run_of_every_benchmark_says_where_and_when_it_ran():
    reports = {r["benchmark"]: r for r in load_reports(RESULTS)}
    missing = [name for name in BENCHMARKS if name not in reports]
    assert not missing, f"no committed result for {missing}: run `make bench` and commit bench/results/latest/"
    for name in BENCHMARKS:
        machine = reports[name]["machine"]
        assert {"cpu", "cores", "gpu", "date", "load_average_1min", "load_average_1min_after"} <= set(machine), name
        assert reports[name]["rows"], f"{name} measured nothing"


def test_readme_quotes_the_committed_results():
    quoted = readme.block(readme.README.read_text())
    assert quoted == readme.render(RESULTS), (
        "README's benchmark table differs from bench/results/latest: run `python -m bench.readme`"
    )
    for bench, name in readme.QUOTED:
        assert name in quoted and bench in quoted


def test_results_table_is_made_from_the_committed_json():
    assert (RESULTS / "results.md").read_text() == markdown(load_reports(RESULTS, BENCHMARKS))


def busy_quoted(directory=RESULTS) -> list[str]:
    """The runs the README quotes that were made on a busy machine (marked so, or with a load above the cores)."""
    reports = {r["benchmark"]: r for r in load_reports(directory)}
    quoted = dict.fromkeys([b for b, _ in readme.QUOTED] + [b for b, _, _ in readme.QUOTED_TABLES])
    out = []
    for bench in quoted:
        m = reports[bench]["machine"]
        reason = m.get("busy") or busy(m)
        if reason:
            out.append(f"{bench} ({m['date']}): {reason}")
    return out


def test_the_readme_quotes_no_run_from_a_busy_machine():
    found = busy_quoted()
    assert not found, (
        "the README quotes runs from a busy machine (load above the cores): re-run them on a quiet one"
        " (python -m bench.run NAME) and regenerate the table:\n" + "\n".join(found)
    )


def test_a_quoted_run_is_fresh_or_the_readme_says_it_is_stale():
    """Issue 48: every quoted run names the code it measured; when that code changed after the run (a commit touching
    the benchmark's MEASURES paths after the run's commit, or uncommitted changes there), the README marks the run
    stale (bench/readme.py STALE, rendered into its row) until it is run again; a run marked stale that is not is
    an error too. Checked against git's history of this checkout."""
    why = freshness.no_history()
    if why:
        pytest.skip(why)
    reports = {r["benchmark"]: r for r in load_reports(RESULTS)}
    quoted = dict.fromkeys([b for b, _ in readme.QUOTED] + [b for b, _, _ in readme.QUOTED_TABLES])
    missing = [b for b in quoted if b not in freshness.MEASURES]
    assert not missing, f"bench/freshness.py MEASURES does not say what {missing} measure"
    stale, checked = {}, []
    for bench in quoted:
        ran_at = freshness.run_commit(bench, reports[bench])
        assert ran_at, f"{bench}: no commit to date its run by"
        changed = freshness.changed_since(ran_at, freshness.MEASURES[bench])
        checked.append(f"{bench} ran at {ran_at}: {len(changed)} changes since")
        if changed:
            stale[bench] = ran_at
    assert stale == readme.STALE, (
        "bench/readme.py STALE must list exactly the quoted runs whose measured code changed after them (re-run them:"
        " python -m bench.run NAME; or mark them), then python -m bench.readme:\n" + "\n".join(checked)
    )


def test_a_busy_run_is_refused_or_written_marked(tmp_path, monkeypatch):
    quiet = {"cores": 2, "load_average_1min": 2.0, "load_average_1min_after": 4.0}
    assert busy(quiet) is None  # before: up to the cores; after: up to twice them (the run's own load)
    assert "before 2.01" in busy({**quiet, "load_average_1min": 2.01})
    assert "after 4.01" in busy({**quiet, "load_average_1min_after": 4.01})
    assert "before 5.36" in busy({**quiet, "load_average_1min": 5.36})
    assert busy({"cores": 2, "load_average_1min": 0.5})  # no load after: cannot be shown quiet

    for p in RESULTS.glob("*.json"):
        shutil.copy(p, tmp_path)
    started = {**json.loads((RESULTS / "tts_ttfa.json").read_text())["machine"], "load_average_1min": 9.5}
    started.pop("busy", None)
    before = (tmp_path / "tts_ttfa.json").read_text()
    rows = [Row("TTFA via router -> cosyvoice_tts", "s", [0.1]), Row("RTF via router (wall / audio)", "x", [0.1])]
    monkeypatch.delenv(ALLOW_BUSY_ENV, raising=False)
    with pytest.raises(BusyMachine, match="exceeds 2 cores"):
        write("tts_ttfa", rows, {}, started, directory=tmp_path)
    assert (tmp_path / "tts_ttfa.json").read_text() == before  # nothing written

    monkeypatch.setenv(ALLOW_BUSY_ENV, "1")
    report = write("tts_ttfa", rows, {}, started, directory=tmp_path)
    assert "before 9.5" in report["machine"]["busy"]
    assert json.loads((tmp_path / "tts_ttfa.json").read_text())["machine"]["busy"] == report["machine"]["busy"]
    lines = [line for line in readme.render(tmp_path).splitlines() if line.startswith("| tts_ttfa |")]
    assert len(lines) == 2 and all("**BUSY" in line for line in lines)
    assert "**BUSY**" in markdown(load_reports(tmp_path))
    assert any(line.startswith("tts_ttfa") for line in busy_quoted(tmp_path))

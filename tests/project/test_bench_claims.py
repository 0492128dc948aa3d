"""The README's benchmark figures are those of the committed `make bench` run (bench/results/latest/): regenerate
with `python -m bench.readme` after a run, and commit both. A hand edit of the README's numbers, or results
committed without the README (or the other way round), fails here."""

from __future__ import annotations

from bench import readme
from bench.harness import RESULTS, load_reports, markdown
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

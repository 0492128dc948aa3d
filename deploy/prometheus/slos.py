"""SLOs as code: the table below generates deploy/prometheus/rules.yml (recording rules per SLO and window,
multi-window multi-burn-rate alerts). ``python deploy/prometheus/slos.py`` rewrites the file;
tests/deploy/test_deploy.py fails when the file and the table disagree, and rules_test.yml unit-tests every alert.

Burn rates follow the Google SRE workbook: page when the error budget burns 14.4x over both 1h and 5m (2% of a
30-day budget in an hour), ticket at 6x over both 6h and 30m. A latency SLO's error ratio is the share of events
slower than the threshold (a histogram bucket boundary); with no events in a window it is NaN, so an idle fleet
never alerts.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

RULES = Path(__file__).with_name("rules.yml")
WINDOWS = ("5m", "30m", "1h", "6h")
BURNS = (("Fast", "page", 14.4, "1h", "5m"), ("Slow", "ticket", 6.0, "6h", "30m"))
SERVER_ERRORS = "UNAVAILABLE|INTERNAL|UNKNOWN|DEADLINE_EXCEEDED|DATA_LOSS"


@dataclass(frozen=True)
class LatencySLO:
    name: str  # recording rules voicefleet:slo_<name>_errors:ratio_rate<window>; alert label slo=<name>
    title: str  # alert name part and dashboard title
    histogram: str  # metric name without _bucket / _count
    selector: str  # label matchers, without braces
    le: str  # threshold: a bucket boundary, as the metric writes it (avoid integers: "1" vs "1.0")
    objective: float  # share of events at or under the threshold
    what: str  # summary: "{{ $value }} of <what> over <threshold>"

    def error_ratio(self, window: str) -> str:
        bucket = ",".join(m for m in (self.selector, f'le="{self.le}"') if m)
        total = f"sum(rate({self.histogram}_count{{{self.selector}}}[{window}]))"
        good = f"sum(rate({self.histogram}_bucket{{{bucket}}}[{window}]))"
        return f"({total} - {good})\n/ {total}"

    def summary(self) -> str:
        ms = round(float(self.le) * 1000)
        return f"{{{{ $value | humanizePercentage }}}} of {self.what} over {ms} ms (budget {self.budget_text()})"

    def budget_text(self) -> str:
        return f"{round((1 - self.objective) * 100, 3):g}%"


@dataclass(frozen=True)
class AvailabilitySLO:
    name: str
    title: str
    selector: str
    objective: float

    def error_ratio(self, window: str) -> str:
        bad = f'sum(rate(voicefleet_requests_total{{{self.selector},code=~"{SERVER_ERRORS}"}}[{window}]))'
        total = f"sum(rate(voicefleet_requests_total{{{self.selector}}}[{window}]))"
        return f"({bad} or vector(0))\n/ clamp_min({total}, 1e-9)"

    def summary(self) -> str:
        return f"Router failing {{{{ $value | humanizePercentage }}}} of calls (budget {self.budget_text()})"

    def budget_text(self) -> str:
        return f"{round((1 - self.objective) * 100, 3):g}%"


SLOS = (
    LatencySLO(
        name="ttfa",
        title="TTFA",
        histogram="voicefleet_tts_time_to_first_audio_seconds",
        selector='service="router",method="Synthesize"',
        le="0.3",
        objective=0.99,
        what="router Synthesize calls with first audio",
    ),
    LatencySLO(
        name="asr_first_interim",
        title="ASRFirstInterim",
        histogram="voicefleet_asr_speech_start_to_first_interim_seconds",
        selector='service="asr"',
        le="0.5",
        objective=0.99,
        what="utterances with VAD speech start to first interim",
    ),
    LatencySLO(
        name="asr_final",
        title="ASRFinal",
        histogram="voicefleet_asr_speech_end_to_final_seconds",
        selector='service="asr"',
        le="1.5",
        objective=0.95,
        what="utterances with speech end to final",
    ),
    LatencySLO(
        name="sts_first_audio",
        title="ConversationFirstAudio",
        histogram="voicefleet_sts_speech_end_to_first_audio_seconds",
        selector='service="router"',
        le="1.5",
        objective=0.95,
        what="conversation turns with speech end to first reply audio",
    ),
    LatencySLO(
        name="barge_in",
        title="BargeIn",
        histogram="voicefleet_sts_barge_in_to_silence_seconds",
        selector='service="moss_sts"',  # measured where the barge-in is heard; the router only relays it
        le="0.3",
        objective=0.99,
        what="barge-ins with barge-in to silence",
    ),
    LatencySLO(
        name="cancel",
        title="Cancel",
        histogram="voicefleet_tts_cancel_to_engine_stop_seconds",
        selector="",
        le="0.2",
        objective=0.99,
        what="TTS cancels with cancel to engine stop",
    ),
    AvailabilitySLO(name="availability", title="Availability", selector='service="router"', objective=0.999),
)


class _Literal(str):
    pass


def _literal(dumper, value):
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")


yaml.add_representer(_Literal, _literal)


def rules() -> dict:
    recording = {
        "name": "voicefleet-recording",
        "rules": [
            {
                "record": f"voicefleet:tts_ttfa_seconds:p{q}_5m",
                "expr": f"histogram_quantile(0.{q}, sum by (le, service, engine) "
                "(rate(voicefleet_tts_time_to_first_audio_seconds_bucket[5m])))",
            }
            for q in ("95", "50")
        ],
    }
    groups = [recording]
    alerts = []
    for slo in SLOS:
        groups.append(
            {
                "name": f"voicefleet-slo-{slo.name}",
                "rules": [
                    {"record": f"voicefleet:slo_{slo.name}_errors:ratio_rate{w}", "expr": _Literal(slo.error_ratio(w))}
                    for w in WINDOWS
                ],
            }
        )
        budget = round(1 - slo.objective, 6)
        for speed, severity, factor, long, short in BURNS:
            r = f"voicefleet:slo_{slo.name}_errors:ratio_rate"
            alerts.append(
                {
                    "alert": f"Voicefleet{slo.title}BudgetBurn{speed}",
                    "expr": f"{r}{long} > ({factor} * {budget}) and {r}{short} > ({factor} * {budget})",
                    "labels": {"severity": severity, "slo": slo.name},
                    "annotations": {
                        "summary": f"{slo.name} SLO budget burning {factor:g}x: {slo.summary()}",
                    },
                }
            )
    alerts.append(
        {
            "alert": "VoicefleetBackendDown",
            "expr": "voicefleet_backend_serving == 0",
            "for": "2m",
            "labels": {"severity": "page"},
            "annotations": {"summary": "Backend {{ $labels.backend }} has not been SERVING for 2 minutes"},
        }
    )
    groups.append({"name": "voicefleet-alerts", "rules": alerts})
    return {"groups": groups}


HEADER = """\
# GENERATED by `python deploy/prometheus/slos.py` from the SLO table in deploy/prometheus/slos.py: edit that.
# Unit tests: `promtool test rules deploy/prometheus/rules_test.yml` (tests/deploy/test_prometheus.py runs them).
#
# SLOs (each: error ratio over 5m/30m/1h/6h; page at 14.4x budget burn over 1h and 5m, ticket at 6x over 6h and 30m):
"""


def render() -> str:
    lines = [HEADER]
    for slo in SLOS:
        threshold = f"<= {float(slo.le) * 1000:g} ms" if isinstance(slo, LatencySLO) else "without a server error"
        subject = getattr(slo, "histogram", "voicefleet_requests_total")
        lines.append(f"#   {slo.name}: {slo.objective:.3g} of {subject}{{{slo.selector}}} {threshold}\n")
    return "".join(lines) + yaml.dump(rules(), sort_keys=False, width=200)


if __name__ == "__main__":
    if sys.argv[1:] == ["--check"]:
        sys.exit(0 if RULES.read_text() == render() else 1)
    RULES.write_text(render())

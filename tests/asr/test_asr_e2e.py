"""Speech out and back in through the router, the way a user runs it: `voicefleet speak` writes a WAV,
`voicefleet transcribe` reads it back with interim results and timings; metrics show the pipeline worked."""

from __future__ import annotations

import subprocess
import sys

from bench import evaluation as ev
from services.common import audio

SENTENCE = "please call me back when you get home"


def cli(fleet, *args, timeout=90):
    command = [sys.executable, "-m", "services.cli.main", "--config", str(fleet.config_path), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


def test_speak_then_transcribe_through_the_router(asr_fleet, tmp_path):
    wav = tmp_path / "said.wav"
    spoken = cli(asr_fleet, "speak", SENTENCE, "-o", str(wav), "--rate", "24000")
    assert spoken.returncode == 0, spoken.stderr
    pcm, rate = audio.read_wav(str(wav))
    assert rate == 24000
    # Leading and trailing silence, as a recording would have.
    audio.write_wav(wav, bytes(rate) + pcm + bytes(rate * 2), rate)

    heard = cli(asr_fleet, "transcribe", str(wav), "--interim")
    assert heard.returncode == 0, heard.stderr
    out = heard.stdout
    assert "speech start at" in out and "speech end at" in out
    assert "interim:" in out and "final #0:" in out
    assert out.index("interim:") < out.index("final #0:")
    transcript = next(line for line in out.splitlines() if line.startswith("transcript: "))
    assert ev.wer([SENTENCE], [transcript.removeprefix("transcript: ")]) <= 0.15, out
    assert "first interim:" in out and "ms after speech ended" in out

    # The asr service's own metrics saw it: VAD windows, an endpoint, a final's RTF, a first interim.
    def count(name, **labels):
        return asr_fleet.metric("asr", name, service="asr", **labels)

    assert count("voicefleet_asr_vad_window_seconds_count") > 0
    assert count("voicefleet_asr_speech_end_to_final_seconds_count") >= 1
    assert count("voicefleet_asr_speech_start_to_first_interim_seconds_count") >= 1
    assert count("voicefleet_asr_real_time_factor_count", **{"pass": "final"}) >= 1
    assert count("voicefleet_asr_utterances_total", reason="endpoint") >= 1


def test_transcribe_reports_bad_input_and_status_lists_asr(asr_fleet, tmp_path):
    wav = tmp_path / "low.wav"
    audio.write_wav(wav, bytes(4000 * 2), 4000)  # below 8 kHz
    bad = cli(asr_fleet, "transcribe", str(wav), "--fast")
    assert bad.returncode != 0
    assert "INVALID_ARGUMENT" in bad.stderr and "sample_rate_hz" in bad.stderr
    status = cli(asr_fleet, "status")
    rows = {line.split()[0]: line.split()[1:] for line in status.stdout.splitlines() if line.strip()}
    assert rows["asr"][1] == "SERVING", status.stdout

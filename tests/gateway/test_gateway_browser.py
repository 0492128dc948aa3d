"""The gateway's page in a real browser: Debian's Chromium, headless, driven by Playwright, with a fake microphone
that plays a WAV file (the user's question said by the fleet's piper voice, then silence; Chromium loops the file).

What a user would check: the page shows the user's words, plays a reply that the strict listener hears as the reply
text the page shows, stops playing when the user speaks over the reply (barge-in), and Speak plays what was typed.
"What the page played" is tapped from the page's audio graph: an AudioWorklet between the player and the speakers
(services/gateway/static/worklets.js) hands each rendered quantum to the page, and the test reads them.

Chromium is installed by `make test` when missing and root (Makefile target `chromium`); without it (or without the
playwright package) these tests are skipped and pytest prints a loud line saying so (tests/conftest.py).
Set GATEWAY_SCREENSHOTS=docs to refresh the page's screenshots in docs/.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from services.common import audio
from tests.speech import INTELLIGIBLE, intelligible, wer

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
if not Path(CHROMIUM).exists():
    pytest.skip("no chromium: apt-get install chromium (make test does it when root)", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (requirements/dev.txt)")

pytestmark = pytest.mark.timeout(420)
QUESTION = "Please tell me a short story about a friendly dog."
FOX = "the quick brown fox jumps over the lazy dog"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--use-fake-ui-for-media-stream",
    "--use-fake-device-for-media-stream",
]
# Messages between the page and the audio thread take a few render quanta (128 samples each): the tap may still
# pass audio queued before a flush reached the player for this many samples.
FLUSH_SLACK_SAMPLES = 16 * 128


@pytest.fixture(scope="module")
def gateway_url(gateway_fleet) -> str:
    return f"http://{gateway_fleet.address('gateway')}"


@pytest.fixture(scope="module")
def microphone_wav(gateway_url, tmp_path_factory) -> Path:
    """The fake microphone: the question (piper, through the gateway's own speech endpoint) then 4 s of silence."""
    body = json.dumps({"input": QUESTION, "voice": "joe", "response_format": "pcm", "sample_rate": 16000}).encode()
    request = urllib.request.Request(
        f"{gateway_url}/v1/audio/speech", data=body, headers={"Content-Type": "application/json"}
    )
    pcm = urllib.request.urlopen(request, timeout=60).read()
    path = tmp_path_factory.mktemp("microphone") / "question.wav"
    audio.write_wav(path, pcm + bytes(16000 * 2 * 4), 16000)
    return path


@pytest.fixture(scope="module")
def page(gateway_url, microphone_wav):
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=[*FLAGS, f"--use-file-for-fake-audio-capture={microphone_wav}"],
        )
        page = browser.new_page(viewport={"width": 1100, "height": 900})
        page.goto(gateway_url)
        page.wait_for_function("document.querySelectorAll('#talk-voice option').length > 1")
        yield page
        browser.close()


def screenshot(page, name: str, tmp_path: Path) -> None:
    directory = Path(os.environ.get("GATEWAY_SCREENSHOTS") or tmp_path)
    directory.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(directory / name), full_page=True)


def status(page) -> dict:
    return page.evaluate("window.voicefleet.status")


def wait_for(page, predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate(status(page))
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"{what} did not happen within {timeout:.0f} s; events: {status(page)['events'][-6:]}")


def tapped(page) -> tuple[np.ndarray, int, dict]:
    tap = page.evaluate("window.voicefleet.tapTake()")
    return np.frombuffer(base64.b64decode(tap["pcm"]), dtype=np.int16), tap["rate"], tap["marks"]


REPLY_PAUSE_S = 1.2  # the longest pause inside a playing reply the barge-in test allows (sentence pause + segment gap)


def wait_played_out(page, drained_before: int) -> None:
    """All audio has arrived: wait until the player's queue runs dry once more (or 3 s, if it already had)."""
    deadline = time.monotonic() + 3
    while status(page)["drained"] <= drained_before and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)


def test_talk_shows_the_users_words_and_plays_an_intelligible_reply(page, tmp_path):
    page.evaluate("window.voicefleet.tapStart()")
    page.click("#talk-start")
    wait_for(page, lambda s: [e for e in s["events"] if e["type"] == "transcript" and e["final"]], 60, "a transcript")
    # Mute (the page's control): the looping microphone would otherwise speak over the reply; that is the next test.
    page.click("#talk-mute")
    turns = wait_for(page, lambda s: s["turns"], 90, "a complete turn")
    wait_played_out(page, status(page)["drained"])
    shown_user = page.inner_text("#user-text")
    shown_reply = page.inner_text("#reply-text")
    pcm, rate, _ = tapped(page)
    screenshot(page, "gateway-talk.png", tmp_path)
    assert wer(QUESTION, shown_user) <= 0.2, shown_user
    assert not turns[0]["interrupted"] and shown_reply.strip() == turns[0]["reply_text"].strip()
    error, heard = intelligible(shown_reply, pcm.tobytes(), rate)
    assert error <= INTELLIGIBLE, (shown_reply, heard)


def test_speech_over_the_reply_stops_playback(page, tmp_path):
    seen = len(status(page)["events"])
    page.evaluate("window.voicefleet.tapStart()")
    page.click("#talk-mute")  # unmute: the microphone's next question starts a turn, the one after barges in
    interrupted = wait_for(
        page,
        lambda s: [e for e in s["events"][seen:] if e["type"] == "interrupted" and e["reason"] == "barge_in"],
        120,
        "a barge-in",
    )
    time.sleep(1.0)  # let the tap run on after the flush
    pcm, rate, marks = tapped(page)
    screenshot(page, "gateway-barge-in.png", tmp_path)
    page.click("#talk-stop")
    flush = marks["flush"]
    after = pcm[flush + FLUSH_SLACK_SAMPLES : marks.get("audioAfterFlush", len(pcm))]
    assert interrupted[0]["audio_sent_ms"] > 0
    # Playing: sound within the last REPLY_PAUSE_S before the flush. The looping microphone barges in at no chosen
    # moment, and a reply that is playing may be in the pause between two of its sentences then (the voice's pause
    # plus the gap between synthesized segments). A half-second window failed once in CI (silence in the half second
    # before the flush, audio_sent_ms > 0); such a pause is the likely reason, not confirmed.
    window = int(rate * REPLY_PAUSE_S)
    assert np.abs(pcm[max(0, flush - window) : flush]).max() > 1000, "the reply was not playing before the flush"
    assert status(page)["flushedSamples"][-1] > 0, "nothing was queued to drop"
    assert len(after) >= rate // 4, f"only {len(after)} samples between the flush and the next reply"
    assert np.abs(after).max() == 0, "the reply kept playing after the barge-in"


def test_speak_plays_what_was_typed(page, tmp_path):
    page.fill("#speak-text", FOX)
    page.select_option("#speak-voice", "joe")
    drained = status(page)["drained"]
    page.evaluate("window.voicefleet.tapStart()")
    page.click("#speak-play")
    wait_for(page, lambda s: s["speakDone"] >= 1, 60, "the speech stream's end")
    wait_played_out(page, drained)
    pcm, rate, _ = tapped(page)
    screenshot(page, "gateway-speak.png", tmp_path)
    error, heard = intelligible(FOX, pcm.tobytes(), rate)
    assert error <= INTELLIGIBLE, heard

"""The OpenAI Realtime API over WebRTC (``POST /v1/realtime/calls``) in a real browser on a real CPU fleet: Debian's
headless Chromium (Playwright) runs the page's WebRTC mode, which is OpenAI's documented browser flow (microphone track
added, the ``oai-events`` data channel created, the offer POSTed as application/sdp, the answer set), with a fake
microphone playing a spoken question (the fleet's piper voice, then silence; Chromium loops the file).

Checked: the events arrive on ``oai-events`` (session.created, the user's transcript, output_audio_buffer.started /
.stopped, response.done; no reply audio in events: it comes on the track), and the reply audio the page played —
tapped from its audio graph, where the remote track is played (services/gateway/static/worklets.js) — is heard by
the strict listener as the reply's transcript. Marked ``realtime`` (`make test-realtime`) with the SDK's tests.
Without a fleet (SDP checks, tokens, the answer): tests/gateway/test_realtime_calls.py."""

from __future__ import annotations

import base64
import json
import shutil
import time
import urllib.error
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

pytestmark = [pytest.mark.realtime, pytest.mark.timeout(420)]
# tests/gateway/test_realtime.py's question: the CPU voice says its replies clearly.
QUESTION = "Please tell me a short story about a friendly cat."
SYSTEM = "You are a friendly voice assistant. Answer in English, in one or two short sentences."
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--autoplay-policy=no-user-gesture-required",
    "--use-fake-ui-for-media-stream",
    "--use-fake-device-for-media-stream",
]
EVENT_WAIT_S = 120  # the longest wait for one event (a CPU fleet answering); never a timing assert


@pytest.fixture(scope="module")
def gateway_url(gateway_fleet) -> str:
    return f"http://{gateway_fleet.address('gateway')}"


@pytest.fixture(scope="module")
def microphone_wav(gateway_url, tmp_path_factory) -> Path:
    """The fake microphone: the question (piper, through the gateway's speech endpoint) then 6 s of silence."""
    body = json.dumps({"input": QUESTION, "voice": "joe", "response_format": "pcm", "sample_rate": 48000}).encode()
    request = urllib.request.Request(
        f"{gateway_url}/v1/audio/speech", data=body, headers={"Content-Type": "application/json"}
    )
    for attempt in range(6):  # the router's admission may ask to retry (429) on a busy 2-core machine
        try:
            pcm = urllib.request.urlopen(request, timeout=60).read()
            break
        except urllib.error.HTTPError as e:
            if e.code != 429 or attempt == 5:
                raise
            time.sleep(float(e.headers.get("Retry-After") or 2) + attempt)
    path = tmp_path_factory.mktemp("microphone") / "question.wav"
    audio.write_wav(path, pcm + bytes(48000 * 2 * 6), 48000)
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


def status(page) -> dict:
    return page.evaluate("window.voicefleet.status")


def events_of(page, kind: str) -> list[dict]:
    return [e for e in status(page)["events"] if e["type"] == kind]


def wait_for(page, predicate, what: str):
    deadline = time.monotonic() + EVENT_WAIT_S
    while time.monotonic() < deadline:
        value = predicate(status(page))
        if value:
            return value
        time.sleep(0.1)
    kinds = [e["type"] for e in status(page)["events"]]
    raise AssertionError(f"{what} did not happen within {EVENT_WAIT_S} s; events: {kinds[-12:]}")


def test_webrtc_call_gets_events_on_oai_events_and_plays_an_intelligible_reply(page):
    page.select_option("#talk-voice", "joe")
    page.fill("#system", SYSTEM)
    page.select_option("#talk-transport", "webrtc")
    page.evaluate("window.voicefleet.tapStart()")
    page.click("#talk-start")
    wait_for(page, lambda s: [e for e in s["events"] if e["type"] == "session.updated"], "session.updated")
    completed = wait_for(
        page,
        lambda s: [e for e in s["events"] if e["type"] == "conversation.item.input_audio_transcription.completed"],
        "the user's transcript",
    )
    # Mute (a disabled track sends silence): the looping microphone would otherwise ask again over the reply.
    page.click("#talk-mute")
    done = wait_for(page, lambda s: [e for e in s["events"] if e["type"] == "response.done"], "response.done")
    response = done[0]["response"]
    stopped = wait_for(
        page,
        lambda s: [
            e for e in s["events"] if e["type"] == "output_audio_buffer.stopped" and e["response_id"] == response["id"]
        ],
        "output_audio_buffer.stopped (the reply played out)",
    )
    # The track's last frames still pass the network, the browser's jitter buffer and the audio graph: wait for a
    # second of silence in what the page played (on a loaded machine that buffer grows).
    deadline = time.monotonic() + 20
    while page.evaluate("window.voicefleet.tapQuiet()") < 1.0 and time.monotonic() < deadline:
        time.sleep(0.1)
    tap = page.evaluate("window.voicefleet.tapTake()")
    shown_user, shown_reply = page.inner_text("#user-text"), page.inner_text("#reply-text")
    kinds = [e["type"] for e in status(page)["events"]]
    page.click("#talk-stop")

    assert status(page)["call"].startswith("/v1/realtime/calls/rtc_"), status(page)["call"]
    assert kinds[0] == "session.created", kinds[:3]
    assert "error" not in kinds, events_of(page, "error")
    assert "response.output_audio.delta" not in kinds  # the audio is on the track, not in events
    assert wer(QUESTION, completed[0]["transcript"]) <= 0.2, completed[0]["transcript"]
    assert shown_user == completed[0]["transcript"]
    assert response["status"] == "completed", response["status_details"]
    transcript = response["output"][0]["content"][0]["transcript"]
    assert transcript.strip() and shown_reply.strip() == transcript.strip(), (shown_reply, transcript)
    started = [e for e in events_of(page, "output_audio_buffer.started") if e["response_id"] == response["id"]]
    assert started and kinds.index("output_audio_buffer.started") < kinds.index("output_audio_buffer.stopped")
    assert stopped
    # What the page played from a little before the reply's first frame (the tap's mark at output_audio_buffer.started).
    pcm = np.frombuffer(base64.b64decode(tap["pcm"]), dtype=np.int16)
    pcm = pcm[max(0, tap["marks"]["replyStarted"] - tap["rate"] // 2) :]
    assert np.abs(pcm).max() > 1000, "the page played no reply audio"
    error, heard = intelligible(transcript, pcm.tobytes(), tap["rate"])
    assert error <= INTELLIGIBLE, (transcript, heard)

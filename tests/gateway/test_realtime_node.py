"""A second, independent Realtime client: the official ``openai`` npm package's WebSocket client (``OpenAIRealtimeWS``
from 'openai/realtime/ws', on the ``ws`` package; both pinned in package.json) doing one spoken turn against the
gateway on a real CPU fleet (tests/gateway/realtime_client.mjs under ``node``). The app's backend side is the Python SDK: it
mints a client secret with the session's settings, and the Node client connects with that secret only, as a browser
or phone app would. The Python side judges what Node got: the session's settings, the user's transcript, a completed
response whose audio the strict listener hears as its transcript. In `make test` (which installs node_modules from
package-lock.json first), on the gateway fleet the main lane already runs."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import openai
import pytest

from tests.gateway.test_realtime import SPOKEN_SESSION, SYSTEM
from tests.speech import INTELLIGIBLE, intelligible, wer

pytestmark = pytest.mark.timeout(300)
ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).with_name("realtime_client.mjs")
# test_realtime.py's question: the CPU voice says its replies clearly.
QUESTION = "Please tell me a short story about a friendly cat."


def node() -> str:
    found = shutil.which("node")
    if found is None or not (ROOT / "node_modules" / "openai" / "realtime" / "ws.js").exists():
        pytest.fail("node and the openai npm package are needed: `make test` installs them (npm ci)")
    return found


def test_the_openai_npm_client_does_a_spoken_turn_with_a_client_secret(gateway_fleet, tmp_path):
    base_url = f"http://{gateway_fleet.address('gateway')}/v1"
    # The app's backend; its question audio comes from the fleet (a 429 with a retry hint on a busy machine is retried).
    backend = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=5, timeout=120)
    question = tmp_path / "question.pcm"
    question.write_bytes(
        backend.audio.speech.create(model="tts-1", voice="joe", input=QUESTION, response_format="pcm").content
    )
    secret = backend.realtime.client_secrets.create(
        session=SPOKEN_SESSION,
        expires_after={"anchor": "created_at", "seconds": 600},
    )
    reply = tmp_path / "reply.pcm"
    run = subprocess.run(
        [node(), str(SCRIPT), base_url, secret.value, str(question), str(reply)],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=ROOT,
    )
    assert run.returncode == 0, (run.stdout[-2000:], run.stderr[-2000:])
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert not result["errors"], result["errors"]
    # The session opened with the secret's settings.
    session = result["session"]
    assert session["instructions"] == SYSTEM and session["audio"]["output"]["voice"] == "joe"
    assert session["audio"]["input"]["transcription"]["language"] == "en"
    events = result["events"]
    assert events[0] == "session.created" and events[-1] == "response.done", events
    for kind in ("input_audio_buffer.speech_started", "input_audio_buffer.committed", "response.output_audio.delta"):
        assert kind in events, (kind, events)
    assert wer(QUESTION, result["user_transcript"] or "") <= 0.2, result["user_transcript"]
    assert result["status"] == "completed", result
    transcript = result["reply_transcript"]
    pcm = reply.read_bytes()
    assert transcript and transcript.strip() and pcm, result
    error, heard = intelligible(transcript, pcm, 24_000)
    assert error <= INTELLIGIBLE, (transcript, heard)

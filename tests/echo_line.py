"""A caller's line that leaks the agent's reply back into the microphone, as the dialogue would see it.

The reply (piper joe) is handed to the caller in chunks the way the dialogue paces it (a 40 ms first chunk, then
100 ms chunks, at most 300 ms ahead of playback); the caller plays them from the moment the first is taken, and the
microphone picks the playback up ``delay_ms`` later at ``level_db`` (re the reply as sent) over a little noise
(-55 dBFS), plus the user's own speech if any. With ``room`` the echo path is a small room's
(``room_response``: the direct sound and a 150 ms reverberant tail) instead of a pure delay. The mic goes to the server in frames of 20, 25, 40 and 30 ms in turn
(25 ms is not a whole number of AEC frames). A barge-in ``cut_s`` after the user starts stops the reply: no more
chunks, ``stop_render`` (the caller flushes its playback), and the echo ends ``delay_ms`` later.

``python -m tests.echo_line`` prints the measured table of docs/conversation.md (echo return loss enhancement, CPU
per second of audio, and the user's words through the strict listener in double talk).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from services.common import audio

RATE = 16_000
LEAD_S = 0.5  # the reply starts playing this far into the call
NOISE_DBFS = -55.0
TURN_TO_REPLY_S = 0.45  # the user's last word -> the reply's first audio (bench/results: p50 ~0.5 s)
PLAYOUT_LEAD_S = 0.3  # moss_sts.playout_lead_ms: how far ahead of playback the caller gets reply chunks
MIC_FRAMES_MS = (20, 25, 40, 30)

REPLY = (
    "Sure, I can help with that. The next train to London leaves at seven in the evening from platform four, "
    "and it takes about two hours."
)
USER = "the children are playing in the garden"
# The user is piper joe played at 0.9 of its rate: slower and a tone lower, so not the agent's own voice (espeak-ng's
# formant speech is too fragile for the strict listener once any echo remains: its words flip on small changes).
USER_RATE_FACTOR = 0.9
DELAYS_MS = (50, 120, 250)
LEVELS_DB = (-20, -12, -6)


async def voices(texts=(USER,), speakers=None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """(reply, {text: user speech}) as int16 at 16 kHz, synthesized in process with the CPU voices (``speakers``: a
    started bench.evaluation.Speakers to use, left running; else one of its own for the call)."""
    from bench.evaluation import Speakers

    own = speakers is None
    if own:
        speakers = Speakers()
        await speakers.start()
    try:
        pcm, rate = await speakers.say("joe", REPLY)
        reply = np.frombuffer(audio.resample(pcm, rate, RATE), dtype=np.int16)
        users = {}
        for text in texts:
            pcm, rate = await speakers.say("joe", text)
            users[text] = np.frombuffer(audio.resample(pcm, int(rate * USER_RATE_FACTOR), RATE), dtype=np.int16)
    finally:
        if own:
            await speakers.close()
    return reply, users


def room_response(seed: int = 3) -> np.ndarray:
    """A small room's impulse response at 16 kHz: the direct sound, then 150 ms of reverberation decaying with a
    40 ms time constant (~0.3 s to -60 dB, a furnished office); unit energy, so ``level_db`` keeps its meaning."""
    t = np.arange(int(0.15 * RATE)) / RATE
    response = np.random.default_rng(seed).normal(0.0, 1.0, len(t)) * np.exp(-t / 0.04)
    response[0] = 4.0
    return response / np.sqrt(np.sum(response**2))


def _through(x: np.ndarray, response: np.ndarray) -> np.ndarray:
    n = len(x) + len(response) - 1
    size = 1 << (n - 1).bit_length()
    return np.fft.irfft(np.fft.rfft(x, size) * np.fft.rfft(response, size), size)[:n]


@dataclass
class Line:
    mic: np.ndarray  # int16: what the caller's microphone sent
    out: np.ndarray  # int16: the mic after the canceller (== mic without one), same timeline
    echo: np.ndarray  # float: the echo part of the mic
    user_start: int = 0  # mic sample where the user's speech starts (0: no user)
    user_end: int = 0
    reply_start: int = 0  # mic sample where the reply starts playing
    cpu_ms_per_s: float = 0.0  # canceller CPU per second of mic audio
    # (seconds after the reply started, echo?) when the canceller's EchoLine first decided; None: never
    decided: tuple[float, bool] | None = None


def call(
    reply: np.ndarray,
    delay_ms: int,
    level_db: float,
    user: np.ndarray | None = None,
    user_at_s: float = 2.0,
    cut_s: float | None = 0.5,
    cancel_echo: bool = True,
    room: bool = False,
    seed: int = 0,
    said_before: np.ndarray | None = None,
    noise_dbfs: float | None = NOISE_DBFS,
) -> Line:
    """One call: the reply echoed back (and the user speaking ``user_at_s`` into the reply), through a canceller.
    ``said_before``: the user's turn that the reply answers, spoken from ``LEAD_S`` on and ending
    ``TURN_TO_REPLY_S`` before the reply starts. ``noise_dbfs`` None: a digitally silent line."""
    from services.conversation.echo import EchoCanceller

    lead = int(LEAD_S * RATE)
    start = lead if said_before is None else lead + len(said_before) + int(TURN_TO_REPLY_S * RATE)
    user_start = start + int(user_at_s * RATE) if user is not None else 0
    stop = len(reply) if user is None or cut_s is None else min(len(reply), user_start - start + int(cut_s * RATE))
    played = reply[:stop].astype(np.float64)
    if room:
        played = _through(played, room_response())
    total = start + len(reply) + RATE
    delay = int(delay_ms * RATE / 1000)
    echo = np.zeros(total)
    echo[start + delay : start + delay + len(played)] = played * 10 ** (level_db / 20)
    mic = echo.copy()
    if noise_dbfs is not None:
        mic += np.random.default_rng(seed).normal(0.0, 32768 * 10 ** (noise_dbfs / 20), total)
    if user is not None:
        mic[user_start : user_start + len(user)] += user
    if said_before is not None:
        mic[lead : lead + len(said_before)] += said_before
    mic16 = np.clip(np.round(mic), -32768, 32767).astype(np.int16)

    chunks, offset, size = [], 0, int(0.04 * RATE)
    while offset < stop:
        chunks.append((offset, reply[offset : min(offset + size, stop)].tobytes()))
        offset, size = offset + size, int(0.1 * RATE)
    canceller = EchoCanceller(RATE) if cancel_echo else None
    out: list[bytes] = []
    position, frame, taken, stopped, cpu, decided = 0, 0, 0, False, 0.0, None
    while position < total:
        # The caller takes the next chunks once they are due within the playout lead (the first when playback starts).
        while taken < len(chunks) and position >= start + chunks[taken][0] - (PLAYOUT_LEAD_S * RATE if taken else 0):
            if canceller is not None:
                canceller.render(chunks[taken][1])
            taken += 1
        if canceller is not None and not stopped and user is not None and position >= start + stop:
            canceller.stop_render()  # the barge-in cut the reply; the caller flushed its playback
            stopped = True
        n = RATE * MIC_FRAMES_MS[frame % len(MIC_FRAMES_MS)] // 1000
        frame += 1
        pcm = mic16[position : position + n].tobytes()
        position += n
        if canceller is None:
            out.append(pcm)
            continue
        t0 = time.process_time()
        out.append(canceller.process(pcm))
        cpu += time.process_time() - t0
        if decided is None and canceller.line.echo is not None:
            decided = (round((position - start) / RATE, 2), canceller.line.echo)
    if canceller is not None:
        canceller.close()
    cleaned = np.frombuffer(b"".join(out), dtype=np.int16)
    cleaned = np.concatenate([cleaned, np.zeros(total - len(cleaned), dtype=np.int16)])  # < 10 ms held back at the end
    return Line(
        mic=mic16,
        out=cleaned,
        echo=echo,
        user_start=user_start,
        user_end=user_start + (len(user) if user is not None else 0),
        reply_start=start,
        cpu_ms_per_s=cpu * 1000 / (total / RATE),
        decided=decided,
    )


def erle_db(line: Line) -> float:
    """Echo return loss enhancement over the whole echo: echo power in the mic / power left after the canceller."""
    active = np.abs(line.echo) > 0
    left = line.out[active].astype(np.float64)
    return float(10 * np.log10(np.sum(line.echo[active] ** 2) / max(np.sum(left**2), 1.0)))


def user_span(line: Line) -> slice:
    """The user's speech with 200 ms before and 300 ms after (what the strict listener gets)."""
    return slice(max(0, line.user_start - int(0.2 * RATE)), line.user_end + int(0.3 * RATE))


def main() -> None:
    import asyncio

    from tests.speech import listen, wer

    reply, users = asyncio.run(voices())
    user = users[USER]
    print(
        "| delay | level | ERLE dB | CPU ms/s | user WER, cut 0.5 s (AEC / none) | user WER, echo throughout "
        "| ERLE dB in a room |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for delay in DELAYS_MS:
        for level in LEVELS_DB:
            echo_only = call(reply, delay, level)
            cut = call(reply, delay, level, user=user)
            raw = call(reply, delay, level, user=user, cancel_echo=False)
            throughout = call(reply, delay, level, user=user, cut_s=None)
            in_a_room = call(reply, delay, level, room=True)
            w = [wer(USER, listen(x.out[user_span(x)].tobytes(), RATE)) for x in (cut, raw, throughout)]
            print(
                f"| {delay} ms | {level} dB | {erle_db(echo_only):.1f} | {echo_only.cpu_ms_per_s:.1f} "
                f"| {w[0]:.2f} / {w[1]:.2f} | {w[2]:.2f} | {erle_db(in_a_room):.1f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()

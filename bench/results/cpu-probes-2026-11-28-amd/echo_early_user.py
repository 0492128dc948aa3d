"""Speech over the reply on a line that carries no echo (digital silence, as the conversation tests' caller; and
-55 dBFS noise): by when the user starts, whether EchoLine decided the line (echo False: the caller's audio goes
through untouched) and how much the canceller changed the user's words (power of out - mic over the user's speech,
relative to the speech: -120 dB = untouched; around 0 dB or more = taken apart). The reply is cut ``cut`` s after
the user starts (a barge-in), as tests/echo_line.py does. Run from the repository root:
PYTHONPATH=. .venv/bin/python bench/results/cpu-probes-2026-11-28-amd/echo_early_user.py"""

import asyncio

import numpy as np

from services.conversation.echo import EchoCanceller
from tests.echo_line import MIC_FRAMES_MS, PLAYOUT_LEAD_S, RATE, voices

USER = "Stop. What is two plus two?"


def call(reply, user, user_at_s, cut_s, noise_dbfs):
    start = int(0.5 * RATE)
    user_start = start + int(user_at_s * RATE)
    stop = min(len(reply), user_start - start + int(cut_s * RATE))
    total = start + len(reply) + RATE
    mic = np.zeros(total)
    if noise_dbfs is not None:
        mic += np.random.default_rng(0).normal(0, 32768 * 10 ** (noise_dbfs / 20), total)
    mic[user_start : user_start + len(user)] += user
    mic16 = np.clip(np.round(mic), -32768, 32767).astype(np.int16)
    chunks, offset, size = [], 0, int(0.04 * RATE)
    while offset < stop:
        chunks.append((offset, reply[offset : min(offset + size, stop)].tobytes()))
        offset, size = offset + size, int(0.1 * RATE)
    canceller, out, position, frame, taken, stopped, decided = EchoCanceller(RATE), [], 0, 0, 0, False, None
    while position < total:
        while taken < len(chunks) and position >= start + chunks[taken][0] - (PLAYOUT_LEAD_S * RATE if taken else 0):
            canceller.render(chunks[taken][1])
            taken += 1
        if not stopped and position >= start + stop:
            canceller.stop_render()
            stopped = True
        n = RATE * MIC_FRAMES_MS[frame % len(MIC_FRAMES_MS)] // 1000
        frame += 1
        out.append(canceller.process(mic16[position : position + n].tobytes()))
        position += n
        if decided is None and canceller.line.echo is not None:
            decided = (round((position - start) / RATE, 2), canceller.line.echo)
    cleaned = np.frombuffer(b"".join(out), dtype=np.int16)
    span = slice(user_start, user_start + len(user))
    said, heard = mic16[span].astype(float), cleaned[span].astype(float)
    changed_db = 10 * np.log10(np.mean((heard - said) ** 2) / np.mean(said**2) + 1e-12)
    return changed_db, decided


async def main():
    reply, users = await voices((USER,))
    for noise in (None, -55.0):
        for at in (0.2, 0.3, 0.4, 0.5, 0.6, 0.9, 1.2):
            changed, decided = call(reply, users[USER], at, 0.5, noise)
            print(
                f"noise {'none (digital silence)' if noise is None else f'{noise:g} dBFS'}: user starts {at:.1f} s into"
                f" the reply (cut 0.5 s later): the user's words changed by {changed:6.1f} dB;"
                f" line decided {'never' if decided is None else f'at {decided[0]} s: echo {decided[1]}'}"
            )


asyncio.run(main())

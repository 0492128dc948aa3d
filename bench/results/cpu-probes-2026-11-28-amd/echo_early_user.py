"""Speech over the reply on a line that carries no echo (digital silence, as the conversation tests' caller; and
-55 dBFS noise): by when the user starts, whether EchoLine decided the line (echo False: the caller's audio goes
through untouched) and how much the canceller changed the user's words (power of out - mic over the user's speech,
relative to the speech: -120 dB = untouched; around 0 dB or more = taken apart). The reply is cut ``cut`` s after
the user starts (a barge-in): tests/echo_line.py's call with no echo on the line. Run from the repository root:
PYTHONPATH=. .venv/bin/python bench/results/cpu-probes-2026-11-28-amd/echo_early_user.py"""

import asyncio

import numpy as np

from tests.echo_line import call, voices

USER = "Stop. What is two plus two?"
NO_ECHO_DB = -150.0  # the echo's level: below one step of 16-bit audio, so the line carries none


async def main():
    reply, users = await voices((USER,))
    for noise in (None, -55.0):
        for at in (0.2, 0.3, 0.4, 0.5, 0.6, 0.9, 1.2):
            line = call(reply, 120, NO_ECHO_DB, user=users[USER], user_at_s=at, cut_s=0.5, noise_dbfs=noise)
            span = slice(line.user_start, line.user_end)
            said, heard = line.mic[span].astype(float), line.out[span].astype(float)
            changed = 10 * np.log10(np.mean((heard - said) ** 2) / np.mean(said**2) + 1e-12)
            decided = line.decided
            print(
                f"noise {'none (digital silence)' if noise is None else f'{noise:g} dBFS'}: user starts {at:.1f} s into"
                f" the reply (cut 0.5 s later): the user's words changed by {changed:6.1f} dB;"
                f" line decided {'never' if decided is None else f'at {decided[0]} s: echo {decided[1]}'}"
            )


asyncio.run(main())

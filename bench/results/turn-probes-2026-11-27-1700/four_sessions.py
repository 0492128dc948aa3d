"""The conversation bench's session rows (1 session, then 4 at once, 4 turns each), server speech end -> first reply
audio (README.md beside this file)."""

import os
import statistics

from bench import conversation as c


def summary(xs: list[float]) -> str:
    xs = sorted(xs)
    return f"p50 {1000 * statistics.median(xs):.0f} / p95 {1000 * xs[round(0.95 * (len(xs) - 1))]:.0f} ms (n={len(xs)})"


def main() -> None:
    with c.cpu_fleet() as (channel, _fleet):
        say = c._speaker(channel)
        for line in c.LINES:
            say(line)
        one = c._sessions(channel, say, 1, 4)
        four = c._sessions(channel, say, 4, 4)
    words = os.environ.get("VOICEFLEET_MOSS_STS__REPLY_FIRST_SEGMENT_WORDS", "default")
    print(f"words={words} 1 session: {summary(one)} 4 sessions: {summary(four)}", flush=True)


if __name__ == "__main__":
    main()

"""Medians of a trace's steps from the speech end to the first reply audio (README.md beside this file)."""

import statistics
import sys

STEPS = [
    "final decode starts",
    "final decode takes",
    "decode end -> brain request",
    "brain request -> first token",
    "first token -> first audio",
    "speech end -> first audio (server)",
]


def events(path: str) -> list[tuple[float, str, str]]:
    out = []
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split(" ", 4)
            out.append((float(parts[0]), parts[3], parts[4] if len(parts) > 4 else ""))
    return sorted(out)


def turn_steps(ev, t: float, speech_end: float):
    window = [(t2 - speech_end, w2) for t2, w2, _ in ev if speech_end - 0.3 <= t2 <= t + 0.005]

    def last(name, before=None):
        xs = [x for x, w in window if w == name and (before is None or x <= before)]
        return xs[-1] if xs else None

    def first_after(name, after):
        xs = [x for x, w in window if w == name and x >= after]
        return xs[0] if xs else None

    request = last("brain_req")
    if request is None:
        return None
    decoded = last("dec_end", request)
    started = last("dec_start", decoded) if decoded is not None else None
    token = first_after("delta", request)
    audio = t - speech_end
    took = decoded - started if started is not None else None
    return (started, took, request - decoded, token - request, audio - token, audio)


def main() -> None:
    ev = events(sys.argv[1])
    rows = [turn_steps(ev, t, float(rest.split()[0])) for t, what, rest in ev if what == "first_audio"]
    rows = [r for r in rows if r is not None]
    for i, name in enumerate(STEPS):
        v = [r[i] for r in rows if r[i] is not None]
        print(
            f"{name:34s} median {1000 * statistics.median(v):4.0f} ms"
            f"  range {1000 * min(v):.0f}-{1000 * max(v):.0f} (n={len(v)})"
        )


if __name__ == "__main__":
    main()

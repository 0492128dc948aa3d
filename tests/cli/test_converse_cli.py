"""`voicefleet converse` refuses a bad argument before it calls anyone, naming the flag (the conversation itself:
tests/fleet/test_conversation_fleet.py::test_cli_converse_and_speak_realtime)."""

import subprocess
import sys

import pytest


@pytest.mark.parametrize("tokens", ["0", "-3", str(2**32)])
def test_a_reply_length_that_is_not_a_positive_token_count_is_refused_naming_the_flag(tmp_path, tokens):
    result = subprocess.run(
        [sys.executable, "-m", "services.cli.main", "--router", "127.0.0.1:1", "converse", "turn.wav"]
        + ["--max-tokens", tokens],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert f"--max-tokens must be a positive number of tokens, not {tokens}" in result.stderr, result.stderr

"""Tools in a conversation: the caller's function declarations, checked once, and the arguments a reply model wrote,
checked against them before a call is emitted (docs/conversation.md#tools).

A declaration is OpenAI's function tool: a name, a description the reply model reads, and its parameters as a JSON
Schema. The schema is checked against its own metaschema (the draft it names, else 2020-12) when the session starts,
so a caller learns of a bad schema from INVALID_ARGUMENT naming the field, not from a call that never validates.
"""

from __future__ import annotations

import json
import re

from jsonschema import exceptions as schema_errors
from jsonschema import validators

from services.common.engines import TOOL_AUTO, TOOL_FUNCTION, TOOL_NONE, TOOL_REQUIRED, Tool, ToolChoice
from services.common.errors import FailedPrecondition, InvalidArgument, VoiceError

NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # OpenAI's rule for function names
MAX_TOOLS = 32
MAX_DESCRIPTION_CHARS = 1024
MAX_PARAMETERS_CHARS = 16_384
MAX_OUTPUT_CHARS = 16_384  # a FunctionCallOutput's output: the reply model reads it, within its context
NO_ARGUMENTS = {"type": "object", "properties": {}}
# How an engine without function calling (MOSS-Speech) refuses a session with tools. The router reads the words
# (they cross gRPC as the status message) to serve such a session with its own cascade instead
# (router.routes.conversation_tools).
CALLS_NO_TOOLS = "config.tools: this engine calls no tools"


def calls_no_tools(why: str) -> FailedPrecondition:
    """An engine's refusal of a session with tools; ``why`` names the engine and what would serve it."""
    return FailedPrecondition(f"{CALLS_NO_TOOLS} ({why})")


def refuses_tools(error: BaseException) -> bool:
    """``error`` is an engine's refusal of the session's tools (``calls_no_tools``), here or from a backend."""
    return (
        isinstance(error, VoiceError)
        and error.code == FailedPrecondition.code
        and error.message.startswith(CALLS_NO_TOOLS)
    )


def tool(name: str, description: str, parameters_json: str, where: str) -> Tool:
    """One declaration, checked; ``where`` is its field path (config.tools[2]) for the error."""
    if not NAME.match(name):
        raise InvalidArgument(f"{where}.name", f"{name!r} must be 1-64 of a-z, A-Z, 0-9, _ and -")
    if len(description) > MAX_DESCRIPTION_CHARS:
        raise InvalidArgument(f"{where}.description", f"{len(description)} characters; at most {MAX_DESCRIPTION_CHARS}")
    field = f"{where}.parameters_json"
    if len(parameters_json) > MAX_PARAMETERS_CHARS:
        raise InvalidArgument(field, f"{len(parameters_json)} characters; at most {MAX_PARAMETERS_CHARS}")
    if not parameters_json.strip():
        return Tool(name, description, dict(NO_ARGUMENTS), "")
    try:
        schema = json.loads(parameters_json)
    except ValueError as e:
        raise InvalidArgument(field, f"is not JSON: {e}") from None
    if not isinstance(schema, dict) or schema.get("type") != "object":
        raise InvalidArgument(field, 'must be a JSON Schema of an object ({"type": "object", "properties": ...})')
    try:
        validators.validator_for(schema, default=validators.Draft202012Validator).check_schema(schema)
    except schema_errors.SchemaError as e:
        at = "/".join(str(p) for p in e.path) or "the top level"
        raise InvalidArgument(field, f"is not a valid JSON Schema at {at}: {e.message}") from None
    return Tool(name, description, schema, parameters_json)


def declared(tools: list[Tool], choice: ToolChoice, where: str = "config") -> tuple[tuple[Tool, ...], ToolChoice]:
    """The session's tools and choice, checked together."""
    if len(tools) > MAX_TOOLS:
        raise InvalidArgument(f"{where}.tools", f"{len(tools)} tools; at most {MAX_TOOLS}")
    names = [t.name for t in tools]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise InvalidArgument(f"{where}.tools[{i}].name", f"{name!r} is declared twice")
    if choice.mode in (TOOL_REQUIRED, TOOL_FUNCTION) and not tools:
        raise InvalidArgument(f"{where}.tool_choice.mode", f"{choice.mode} needs tools; the session declares none")
    if choice.mode == TOOL_FUNCTION and choice.function not in names:
        raise InvalidArgument(
            f"{where}.tool_choice.function_name", f"{choice.function!r} is not a declared tool ({', '.join(names)})"
        )
    if choice.mode not in (TOOL_AUTO, TOOL_NONE, TOOL_REQUIRED, TOOL_FUNCTION):
        raise InvalidArgument(f"{where}.tool_choice.mode", f"{choice.mode!r} is not a tool choice")
    return tuple(tools), choice


def arguments_problem(tool_: Tool, arguments: str) -> str:
    """Why ``arguments`` (JSON text) do not fit the tool's parameters; "" when they do."""
    try:
        value = json.loads(arguments or "{}")
    except ValueError as e:
        return f"not JSON ({e})"
    if not isinstance(value, dict):
        return "not a JSON object"
    validator = validators.validator_for(tool_.parameters, default=validators.Draft202012Validator)(tool_.parameters)
    error = schema_errors.best_match(validator.iter_errors(value))
    if error is None:
        return ""
    at = "/".join(str(p) for p in error.path)
    return f"{at + ': ' if at else ''}{error.message}"


MAX_HINTS = 50


def recognizer_hints(tools: tuple[Tool, ...]) -> tuple[str, ...]:
    """The words a caller may say as a tool's argument, for the recognizer (phrase hints: whisper's prompt): the
    string values of every ``enum`` and ``examples`` in the tools' parameters, in order, at most MAX_HINTS. Spoken
    arguments are the words a small recognizer gets wrong ("What is the weather like in Paris today?" heard as
    "... in pairs today?" by tiny.en, 2 of 2 fleet runs; heard right with the city among the hints, 2026-11-29)."""
    hints: list[str] = []

    def walk(schema) -> None:
        if isinstance(schema, dict):
            for key in ("enum", "examples"):
                for value in schema.get(key) or []:
                    if isinstance(value, str) and value.strip() and len(value) <= 64 and value not in hints:
                        hints.append(value)
            for value in schema.values():
                walk(value)
        elif isinstance(schema, list):
            for value in schema:
                walk(value)

    for t in tools:
        walk(t.parameters)
    return tuple(hints[:MAX_HINTS])


def openai_tools(tools: tuple[Tool, ...]) -> list[dict]:
    """The declarations as OpenAI chat tools (the brain's chat API)."""
    return [
        {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}
        for t in tools
    ]


def openai_tool_choice(choice: ToolChoice):
    if choice.mode == TOOL_FUNCTION:
        return {"type": "function", "function": {"name": choice.function}}
    return choice.mode

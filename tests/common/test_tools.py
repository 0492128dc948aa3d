"""A conversation's tool declarations, checked once (services/common/tools.py): a bad one is INVALID_ARGUMENT naming
its field; arguments are checked against the declared schema."""

from __future__ import annotations

import json

import pytest

from services.common import tools
from services.common.engines import TOOL_AUTO, TOOL_FUNCTION, TOOL_REQUIRED, ToolChoice
from services.common.errors import InvalidArgument

CITY = json.dumps({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})


def problem(*args) -> str:
    with pytest.raises(InvalidArgument) as info:
        tools.tool(*args)
    return info.value.message


def test_a_declaration_is_checked_field_by_field():
    weather = tools.tool("get_weather", "Get the weather.", CITY, "config.tools[0]")
    assert weather.parameters["required"] == ["city"] and weather.parameters_json == CITY
    assert tools.tool("ping", "", "", "config.tools[1]").parameters == tools.NO_ARGUMENTS
    assert problem("get weather", "", "", "config.tools[0]").startswith("config.tools[0].name:")
    assert problem("f", "", "{city}", "config.tools[2]").startswith("config.tools[2].parameters_json: is not JSON")
    assert "must be a JSON Schema of an object" in problem("f", "", '{"type": "string"}', "config.tools[0]")
    bad = json.dumps({"type": "object", "properties": {"city": {"type": "town"}}})
    message = problem("f", "", bad, "config.tools[0]")
    assert message.startswith("config.tools[0].parameters_json: is not a valid JSON Schema at properties/city/type")
    assert "description" in problem("f", "x" * 2000, "", "config.tools[0]")


def test_the_choice_must_name_a_declared_tool_and_needs_tools():
    weather = tools.tool("get_weather", "", CITY, "config.tools[0]")
    assert tools.declared([weather], ToolChoice(TOOL_FUNCTION, "get_weather"))[1].function == "get_weather"
    for declared, choice, field in (
        ([weather], ToolChoice(TOOL_FUNCTION, "get_time"), "config.tool_choice.function_name"),
        ([], ToolChoice(TOOL_REQUIRED), "config.tool_choice.mode"),
        ([weather, weather], ToolChoice(TOOL_AUTO), "config.tools[1].name"),
    ):
        with pytest.raises(InvalidArgument) as info:
            tools.declared(declared, choice)
        assert info.value.field == field


def test_arguments_are_checked_against_the_schema():
    weather = tools.tool("get_weather", "", CITY, "config.tools[0]")
    assert tools.arguments_problem(weather, '{"city": "Paris"}') == ""
    assert "'city' is a required property" in tools.arguments_problem(weather, "{}")
    assert tools.arguments_problem(weather, '{"city": 5}').startswith("city: 5 is not of type 'string'")
    assert tools.arguments_problem(weather, "[1]") == "not a JSON object"
    assert tools.arguments_problem(weather, "{city").startswith("not JSON")


def test_the_recognizer_is_told_the_values_a_tool_knows():
    schema = {
        "type": "object",
        "properties": {
            "city": {"type": "string", "examples": ["Paris", "London"]},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer", "examples": [1, 3]},
        },
    }
    weather = tools.tool("get_weather", "", json.dumps(schema), "config.tools[0]")
    other = tools.tool("set_unit", "", json.dumps({"type": "object", "properties": {"u": {"enum": ["celsius"]}}}), "x")
    assert tools.recognizer_hints((weather, other)) == ("Paris", "London", "celsius", "fahrenheit")
    assert tools.recognizer_hints(()) == ()


def test_every_session_that_wraps_another_passes_function_outputs_on():
    """StsSession.function_call_output's default refuses (an engine that makes no calls); a session that wraps another
    (the router's failover, the residency's hold, the router's client of moss_sts) must pass the output on, or a
    call made by the inner session could never be answered."""
    from services.common.engines import StsSession
    from services.remote.sts import RemoteStsSession
    from services.residency.resident_engines import _ResidentStsSession
    from services.router.failover_sts import FailoverStsSession

    for wrapper in (FailoverStsSession, _ResidentStsSession, RemoteStsSession):
        assert wrapper.function_call_output is not StsSession.function_call_output, wrapper.__name__

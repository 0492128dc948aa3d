"""Fleet configuration: one YAML file plus environment overrides, validated at start (pydantic-settings).

Every service reads the same file (default: ``services/common/default_config.yaml``; ``--config PATH`` or
``VOICEFLEET_CONFIG`` picks another) and takes its own section. Any field can be overridden from the environment:
``VOICEFLEET_<SECTION>__<FIELD>[__<KEY>]``, e.g. ``VOICEFLEET_ROUTER__PORT=6000`` or
``VOICEFLEET_ROUTER__BACKENDS__COSYVOICE_TTS=10.0.0.5:50052``. A bad value stops the process at start with a
message naming the field (``router.port: must be 1..65535, got 70000``).

Each section has its module in this package (``services/common/config/<section>.py``, a pydantic model built from
base.py), at the bottom with the shared runtime: services import their section, no section imports a service.
This module composes them into ``Config``, reads the file and the environment (its two settings sources) and turns
pydantic's errors into messages that name the field. The JSON Schema of the file is what ``Config`` generates
(``config_schema()``; published as docs/config.schema.json by ``make config-schema``).
"""

from __future__ import annotations

import inspect
import os
import typing
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, Field, ValidationError, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict, YamlConfigSettingsSource

from services.common.config.asr import AsrServiceConfig
from services.common.config.base import MODEL_SERVICES, ConfigError, FieldValueError, Says
from services.common.config.brain import BrainConfig
from services.common.config.cosyvoice_tts import CosyVoiceTtsConfig
from services.common.config.fleet import FleetConfig
from services.common.config.gateway import GatewayConfig
from services.common.config.moss_sts import MossStsConfig
from services.common.config.qwen_tts import QwenTtsConfig
from services.common.config.residency import ResidencyConfig
from services.common.config.router import LeaseAuthorityConfig, RouterConfig
from services.common.config.security import SecurityConfig

ENV_PREFIX = "VOICEFLEET_"
# VOICEFLEET_* variables that are not config fields: the config file's path, and the pid of the `voicefleet up` that
# started this member (services/common/server.py die_with_supervisor).
NOT_FIELDS = ("VOICEFLEET_CONFIG", "VOICEFLEET_SUPERVISOR_PID")
DEFAULT_CONFIG_PATH = Path(__file__).parents[1] / "default_config.yaml"

# The file and the environment the next Config() reads (load_config sets them; plain Config(): the default file).
_SOURCES: ContextVar[tuple[Path, typing.Mapping[str, str]]] = ContextVar("config_sources")


class EnvSource(PydanticBaseSettingsSource):
    """``<env_prefix><SECTION><delimiter><FIELD>...`` variables as nested fields. Each value is read as YAML, as in
    the file ("6001" a number, "true" a boolean, "[a, b]" or "a,b" a list; empty stays empty). Unlike
    pydantic-settings' EnvSettingsSource, a variable naming no field is an error (through the sections'
    extra="forbid"), not ignored: a typo in a deployment's environment must not fall back to a default."""

    def __init__(self, settings_cls: type[BaseSettings], env: typing.Mapping[str, str]):
        super().__init__(settings_cls)
        self.env = env

    def get_field_value(self, field, field_name):  # required by the base class; __call__ reads all variables at once
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        prefix, delimiter = self.config["env_prefix"], self.config["env_nested_delimiter"]
        raw: dict[str, Any] = {}
        for key, value in self.env.items():
            if not key.startswith(prefix) or key in NOT_FIELDS:
                continue
            parts = [p.lower() for p in key[len(prefix) :].split(delimiter)]
            node = raw
            for part in parts[:-1]:
                node = node.setdefault(part, {})
                if not isinstance(node, dict):
                    raise ConfigError(f"{key}: {'.'.join(parts)} does not name a config field")
            try:
                node[parts[-1]] = yaml.safe_load(value) if value != "" else ""
            except yaml.YAMLError as e:
                raise ConfigError(f"{key}: not a valid value: {e}") from None
        return raw


class YamlFileSource(YamlConfigSettingsSource):
    """The config file; its errors say which file and what is wrong with it."""

    def _read_file(self, file_path: Path) -> dict[str, Any]:
        try:
            raw = super()._read_file(file_path)
        except yaml.YAMLError as e:
            raise ConfigError(f"config file {file_path} is not valid YAML: {e}") from None
        if not isinstance(raw, dict):
            raise ConfigError(f"config file {file_path}: top level must be a mapping of sections")
        return raw


class Config(BaseSettings):
    """voicefleet's configuration: one section per fleet member plus the fleet-wide ones (docs/configuration.md)."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_nested_delimiter="__", extra="forbid", coerce_numbers_to_str=True
    )

    fleet: FleetConfig = Field(default_factory=FleetConfig)
    router: RouterConfig = Field(default_factory=RouterConfig)
    cosyvoice_tts: CosyVoiceTtsConfig = Field(default_factory=CosyVoiceTtsConfig)
    qwen_tts: QwenTtsConfig = Field(default_factory=QwenTtsConfig)
    asr: AsrServiceConfig = Field(default_factory=AsrServiceConfig)
    moss_sts: MossStsConfig = Field(default_factory=MossStsConfig)
    brain: BrainConfig = Field(default_factory=BrainConfig)
    gateway: GatewayConfig = Field(default_factory=GatewayConfig)
    lease_authority: LeaseAuthorityConfig = Field(default_factory=LeaseAuthorityConfig)
    residency: ResidencyConfig = Field(default_factory=ResidencyConfig)
    security: SecurityConfig = Field(default_factory=SecurityConfig)

    @classmethod
    def settings_customise_sources(
        cls, settings_cls, init_settings, env_settings, dotenv_settings, file_secret_settings
    ):
        # Precedence: arguments, then the environment, then the file; no .env or secrets directory.
        path, env = _SOURCES.get((DEFAULT_CONFIG_PATH, os.environ))
        return init_settings, EnvSource(settings_cls, env), YamlFileSource(settings_cls, yaml_file=path)

    @model_validator(mode="after")
    def _default_backends(self):
        # Backends left unset: the model services this fleet starts, at their sections' addresses.
        if not self.router.backends:
            self.router.backends = {
                name: getattr(self, name).address for name in self.fleet.services if name in MODEL_SERVICES
            }
        return self

    @model_validator(mode="after")
    def _moss_listens_where_it_fits(self):
        # MOSS on the card with its listener in the asr service: a conversation needs both leases at once. Where the
        # two do not fit together the asr service could never load while MOSS holds the card, and every turn would
        # wait for it: refuse at start, naming the setting that avoids it (docs/conversation.md).
        leases, holders = self.router.leases, self.residency.services
        if (
            self.moss_sts.engine == "gpu"
            and self.moss_sts.asr == "remote"
            and self.asr.engine == "gpu"
            and leases.capacity_gb > 0
            and "moss_sts" in holders
            and "asr" in holders
        ):
            need = holders["moss_sts"].declared_gb + holders["asr"].declared_gb
            room = leases.capacity_gb - leases.reserve_gb
            if need > room:
                raise FieldValueError(
                    "moss_sts.asr",
                    f"'remote' needs moss_sts's and asr's leases on the card at once ({need:g} GiB:"
                    f" residency.services.moss_sts.declared_gb {holders['moss_sts'].declared_gb:g} + asr"
                    f" {holders['asr'].declared_gb:g}) but the card grants {room:g} GiB (router.leases.capacity_gb"
                    f" {leases.capacity_gb:g} - reserve_gb {leases.reserve_gb:g}); set moss_sts.asr: local (moss_sts"
                    " listens with its own engines, inside its lease)",
                )
        return self


def load_config(path: str | os.PathLike | None = None, env: typing.Mapping[str, str] | None = None) -> Config:
    """Read the file, apply env overrides, validate. Raises ConfigError naming the bad field."""
    env = os.environ if env is None else env
    path = Path(path or env.get("VOICEFLEET_CONFIG") or DEFAULT_CONFIG_PATH)
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    token = _SOURCES.set((path, env))
    try:
        return Config()
    except ValidationError as e:
        raise ConfigError(explain(e)) from None
    finally:
        _SOURCES.reset(token)


def config_schema() -> dict[str, Any]:
    """The JSON Schema of the config file (what editors check and complete YAML with). Each field's description is
    the comment above it in its section's module, so an editor shows on hover what the code's reader sees."""
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", **Config.model_json_schema()}
    for model in _models(Config):
        properties = schema["$defs"].get(model.__name__, {}).get("properties", {})
        for name, comment in _field_comments(model).items():
            if name in properties:
                properties[name].setdefault("description", comment)
    return schema


def _models(model: type[BaseModel]) -> set[type[BaseModel]]:
    """``model``'s section models, at any depth (what its schema's $defs are)."""
    found: set[type[BaseModel]] = set()
    todo = [f.annotation for f in model.model_fields.values()]
    while todo:
        tp = todo.pop()
        if isinstance(tp, type) and issubclass(tp, BaseModel) and tp not in found:
            found.add(tp)
            todo += [f.annotation for f in tp.model_fields.values()]
        todo += typing.get_args(tp)
    return found


def _field_comments(model: type[BaseModel]) -> dict[str, str]:
    """Field name -> the comment lines right above its declaration, in ``model`` and the classes it extends."""
    comments: dict[str, str] = {}
    for cls in reversed([c for c in model.__mro__ if issubclass(c, BaseModel) and c is not BaseModel]):
        try:
            source = inspect.getsource(cls)
        except OSError:  # a model made by create_model (the endpointing sections): its fields carry descriptions
            continue
        block: list[str] = []
        for line in source.splitlines()[1:]:
            text = line.strip()
            if text.startswith("#"):
                block.append(text.lstrip("#").strip())
                continue
            name = text.split(":", 1)[0]
            if block and name.isidentifier() and name in cls.model_fields and line.startswith("    " + name):
                comments[name] = " ".join(block)
            block = []
    return comments


# --- pydantic's errors, told the way the config names things: "router.port: must be 1..65535, got 70000" --------
_TYPE_MESSAGES = {
    "int_parsing": "must be a number",
    "int_type": "must be a number",
    "float_parsing": "must be a number",
    "float_type": "must be a number",
    "int_from_float": "must be a whole number",
    "bool_parsing": "must be true or false",
    "bool_type": "must be true or false",
    "string_type": "must be a string",
    "list_type": "must be a list",
}
_MAPPING_TYPES = ("model_type", "model_attributes_type", "dict_type")


def explain(error: ValidationError) -> str:
    """One line per bad field, each naming it."""
    return "; ".join(_explain_one(e) for e in error.errors(include_url=False))


def _explain_one(e: dict[str, Any]) -> str:
    loc = list(e["loc"])
    cause = (e.get("ctx") or {}).get("error")
    if isinstance(cause, FieldValueError):
        loc.append(cause.field)
    kind, value = e["type"], e.get("input")
    if kind == "value_error" and cause is not None:
        message = str(cause)
    elif kind == "extra_forbidden":
        owner = _type_at(loc[:-1])
        known = sorted(owner.model_fields) if isinstance(owner, type) and issubclass(owner, BaseModel) else []
        message = f"unknown field; known fields: {', '.join(known)}"
    elif kind in _TYPE_MESSAGES:
        message = f"{_TYPE_MESSAGES[kind]}, got {value!r}"
    elif kind in _MAPPING_TYPES:
        message = f"must be a mapping, got {type(value).__name__}"
    else:
        message = f"{_bounds_message(loc, e)}, got {value!r}"
    return f"{_path(loc) or 'config'}: {message}"


def _path(loc: list) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else (f".{p}" if i else str(p)) for i, p in enumerate(loc))


def _type_at(loc: list) -> Any:
    """The type the config has at ``loc`` (a section model, or what a dict or list holds)."""
    tp: Any = Config
    for part in loc:
        if isinstance(tp, type) and issubclass(tp, BaseModel) and part in tp.model_fields:
            tp = tp.model_fields[part].annotation
        elif typing.get_origin(tp) in (dict, list):
            tp = typing.get_args(tp)[-1]
        else:
            return None
    return tp


def _bounds_message(loc: list, e: dict[str, Any]) -> str:
    """What the field says about its values (Says), else its bounds ('must be 1..65535', 'must be > 0')."""
    at = max((i for i, p in enumerate(loc) if isinstance(p, str)), default=None)  # the field (not a list index)
    owner = _type_at(loc[:at]) if at is not None else None
    info = owner.model_fields.get(loc[at]) if isinstance(owner, type) and issubclass(owner, BaseModel) else None
    metadata = info.metadata if info is not None else []
    says = next((m.text for m in metadata if isinstance(m, Says)), None)
    if says:
        return says
    if e["type"] == "literal_error":
        return f"must be {e['ctx']['expected']}"
    bounds = {k: getattr(m, k) for m in metadata for k in ("ge", "gt", "le", "lt") if hasattr(m, k)}
    if "ge" in bounds and "le" in bounds:
        return f"must be {bounds['ge']}..{bounds['le']}"
    parts = [f">= {bounds['ge']}" if "ge" in bounds else "", f"> {bounds['gt']}" if "gt" in bounds else ""]
    parts += [f"<= {bounds['le']}" if "le" in bounds else "", f"< {bounds['lt']}" if "lt" in bounds else ""]
    said = " and ".join(p for p in parts if p)
    return f"must be {said}" if said else e["msg"]

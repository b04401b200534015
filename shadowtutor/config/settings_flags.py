"""One way for every process to be configured: a pydantic-settings model, its settings as flags.

Each setting ``name`` of a settings model (``ServerSettings``, ``EdgeSettings``) reads the
environment variable ``SHADOWTUTOR_NAME`` and is the flag ``--name`` (dashes for underscores)
of its command; a flag given wins over the variable, which wins over the default. ``--help``
names each flag's variable and default, read from the model; ``--version`` prints the package's
version.

A setting is a field of the model, or a field of a *nested* model: a field of a
:class:`FlatSettings` model whose type is a plain pydantic model (``ServerSettings.algorithm``,
an :class:`~shadowtutor.algorithms.params.AlgorithmParams`). A nested model's fields are
settings of their own, flat: named after the field, or after its ``json_schema_extra["setting"]``
(``AlgorithmParams.mode`` is ``--distill-mode`` / ``SHADOWTUTOR_DISTILL_MODE``), so that the
nested model stays the one declaration of its defaults, descriptions and checks.
Imports neither torch nor the models, so that the CLI stays quick.
"""

from __future__ import annotations

import argparse
import functools
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from pydantic import BaseModel, ValidationError, model_validator
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from shadowtutor.config.errors import error_text

ENV_PREFIX = "SHADOWTUTOR_"
# json_schema_extra key of a nested field: the flat setting's name, if not the field's
SETTING_KEY = "setting"
_TRUE = "true"


def package_version() -> str:
    """The installed ``shadowtutor`` distribution's version (``unknown`` when run from a bare
    checkout)."""
    try:
        return version("shadowtutor")
    except PackageNotFoundError:
        return "unknown"


def env_var(name: str) -> str:
    return ENV_PREFIX + name.upper()


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


@dataclass(frozen=True)
class Setting:
    """One setting of a settings model: its flat ``name`` and the ``field`` at ``path`` in the model
    (``("port",)``, or ``("algorithm", "mode")`` for a field of a nested model)."""

    name: str
    field: FieldInfo
    path: tuple[str, ...]


def nested_model(field: FieldInfo) -> type[BaseModel] | None:
    """The plain pydantic model a field holds (its fields are flat settings), or None."""
    annotation = field.annotation
    if (
        isinstance(annotation, type)
        and issubclass(annotation, BaseModel)
        and not issubclass(annotation, BaseSettings)
    ):
        return annotation
    return None


def setting_name(name: str, field: FieldInfo) -> str:
    """The flat name of a nested model's field ``name``: its ``json_schema_extra["setting"]``, else
    ``name``."""
    extra = field.json_schema_extra
    renamed = extra.get(SETTING_KEY) if isinstance(extra, dict) else None
    return renamed if isinstance(renamed, str) else name


@functools.cache
def settings_of(model: type[BaseModel]) -> tuple[Setting, ...]:
    """Every setting of ``model`` in declaration order, nested models' fields in place of the nested
    field.

    TypeError when two settings have the same name (a flag or a variable would mean two things).
    """
    found: list[Setting] = []
    for name, field in model.model_fields.items():
        inner = nested_model(field)
        if inner is None:
            found.append(Setting(name, field, (name,)))
        else:
            found.extend(
                Setting(setting_name(sub, f), f, (name, sub))
                for sub, f in inner.model_fields.items()
            )
    names = [setting.name for setting in found]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise TypeError(f"{model.__name__}: settings named twice: {twice}")
    return tuple(found)


def _nested_settings(model: type[BaseModel]) -> tuple[Setting, ...]:
    return tuple(setting for setting in settings_of(model) if len(setting.path) == 2)


def flat_values(settings: BaseModel) -> dict[str, Any]:
    """Every setting of ``settings`` by its flat name, JSON-ready (what its flags and variables
    would give)."""
    dumped = settings.model_dump(mode="json")
    values: dict[str, Any] = {}
    for setting in settings_of(type(settings)):
        value: Any = dumped
        for part in setting.path:
            value = value[part]
        values[setting.name] = value
    return values


def nest_flat_values(model: type[BaseModel], values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` with each nested setting given by its flat name moved into its nested model's
    values.

    A flat value wins over the same field in a nested dict or model given alongside; empty text is
    unset (the nested model's default).
    """
    out = dict(values)
    for setting in _nested_settings(model):
        if setting.name not in out:
            continue
        value = out.pop(setting.name)
        if isinstance(value, str) and not value.strip():
            continue
        parent, field = setting.path
        inner = out.get(parent)
        inner = (
            inner.model_dump(exclude_unset=True)
            if isinstance(inner, BaseModel)
            else dict(inner or {})
        )
        out[parent] = {**inner, field: value}
    return out


class NestedEnvSource(PydanticBaseSettingsSource):
    """The ``SHADOWTUTOR_<NAME>`` variables of a model's nested settings, as nested values
    (case-insensitive; an empty variable is unset). Ranked below the explicit values, so that those
    win field by field."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        # unused: __call__ reads every nested setting at once
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        environ = {key.upper(): value for key, value in os.environ.items()}
        values: dict[str, Any] = {}
        for setting in _nested_settings(self.settings_cls):
            text = environ.get(env_var(setting.name), "")
            if text.strip():
                values.setdefault(setting.path[0], {})[setting.path[1]] = text
        return values


class FlatSettings(BaseSettings):
    """A settings model whose nested models' fields are flat settings (flags, variables, keywords).

    ``Model(threshold=0.7)`` sets ``Model().algorithm.threshold`` when ``algorithm`` is a nested
    model with a ``threshold`` field; so does ``SHADOWTUTOR_THRESHOLD=0.7``. A nested model may also
    be given whole (``algorithm=AlgorithmParams(...)`` or a dict, as ``model_dump`` writes it).
    """

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid", validate_default=True)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (
            init_settings,
            env_settings,
            NestedEnvSource(settings_cls),
            dotenv_settings,
            file_secret_settings,
        )

    @model_validator(mode="before")
    @classmethod
    def _nest_flat_values(cls, data: Any) -> Any:
        return nest_flat_values(cls, data) if isinstance(data, Mapping) else data


def default_text(field: FieldInfo) -> str:
    """How ``--help`` shows a field's default: ``required``, nothing for "unset", or ``default
    VALUE``."""
    if field.is_required():
        return "; required"
    default = field.get_default(call_default_factory=True)
    if default is None or default == {}:
        return ""
    if isinstance(default, tuple | list):
        default = ",".join(str(item) for item in default)
    return f"; default {default}"


def add_settings_flags(
    parser: argparse.ArgumentParser, settings_cls: type[BaseSettings], dest_prefix: str
) -> None:
    """One flag per setting of ``settings_cls`` (dest ``dest_prefix + name``, absent unless given),
    and ``--version``.

    A boolean setting ``x`` is ``--x`` (true), ``--x VALUE`` (any boolean text) and ``--no-x``
    (false).
    """
    parser.add_argument("--version", action="version", version=f"shadowtutor {package_version()}")
    for setting in settings_of(settings_cls):
        name, field = setting.name, setting.field
        text = f"{field.description} [env {env_var(name)}{default_text(field)}]"
        dest = dest_prefix + name
        if field.annotation in (bool, bool | None):
            parser.add_argument(
                flag(name),
                dest=dest,
                default=argparse.SUPPRESS,
                nargs="?",
                const=_TRUE,
                metavar="BOOL",
                help=text,
            )
            parser.add_argument(
                "--no-" + name.replace("_", "-"),
                dest=dest,
                default=argparse.SUPPRESS,
                action="store_const",
                const="false",
                help=f"same as {flag(name)} false",
            )
        else:
            parser.add_argument(
                flag(name), dest=dest, default=argparse.SUPPRESS, metavar=name.upper(), help=text
            )


def given_flags(args: argparse.Namespace, dest_prefix: str) -> dict[str, Any]:
    """The settings given as flags, by setting name."""
    return {
        key[len(dest_prefix) :]: value
        for key, value in vars(args).items()
        if key.startswith(dest_prefix)
    }


def describe_validation_error(
    exc: ValidationError, given: Iterable[str], settings_cls: type[BaseModel] | None = None
) -> str:
    """One line per problem, each naming where the bad value came from (the flag, else the
    variable).

    Defaults are valid, so a setting that was not given came from its environment variable. With
    ``settings_cls``, an error in a nested model names its flat setting.
    """
    given = set(given)
    names = (
        {setting.path: setting.name for setting in settings_of(settings_cls)}
        if settings_cls
        else {}
    )
    lines = []
    for error in exc.errors(include_url=False):
        name = _setting_at(error, names)
        message = error_text(error)
        if error["type"] == "missing":
            message = f"{name} is required: pass {flag(name)} or set {env_var(name)}"
        elif name:
            message = f"{flag(name) if name in given else env_var(name)}: {message}"
        lines.append(message)
    return "; ".join(lines)


def _setting_at(error: ErrorDetails, names: Mapping[tuple[str, ...], str]) -> str:
    """The setting an error is located at ("" for one across a model's fields)."""
    loc = tuple(str(part) for part in error["loc"])
    if not names:
        return loc[0] if loc else ""
    return names.get(loc[:2], "") or names.get(loc[:1], "")


def build_settings(settings_cls: type[BaseSettings], given: Mapping[str, Any]) -> Any:
    """``settings_cls`` from the given flags over ``SHADOWTUTOR_*`` variables over defaults.

    A bad value raises a ValueError whose text says what is wrong and where it came from.
    """
    try:
        return settings_cls(**given)
    except ValidationError as exc:
        raise ValueError(describe_validation_error(exc, given, settings_cls)) from None

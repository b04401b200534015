"""One way for every process to be configured: a pydantic-settings model, its fields as flags.

Each field ``name`` of a settings model (``ServerSettings``, ``EdgeSettings``) reads the
environment variable ``SHADOWTUTOR_NAME`` (pydantic-settings) and is the flag ``--name``
(dashes for underscores) of its command; a flag given wins over the variable, which wins
over the default. ``--help`` names each flag's variable and default; ``--version`` prints
the package's version. Imports neither torch nor the models, so that the CLI stays quick.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from pydantic import ValidationError
from pydantic_settings import BaseSettings

ENV_PREFIX = "SHADOWTUTOR_"
_TRUE = "true"


def package_version() -> str:
    """The installed ``shadowtutor`` distribution's version (``unknown`` when run from a bare checkout)."""
    try:
        return version("shadowtutor")
    except PackageNotFoundError:
        return "unknown"


def env_var(name: str) -> str:
    return ENV_PREFIX + name.upper()


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def default_text(field: Any) -> str:
    """How ``--help`` shows a field's default: ``required``, nothing for "unset", or ``default VALUE``."""
    if field.is_required():
        return "; required"
    default = field.get_default(call_default_factory=True)
    if default is None or default == {}:
        return ""
    if isinstance(default, tuple | list):
        default = ",".join(str(item) for item in default)
    return f"; default {default}"


def add_settings_flags(parser: argparse.ArgumentParser, settings_cls: type[BaseSettings], dest_prefix: str) -> None:
    """One flag per field of ``settings_cls`` (dest ``dest_prefix + name``, absent unless given), and ``--version``.

    A boolean field ``x`` is ``--x`` (true), ``--x VALUE`` (any boolean text) and ``--no-x`` (false).
    """
    parser.add_argument("--version", action="version", version=f"shadowtutor {package_version()}")
    for name, field in settings_cls.model_fields.items():
        text = f"{field.description} [env {env_var(name)}{default_text(field)}]"
        dest = dest_prefix + name
        if field.annotation is bool:
            parser.add_argument(flag(name), dest=dest, default=argparse.SUPPRESS, nargs="?", const=_TRUE,
                                metavar="BOOL", help=text)
            parser.add_argument("--no-" + name.replace("_", "-"), dest=dest, default=argparse.SUPPRESS,
                                action="store_const", const="false", help=f"same as {flag(name)} false")
        else:
            parser.add_argument(flag(name), dest=dest, default=argparse.SUPPRESS, metavar=name.upper(), help=text)


def given_flags(args: argparse.Namespace, dest_prefix: str) -> dict[str, Any]:
    """The settings fields given as flags, by field name."""
    return {key[len(dest_prefix):]: value for key, value in vars(args).items() if key.startswith(dest_prefix)}


def describe_validation_error(exc: ValidationError, given: Iterable[str]) -> str:
    """One line per problem, each naming where the bad value came from (the flag, else the variable).

    Defaults are valid, so a field that was not given came from its environment variable.
    """
    given = set(given)
    lines = []
    for error in exc.errors(include_url=False):
        field = str(error["loc"][0]) if error["loc"] else ""
        cause = error.get("ctx", {}).get("error")
        message = str(cause) if error["type"] == "value_error" and cause is not None else error["msg"]
        if error["type"] == "missing":
            message = f"{field} is required: pass {flag(field)} or set {env_var(field)}"
        elif field:
            origin = flag(field) if field in given else env_var(field)
            message = f"{origin}: {message}"
        lines.append(message)
    return "; ".join(lines)


def build_settings(settings_cls: type[BaseSettings], given: Mapping[str, Any]) -> Any:
    """``settings_cls`` from the given flags over ``SHADOWTUTOR_*`` variables over defaults.

    A bad value raises a ValueError whose text says what is wrong and where it came from.
    """
    try:
        return settings_cls(**given)
    except ValidationError as exc:
        raise ValueError(describe_validation_error(exc, given)) from None

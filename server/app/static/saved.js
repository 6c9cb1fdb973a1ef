// Saved traces: what "Open trace…" accepts, read into one shape the page can draw.
//
// Accepted: a chat/completions response made with return_trace (its "trace" list), a
// trace saved by this page, a bare list of trace events, or an eval results file
// (clients/eval/results.py: one JSON record a line, "trace" present when the eval ran
// with --trace). Each becomes a SavedRun:
//   {title, events, response, reasoning, usage, finish, cutReason, answer, problem, model,
//    scaffold, evaluation: {id, sample, reference, extracted, correct, error} | null}

function lastRunFinished(events) {
  for (let i = events.length - 1; i >= 0; i--) {
    if (events[i] && events[i].type === "run_finished") return events[i];
  }
  return null;
}

function firstChoice(data) {
  const choices = Array.isArray(data.choices) ? data.choices : [];
  const first = choices[0] || {};
  const message = first.message || {};
  return {
    text: message.content ?? first.text ?? null,
    reasoning: message.reasoning_content ?? message.reasoning ?? first.reasoning_content ?? null,
    finish: first.finish_reason ?? null,
  };
}

/** One parsed JSON value as a SavedRun, or null when it holds nothing to show. */
export function savedRunOf(data, fallbackTitle) {
  if (Array.isArray(data)) data = { trace: data };
  if (!data || typeof data !== "object") return null;
  const events = Array.isArray(data.trace) ? data.trace.filter((e) => e && e.type) : [];
  const isEval = "scaffold" in data && "id" in data && "sample" in data;
  const choice = firstChoice(data);
  const end = lastRunFinished(events);
  const response = data.response ?? choice.text ?? end?.text ?? null;
  if (!events.length && response === null && !data.error) return null;
  const ponder = data.ponder && typeof data.ponder === "object" ? data.ponder : {};
  const run = {
    title: fallbackTitle,
    events,
    response,
    reasoning: data.reasoning ?? choice.reasoning ?? null,
    usage: data.usage ?? end?.usage ?? null,
    finish: data.finish_reason ?? choice.finish ?? null,
    cutReason: data.cut_reason ?? ponder.cut_reason ?? end?.cut_reason ?? null,
    answer: data.extracted ?? end?.answer ?? null,
    problem: typeof data.problem === "string" ? data.problem : null,
    model: data.model ?? null,
    scaffold: (isEval ? data.scaffold : ponder.scaffold ?? data.scaffold) ?? null,
    evaluation: null,
  };
  if (isEval) {
    run.evaluation = {
      id: String(data.id),
      sample: Number(data.sample),
      reference: data.reference ?? null,
      extracted: data.extracted ?? null,
      correct: data.correct ?? null,
      error: data.error ?? null,
    };
    run.title = `${data.id} #${data.sample} · ${data.scaffold}`;
  }
  return run;
}

/** Every SavedRun in ``text`` (one JSON document, or JSON Lines); throws when none. */
export function parseSaved(text, name = "trace") {
  const trimmed = text.trim();
  if (!trimmed) throw new Error("nothing to open: the file or text is empty");
  try {
    const run = savedRunOf(JSON.parse(trimmed), name);
    if (run) return { runs: [run], skipped: 0 };
    throw new Error("this JSON holds no trace, response or eval record");
  } catch (err) {
    if (!(err instanceof SyntaxError)) throw err;
  }
  const runs = [];
  let skipped = 0;
  trimmed.split(/\r?\n/).forEach((line, number) => {
    if (!line.trim()) return;
    try {
      const run = savedRunOf(JSON.parse(line), `${name}:${number + 1}`);
      if (run) runs.push(run);
      else skipped += 1;
    } catch {
      skipped += 1; // a torn last line of a results file, say
    }
  });
  if (!runs.length) throw new Error("not JSON, and no line of it is a trace or eval record");
  return { runs, skipped };
}

/** Whether an eval record counts as a failure worth inspecting. */
export function isFailure(run) {
  const e = run.evaluation;
  return Boolean(e && (e.error || e.correct === false));
}

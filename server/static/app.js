// The playground page: pick a model and a scaffold, run it, watch its steps as a tree.
//
// Runs go through the same /v1/chat/completions stream as any client, with
// stream_trace (each trace event arrives as a chunk with no choices and
// "ponder": {"event": ...}) and return_trace (the whole trace at the end, for saving).
// The API key lives in this tab's sessionStorage and travels only in the
// Authorization header.

import { TraceTree, el, formatCount, formatSeconds, normalizeUsage } from "./tree.js";
import { isFailure, parseSaved } from "./saved.js";

const KEY_STORAGE = "ponder.apiKey";
const SPEC_CHECK_DELAY_MS = 250;
const TICK_MS = 200;

const $ = (id) => document.getElementById(id);

class ApiError extends Error {
  constructor(status, message, param, code) {
    super(message);
    this.status = status;
    this.param = param || null;
    this.code = code || null;
  }
}

// -- the API key --------------------------------------------------------------------------
function storedKey() {
  return sessionStorage.getItem(KEY_STORAGE) || "";
}

function authHeaders() {
  const key = storedKey();
  return key ? { Authorization: `Bearer ${key}` } : {};
}

function showKeyState() {
  const button = $("key-button");
  const set = Boolean(storedKey());
  button.dataset.state = set ? "set" : "none";
  button.textContent = set ? "API key ✓" : "API key";
  $("key-input").placeholder = set ? "a key is set; type to replace it" : "sk-…";
}

function openKeyDialog(reason) {
  $("key-reason").textContent =
    (reason ? `${reason} ` : "") +
    "The key is kept in this tab's session storage and sent as an Authorization header, never in a URL.";
  $("key-input").value = "";
  const dialog = $("key-dialog");
  if (!dialog.open) dialog.showModal();
  $("key-input").focus();
}

// -- HTTP -----------------------------------------------------------------------------------
async function errorOf(response) {
  let error = {};
  try {
    error = (await response.json()).error || {};
  } catch {
    // not JSON: keep the status alone
  }
  return new ApiError(response.status, error.message || `HTTP ${response.status}`, error.param, error.code);
}

async function api(path, { method = "GET", body, signal } = {}) {
  const headers = { ...authHeaders() };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    signal,
    cache: "no-store",
  });
  if (!response.ok) {
    const error = await errorOf(response);
    if (error.status === 401) openKeyDialog(error.message + ".");
    throw error;
  }
  return response;
}

/** The JSON payloads of an SSE body, up to [DONE]. */
async function* sseData(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true }).replace(/\r\n/g, "\n");
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      const data = block
        .split("\n")
        .filter((line) => line.startsWith("data:"))
        .map((line) => line.slice(5).replace(/^ /, ""))
        .join("\n");
      if (!data) continue;
      if (data === "[DONE]") return;
      yield JSON.parse(data);
    }
  }
}

// -- models ---------------------------------------------------------------------------------
const models = new Map(); // id -> /v1/models card

async function loadModels() {
  const select = $("model");
  let cards;
  try {
    cards = (await (await api("/v1/models")).json()).data || [];
  } catch (error) {
    $("model-note").textContent = `Could not list models: ${error.message}`;
    return;
  }
  const previous = select.value;
  models.clear();
  select.replaceChildren();
  for (const card of cards) {
    models.set(card.id, card);
    const scaffold = card.ponder?.scaffold;
    const text = scaffold && !card.id.includes("+") ? card.id : `${card.id} — ${scaffold || ""}`;
    const option = el("option", null, text);
    option.value = card.id;
    select.append(option);
  }
  if (models.has(previous)) select.value = previous;
  describeModel();
}

function describeModel() {
  const card = models.get($("model").value);
  const scaffold = card?.ponder?.scaffold || "single";
  $("model-note").textContent = card ? `Its own scaffold: ${scaffold}` : "";
  $("spec").placeholder = `${scaffold} (the model's own)`;
}

// -- spec checking ------------------------------------------------------------------------
let specCheck = { timer: 0, serial: 0 };

function setSpecStatus(state, text, param) {
  const status = $("spec-status");
  status.dataset.state = state;
  status.replaceChildren();
  if (param) status.append(el("code", "param", param), " ");
  status.append(text);
  $("spec").setAttribute("aria-invalid", state === "error" ? "true" : "false");
}

function scheduleSpecCheck() {
  clearTimeout(specCheck.timer);
  specCheck.timer = setTimeout(checkSpec, SPEC_CHECK_DELAY_MS);
}

async function checkSpec() {
  const text = $("spec").value.trim();
  const serial = ++specCheck.serial;
  if (!text) {
    setSpecStatus("ok", "the model's own scaffold");
    return;
  }
  setSpecStatus("checking", "checking…");
  try {
    const result = await (await api("/playground/spec", { method: "POST", body: { scaffold: text } })).json();
    if (serial !== specCheck.serial) return;
    const calls = result.max_calls === 1 ? "1 engine call" : `up to ${result.max_calls} engine calls`;
    setSpecStatus("ok", `✓ ${result.scaffold} · ${calls} per run`);
  } catch (error) {
    if (serial !== specCheck.serial) return;
    if (error.status === 401) setSpecStatus("checking", "needs the API key to check");
    else setSpecStatus("error", error.message, error.param);
  }
}

// -- the answer panel ---------------------------------------------------------------------
const tree = new TraceTree($("tree"));

const view = {
  reset(placeholder = "") {
    $("final").dataset.state = "idle";
    $("final-text").textContent = placeholder;
    $("final-answer").hidden = true;
    $("final-finish").hidden = true;
    $("usage").hidden = true;
    $("usage").replaceChildren();
    $("run-error").hidden = true;
    tree.clear();
  },
  appendContent(text) {
    $("final-text").textContent += text;
  },
  setAnswer(answer) {
    const chip = $("final-answer");
    chip.classList.remove("wrong");
    chip.hidden = answer === null || answer === undefined;
    chip.textContent = chip.hidden ? "" : `answer ${answer}`;
  },
  setFinish(reason, cutReason) {
    const badge = $("final-finish");
    badge.hidden = !reason && !cutReason;
    badge.textContent = cutReason ? `cut short: ${cutReason}` : `finish: ${reason}`;
    badge.dataset.reason = cutReason ? "cut" : reason || "";
  },
  setUsage(usage, seconds) {
    const u = normalizeUsage(usage);
    const box = $("usage");
    box.replaceChildren();
    if (!u) return;
    const item = (name, value, id) => {
      const span = el("span", "usage-item");
      span.append(el("b", null, value), ` ${name}`);
      if (id) span.id = id;
      box.append(span);
    };
    item(u.calls === 1 ? "engine call" : "engine calls", formatCount(u.calls), "usage-calls");
    item("prompt tokens", formatCount(u.prompt));
    item("cached", formatCount(u.cached));
    item("completion tokens", formatCount(u.completion), "usage-completion");
    item("total", formatCount(u.total));
    if (Number.isFinite(seconds)) item("wall time", formatSeconds(seconds));
    box.hidden = false;
  },
  error(message) {
    $("run-error").textContent = message;
    $("run-error").hidden = false;
    $("final").dataset.state = "error";
  },
};

// -- running ------------------------------------------------------------------------------
const run = { controller: null, saved: null, ticker: 0 };

function numberField(id) {
  const value = $(id).value.trim();
  return value === "" ? undefined : Number(value);
}

function requestBody() {
  const body = {
    model: $("model").value,
    messages: [{ role: "user", content: $("problem").value }],
    stream: true,
    stream_options: { include_usage: true },
    stream_trace: true,
    return_trace: true,
  };
  const spec = $("spec").value.trim();
  if (spec) body.scaffold = spec;
  const sampling = { temperature: numberField("temperature"), max_tokens: numberField("max-tokens"), seed: numberField("seed") };
  for (const [name, value] of Object.entries(sampling)) if (value !== undefined) body[name] = value;
  const budget = {
    max_tokens: numberField("budget-tokens"),
    max_calls: numberField("budget-calls"),
    timeout_s: numberField("budget-seconds"),
  };
  if (Object.values(budget).some((v) => v !== undefined)) body.budget = budget;
  return body;
}

function setRunning(running) {
  $("run-button").disabled = running;
  $("stop-button").disabled = !running;
  clearInterval(run.ticker);
  if (running) run.ticker = setInterval(() => tree.tick(Date.now() / 1000), TICK_MS);
}

async function startRun(event) {
  event.preventDefault();
  if (run.controller) return;
  const body = requestBody();
  $("source").hidden = true;
  view.reset("");
  $("final").dataset.state = "running";
  $("save-button").disabled = true;
  const controller = new AbortController();
  run.controller = controller;
  setRunning(true);
  const started = performance.now();
  const saved = { object: "ponder.trace", model: body.model, problem: $("problem").value, scaffold: body.scaffold || null };
  let finish = null;
  try {
    const response = await api("/v1/chat/completions", { method: "POST", body, signal: controller.signal });
    for await (const chunk of sseData(response)) {
      if (chunk.error) throw new ApiError(0, chunk.error.message, chunk.error.param, chunk.error.code);
      const traceEvent = chunk.ponder?.event;
      if (traceEvent) {
        tree.feed(traceEvent);
        if (traceEvent.type === "run_finished") view.setAnswer(traceEvent.answer);
        continue;
      }
      for (const choice of chunk.choices || []) {
        if (choice.index !== 0) continue;
        if (choice.delta?.content) view.appendContent(choice.delta.content);
        if (choice.finish_reason) finish = choice.finish_reason;
      }
      if (chunk.usage) {
        view.setUsage(chunk.usage, (performance.now() - started) / 1000);
        saved.usage = chunk.usage;
      }
      if (chunk.ponder?.scaffold) saved.ponder = chunk.ponder;
      if (Array.isArray(chunk.trace)) saved.trace = chunk.trace;
    }
    view.setFinish(finish, saved.ponder?.cut_reason);
    $("final").dataset.state = "done";
    saved.choices = [{ index: 0, message: { role: "assistant", content: $("final-text").textContent }, finish_reason: finish }];
    run.saved = saved;
    $("save-button").disabled = !saved.trace;
  } catch (error) {
    if (error.name === "AbortError") {
      view.error("Stopped: the server cancelled the run's engine calls.");
    } else {
      view.error(error.param ? `${error.param}: ${error.message}` : error.message);
      if (error.param && error.param.startsWith("scaffold")) setSpecStatus("error", error.message, error.param);
    }
  } finally {
    run.controller = null;
    setRunning(false);
  }
}

function saveTrace() {
  if (!run.saved) return;
  const blob = new Blob([JSON.stringify(run.saved, null, 2)], { type: "application/json" });
  const link = el("a");
  link.href = URL.createObjectURL(blob);
  link.download = `ponder-trace-${new Date().toISOString().replace(/[:.]/g, "-")}.json`;
  link.click();
  setTimeout(() => URL.revokeObjectURL(link.href), 1000);
}

// -- saved traces -------------------------------------------------------------------------
const opened = { runs: [], shown: [], index: 0, name: "" };

async function openTraceFromDialog(event) {
  event.preventDefault();
  if (event.submitter?.value !== "open") {
    $("trace-dialog").close();
    return;
  }
  const file = $("trace-file").files[0];
  const pasted = $("trace-text").value;
  try {
    const text = pasted.trim() ? pasted : file ? await file.text() : "";
    const { runs, skipped } = parseSaved(text, file && !pasted.trim() ? file.name : "pasted");
    opened.runs = runs;
    opened.name = file && !pasted.trim() ? file.name : "pasted text";
    opened.skipped = skipped;
    $("trace-error").hidden = true;
    $("trace-dialog").close();
    filterOpened(false);
  } catch (error) {
    $("trace-error").textContent = error.message;
    $("trace-error").hidden = false;
  }
}

function filterOpened(failuresOnly) {
  opened.failuresOnly = failuresOnly;
  opened.shown = failuresOnly ? opened.runs.filter(isFailure) : opened.runs;
  opened.index = 0;
  showOpened();
}

function drawSource() {
  const box = $("source");
  box.replaceChildren();
  box.hidden = false;
  const current = opened.shown[opened.index];
  const head = el("div", "source-head");
  head.append(el("strong", null, "Saved trace"), ` ${opened.name}`);
  if (opened.skipped) head.append(el("span", "hint", ` (${opened.skipped} unreadable lines skipped)`));
  box.append(head);
  if (opened.runs.length > 1) {
    const nav = el("div", "source-nav");
    const prev = el("button", null, "◀");
    prev.type = "button";
    prev.id = "trace-prev";
    prev.disabled = opened.index <= 0;
    prev.addEventListener("click", () => { opened.index -= 1; showOpened(); });
    const next = el("button", null, "▶");
    next.type = "button";
    next.id = "trace-next";
    next.disabled = opened.index >= opened.shown.length - 1;
    next.addEventListener("click", () => { opened.index += 1; showOpened(); });
    const position = el("span", "position", opened.shown.length ? `${opened.index + 1} / ${opened.shown.length}` : "0 / 0");
    position.id = "trace-position";
    const failures = el("label", "check");
    const box2 = el("input");
    box2.type = "checkbox";
    box2.id = "failures-only";
    box2.checked = Boolean(opened.failuresOnly);
    box2.addEventListener("change", () => filterOpened(box2.checked));
    failures.append(box2, " failures only");
    nav.append(prev, position, next, failures);
    box.append(nav);
  }
  if (!current) return;
  const meta = el("div", "source-meta");
  const fact = (name, value, className) => {
    if (value === null || value === undefined || value === "") return;
    const span = el("span", `fact ${className || ""}`);
    span.append(el("span", "fact-name", name), " ", el("code", null, String(value)));
    meta.append(span);
  };
  fact("record", current.title);
  fact("model", current.model);
  fact("scaffold", current.scaffold);
  const evaluation = current.evaluation;
  if (evaluation) {
    fact("reference", evaluation.reference);
    fact("extracted", evaluation.extracted);
    if (evaluation.error) fact("error", evaluation.error, "bad");
    else if (evaluation.correct !== null) fact("graded", evaluation.correct ? "correct ✓" : "wrong ✗", evaluation.correct ? "good" : "bad");
  }
  box.append(meta);
}

function showOpened() {
  drawSource();
  const current = opened.shown[opened.index];
  view.reset(current ? "" : "No record matches.");
  if (!current) return;
  if (current.problem !== null) $("problem").value = current.problem;
  if (current.scaffold) {
    $("spec").value = current.scaffold; // so Run tries it again
    checkSpec();
  }
  if (current.model && models.has(current.model)) $("model").value = current.model;
  for (const event of current.events) tree.feed(event);
  if (!current.events.length) drawWithoutTrace(current);
  $("final-text").textContent = current.response ?? "";
  view.setAnswer(current.answer);
  $("final-answer").classList.toggle("wrong", current.evaluation?.correct === false);
  view.setFinish(current.finish, current.cutReason);
  view.setUsage(current.usage, NaN);
  $("final").dataset.state = current.evaluation?.error ? "error" : "done";
}

function drawWithoutTrace(saved) {
  // No trace kept: show the reasoning's "### step" sections as plain, flat nodes.
  const note = el("p", "hint", "This record has no trace (run the eval with --trace to keep one); its reasoning by step:");
  const sections = (saved.reasoning || "").split(/\n### /).map((s) => s.trim()).filter(Boolean);
  const row = el("div", "sequence");
  for (const section of sections) {
    const [head, ...rest] = section.replace(/^### /, "").split("\n");
    const node = el("article", "node");
    node.dataset.state = "done";
    node.append(el("header", "node-head", head), el("pre", "node-text", rest.join("\n")));
    row.append(node);
  }
  $("tree").replaceChildren(note, row);
}

// -- wiring -------------------------------------------------------------------------------
function wire() {
  $("run-form").addEventListener("submit", startRun);
  $("stop-button").addEventListener("click", () => run.controller?.abort());
  $("save-button").addEventListener("click", saveTrace);
  $("spec").addEventListener("input", scheduleSpecCheck);
  $("preset").addEventListener("change", () => {
    if ($("preset").value) $("spec").value = $("preset").value;
    $("preset").value = "";
    checkSpec();
  });
  $("model").addEventListener("change", () => {
    describeModel();
    if ($("model").value.includes("+")) {
      $("spec").value = ""; // an alias brings its own scaffold
      checkSpec();
    }
  });
  $("key-button").addEventListener("click", () => openKeyDialog(""));
  $("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const action = event.submitter?.value;
    const key = $("key-input").value.trim();
    if (action === "save" && key) sessionStorage.setItem(KEY_STORAGE, key);
    if (action === "forget") sessionStorage.removeItem(KEY_STORAGE);
    $("key-input").value = "";
    $("key-dialog").close();
    showKeyState();
    if (action !== "cancel") {
      loadModels();
      checkSpec();
    }
  });
  $("open-trace-button").addEventListener("click", () => {
    $("trace-error").hidden = true;
    $("trace-dialog").showModal();
  });
  $("trace-form").addEventListener("submit", openTraceFromDialog);
}

wire();
showKeyState();
loadModels().then(checkSpec);

// The playground page: pick a model and a scaffold, run it, watch its steps as a tree.
//
// Runs go through the same /v1/chat/completions stream as any client, with
// stream_trace (each trace event arrives as a chunk with no choices and
// "ponder": {"event": ...}) and return_trace (the whole trace at the end, for saving).

import { ApiError, apiKey, request, sseData } from "./api.js";
import { isFailure, parseSaved } from "./saved.js";
import { TraceTree, el, formatCount, formatSeconds, normalizeUsage } from "./tree.js";

const SPEC_CHECK_DELAY_MS = 250;
const TICK_MS = 200;

const $ = (id) => document.getElementById(id);

function numberField(id) {
  const value = $(id).value.trim();
  return value === "" ? undefined : Number(value);
}

/** The final answer on top of the tree: its text, answer, finish and usage. */
class AnswerPanel {
  reset(placeholder = "") {
    $("final").dataset.state = "idle";
    $("final-text").textContent = placeholder;
    $("final-answer").hidden = true;
    $("final-finish").hidden = true;
    $("usage").hidden = true;
    $("usage").replaceChildren();
    $("run-error").hidden = true;
  }

  setState(state) {
    $("final").dataset.state = state;
  }

  append(text) {
    $("final-text").textContent += text;
  }

  setText(text) {
    $("final-text").textContent = text;
  }

  text() {
    return $("final-text").textContent;
  }

  setAnswer(answer, { wrong = false } = {}) {
    const chip = $("final-answer");
    chip.hidden = answer === null || answer === undefined;
    chip.textContent = chip.hidden ? "" : `answer ${answer}`;
    chip.classList.toggle("wrong", wrong);
  }

  setFinish(reason, cutReason) {
    const badge = $("final-finish");
    badge.hidden = !reason && !cutReason;
    badge.textContent = cutReason ? `cut short: ${cutReason}` : `finish: ${reason}`;
    badge.dataset.reason = cutReason ? "cut" : reason || "";
  }

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
  }

  error(message) {
    $("run-error").textContent = message;
    $("run-error").hidden = false;
    this.setState("error");
  }
}

class Playground {
  constructor() {
    this.tree = new TraceTree($("tree"));
    this.panel = new AnswerPanel();
    this.models = new Map(); // id -> its /v1/models card
    this.specCheck = { timer: 0, serial: 0 };
    this.run = { controller: null, saved: null, ticker: 0 };
    this.opened = { runs: [], shown: [], index: 0, name: "", skipped: 0, failuresOnly: false };
  }

  start() {
    this.wire();
    this.showKeyState();
    this.loadModels().then(() => this.checkSpec());
  }

  /** request() that asks for the key when the server says 401. */
  async api(path, options) {
    try {
      return await request(path, options);
    } catch (error) {
      if (error.status === 401) this.openKeyDialog(`${error.message}.`);
      throw error;
    }
  }

  // -- the API key ----------------------------------------------------------------------
  showKeyState() {
    const set = Boolean(apiKey.get());
    $("key-button").dataset.state = set ? "set" : "none";
    $("key-button").textContent = set ? "API key ✓" : "API key";
    $("key-input").placeholder = set ? "a key is set; type to replace it" : "sk-…";
  }

  openKeyDialog(reason) {
    $("key-reason").textContent =
      (reason ? `${reason} ` : "") +
      "The key is kept in this tab's session storage and sent as an Authorization header, never in a URL.";
    $("key-input").value = "";
    if (!$("key-dialog").open) $("key-dialog").showModal();
    $("key-input").focus();
  }

  saveKey(event) {
    event.preventDefault();
    const action = event.submitter?.value;
    const key = $("key-input").value.trim();
    if (action === "save" && key) apiKey.set(key);
    if (action === "forget") apiKey.forget();
    $("key-input").value = "";
    $("key-dialog").close();
    this.showKeyState();
    if (action !== "cancel") {
      this.loadModels();
      this.checkSpec();
    }
  }

  // -- models -------------------------------------------------------------------------
  async loadModels() {
    const select = $("model");
    let cards;
    try {
      cards = (await (await this.api("/v1/models")).json()).data || [];
    } catch (error) {
      $("model-note").textContent = `Could not list models: ${error.message}`;
      return;
    }
    const previous = select.value;
    this.models.clear();
    select.replaceChildren();
    for (const card of cards) {
      this.models.set(card.id, card);
      const scaffold = card.ponder?.scaffold;
      const option = el("option", null, card.id.includes("+") ? `${card.id} — ${scaffold || ""}` : card.id);
      option.value = card.id;
      select.append(option);
    }
    if (this.models.has(previous)) select.value = previous;
    this.describeModel();
  }

  describeModel() {
    const card = this.models.get($("model").value);
    const scaffold = card?.ponder?.scaffold || "single";
    $("model-note").textContent = card ? `Its own scaffold: ${scaffold}` : "";
    $("spec").placeholder = `${scaffold} (the model's own)`;
  }

  // -- spec checking --------------------------------------------------------------------
  setSpecStatus(state, text, param) {
    const status = $("spec-status");
    status.dataset.state = state;
    status.replaceChildren();
    if (param) status.append(el("code", "param", param), " ");
    status.append(text);
    $("spec").setAttribute("aria-invalid", state === "error" ? "true" : "false");
  }

  scheduleSpecCheck() {
    clearTimeout(this.specCheck.timer);
    this.specCheck.timer = setTimeout(() => this.checkSpec(), SPEC_CHECK_DELAY_MS);
  }

  async checkSpec() {
    const text = $("spec").value.trim();
    const serial = ++this.specCheck.serial; // answers to older checks are dropped
    if (!text) {
      this.setSpecStatus("ok", "the model's own scaffold");
      return;
    }
    this.setSpecStatus("checking", "checking…");
    try {
      const response = await this.api("/playground/spec", { method: "POST", body: { scaffold: text } });
      const result = await response.json();
      if (serial !== this.specCheck.serial) return;
      const calls = result.max_calls === 1 ? "1 engine call" : `up to ${result.max_calls} engine calls`;
      this.setSpecStatus("ok", `✓ ${result.scaffold} · ${calls} per run`);
    } catch (error) {
      if (serial !== this.specCheck.serial) return;
      if (error.status === 401) this.setSpecStatus("checking", "needs the API key to check");
      else this.setSpecStatus("error", error.message, error.param);
    }
  }

  // -- running ------------------------------------------------------------------------
  requestBody() {
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
    const sampling = {
      temperature: numberField("temperature"),
      max_tokens: numberField("max-tokens"),
      seed: numberField("seed"),
    };
    for (const [name, value] of Object.entries(sampling)) if (value !== undefined) body[name] = value;
    const budget = {
      max_tokens: numberField("budget-tokens"),
      max_calls: numberField("budget-calls"),
      timeout_s: numberField("budget-seconds"),
    };
    if (Object.values(budget).some((v) => v !== undefined)) body.budget = budget;
    return body;
  }

  setRunning(running) {
    $("run-button").disabled = running;
    $("stop-button").disabled = !running;
    clearInterval(this.run.ticker);
    if (running) this.run.ticker = setInterval(() => this.tree.tick(Date.now() / 1000), TICK_MS);
  }

  async startRun(event) {
    event.preventDefault();
    if (this.run.controller) return;
    const body = this.requestBody();
    $("source").hidden = true;
    this.panel.reset();
    this.tree.clear();
    this.panel.setState("running");
    $("save-button").disabled = true;
    const controller = new AbortController();
    this.run.controller = controller;
    this.setRunning(true);
    const started = performance.now();
    const saved = { object: "ponder.trace", model: body.model, problem: $("problem").value, scaffold: body.scaffold || null };
    let finish = null;
    try {
      const response = await this.api("/v1/chat/completions", { method: "POST", body, signal: controller.signal });
      for await (const chunk of sseData(response)) {
        if (chunk.error) throw new ApiError(0, chunk.error.message, chunk.error.param, chunk.error.code);
        const traceEvent = chunk.ponder?.event;
        if (traceEvent) {
          this.tree.feed(traceEvent);
          if (traceEvent.type === "run_finished") this.panel.setAnswer(traceEvent.answer);
          continue;
        }
        for (const choice of chunk.choices || []) {
          if (choice.index !== 0) continue;
          if (choice.delta?.content) this.panel.append(choice.delta.content);
          if (choice.finish_reason) finish = choice.finish_reason;
        }
        if (chunk.usage) {
          this.panel.setUsage(chunk.usage, (performance.now() - started) / 1000);
          saved.usage = chunk.usage;
        }
        if (chunk.ponder?.scaffold) saved.ponder = chunk.ponder;
        if (Array.isArray(chunk.trace)) saved.trace = chunk.trace;
      }
      this.panel.setFinish(finish, saved.ponder?.cut_reason);
      this.panel.setState("done");
      saved.choices = [{ index: 0, message: { role: "assistant", content: this.panel.text() }, finish_reason: finish }];
      this.run.saved = saved;
      $("save-button").disabled = !saved.trace;
    } catch (error) {
      if (error.name === "AbortError") {
        this.panel.error("Stopped: the server cancelled the run's engine calls.");
      } else {
        this.panel.error(error.param ? `${error.param}: ${error.message}` : error.message);
        if (error.param?.startsWith("scaffold")) this.setSpecStatus("error", error.message, error.param);
      }
    } finally {
      this.run.controller = null;
      this.setRunning(false);
    }
  }

  saveTrace() {
    if (!this.run.saved) return;
    const blob = new Blob([JSON.stringify(this.run.saved, null, 2)], { type: "application/json" });
    const link = el("a");
    link.href = URL.createObjectURL(blob);
    link.download = `ponder-trace-${new Date().toISOString().replace(/[:.]/g, "-")}.json`;
    link.click();
    setTimeout(() => URL.revokeObjectURL(link.href), 1000);
  }

  // -- saved traces -------------------------------------------------------------------
  async openFromDialog(event) {
    event.preventDefault();
    if (event.submitter?.value !== "open") {
      $("trace-dialog").close();
      return;
    }
    const file = $("trace-file").files[0];
    const pasted = $("trace-text").value;
    const fromFile = Boolean(file) && !pasted.trim();
    try {
      const text = fromFile ? await file.text() : pasted;
      const { runs, skipped } = parseSaved(text, fromFile ? file.name : "pasted");
      Object.assign(this.opened, { runs, skipped, name: fromFile ? file.name : "pasted text" });
      $("trace-error").hidden = true;
      $("trace-dialog").close();
      this.filterOpened(false);
    } catch (error) {
      $("trace-error").textContent = error.message;
      $("trace-error").hidden = false;
    }
  }

  filterOpened(failuresOnly) {
    const opened = this.opened;
    opened.failuresOnly = failuresOnly;
    opened.shown = failuresOnly ? opened.runs.filter(isFailure) : opened.runs;
    opened.index = 0;
    this.showOpened();
  }

  moveOpened(step) {
    this.opened.index += step;
    this.showOpened();
  }

  drawSource() {
    const opened = this.opened;
    const box = $("source");
    box.replaceChildren();
    box.hidden = false;
    const head = el("div", "source-head");
    head.append(el("strong", null, "Saved trace"), ` ${opened.name}`);
    if (opened.skipped) head.append(el("span", "hint", ` (${opened.skipped} unreadable lines skipped)`));
    box.append(head);
    if (opened.runs.length > 1) box.append(this.drawNavigator());
    const current = opened.shown[opened.index];
    if (!current) return;
    const meta = el("div", "source-meta");
    const fact = (name, value, className = "") => {
      if (value === null || value === undefined || value === "") return;
      const span = el("span", `fact ${className}`);
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
      else if (evaluation.correct !== null) {
        fact("graded", evaluation.correct ? "correct ✓" : "wrong ✗", evaluation.correct ? "good" : "bad");
      }
    }
    box.append(meta);
  }

  drawNavigator() {
    const opened = this.opened;
    const nav = el("div", "source-nav");
    const button = (id, text, disabled, step) => {
      const b = el("button", null, text);
      b.type = "button";
      b.id = id;
      b.disabled = disabled;
      b.addEventListener("click", () => this.moveOpened(step));
      return b;
    };
    const count = opened.shown.length;
    const position = el("span", "position", count ? `${opened.index + 1} / ${count}` : "0 / 0");
    position.id = "trace-position";
    const label = el("label", "check");
    const failures = el("input");
    failures.type = "checkbox";
    failures.id = "failures-only";
    failures.checked = opened.failuresOnly;
    failures.addEventListener("change", () => this.filterOpened(failures.checked));
    label.append(failures, " failures only");
    nav.append(
      button("trace-prev", "◀", opened.index <= 0, -1),
      position,
      button("trace-next", "▶", opened.index >= count - 1, 1),
      label,
    );
    return nav;
  }

  showOpened() {
    this.drawSource();
    const current = this.opened.shown[this.opened.index];
    this.panel.reset(current ? "" : "No record matches.");
    this.tree.clear();
    if (!current) return;
    if (current.problem !== null) $("problem").value = current.problem;
    if (current.scaffold) {
      $("spec").value = current.scaffold; // so Run tries it again
      this.checkSpec();
    }
    if (current.model && this.models.has(current.model)) $("model").value = current.model;
    for (const event of current.events) this.tree.feed(event);
    if (!current.events.length) this.drawWithoutTrace(current);
    this.panel.setText(current.response ?? "");
    this.panel.setAnswer(current.answer, { wrong: current.evaluation?.correct === false });
    this.panel.setFinish(current.finish, current.cutReason);
    this.panel.setUsage(current.usage, NaN);
    this.panel.setState(current.evaluation?.error ? "error" : "done");
  }

  drawWithoutTrace(saved) {
    // No trace kept: show the reasoning's "### step" sections as plain, flat nodes.
    const note = el("p", "hint", "This record has no trace (run the eval with --trace to keep one); its reasoning by step:");
    const sections = (saved.reasoning || "").split(/\n### /).map((s) => s.trim()).filter(Boolean);
    const column = el("div", "sequence");
    for (const section of sections) {
      const [head, ...rest] = section.replace(/^### /, "").split("\n");
      const node = el("article", "node");
      node.dataset.state = "done";
      node.append(el("header", "node-head", head), el("pre", "node-text", rest.join("\n")));
      column.append(node);
    }
    $("tree").replaceChildren(note, column);
  }

  // -- wiring -------------------------------------------------------------------------
  wire() {
    $("run-form").addEventListener("submit", (e) => this.startRun(e));
    $("stop-button").addEventListener("click", () => this.run.controller?.abort());
    $("save-button").addEventListener("click", () => this.saveTrace());
    $("spec").addEventListener("input", () => this.scheduleSpecCheck());
    $("preset").addEventListener("change", () => {
      if ($("preset").value) $("spec").value = $("preset").value;
      $("preset").value = "";
      this.checkSpec();
    });
    $("model").addEventListener("change", () => {
      this.describeModel();
      if ($("model").value.includes("+")) {
        $("spec").value = ""; // an alias brings its own scaffold
        this.checkSpec();
      }
    });
    $("key-button").addEventListener("click", () => this.openKeyDialog(""));
    $("key-form").addEventListener("submit", (e) => this.saveKey(e));
    $("open-trace-button").addEventListener("click", () => {
      $("trace-error").hidden = true;
      $("trace-dialog").showModal();
    });
    $("trace-form").addEventListener("submit", (e) => this.openFromDialog(e));
  }
}

new Playground().start();

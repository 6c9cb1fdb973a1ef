// A scaffold run as a tree, built from its trace events (live or saved).
//
// Step ids name their scope: step "run.1.2:5" lives in scope "run.1.2", a child of
// "run.1", a child of "run". A step's label is its scope path plus its own name
// ("candidates > candidate 2 > summary 1"), which names the scopes too. A step of n
// samples (one engine request) is drawn as n nodes side by side; sibling scopes
// (candidates 1..n) side by side; steps of one scope one below the other. A batched
// step followed by its samples' own scopes (RC under GSR, abstractions and their
// solutions) is drawn as columns: sample i on top of scope i.
//
// Sibling scopes that ran one after another (RSA's rounds, adaptive voting's waves) are
// stacked instead, so RSA draws as a grid, one row per round, with an arrow from each
// member an aggregation read to it (population.js reads the links from the trace); a
// strategy's notes (the stopping probability after each wave) sit under their scope.
// A search (beam, particle_filter) draws as its tree: an arrow from each path to the
// step that continues it, and each path's verifier score on its node.
//
// Model output is only ever set as text (textContent), never parsed as HTML.

import { noteText, readsOf, rowsByTime, scoresOf } from "./population.js";

const SEPARATOR = " > ";
const SVG = "http://www.w3.org/2000/svg";

export function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = text;
  return node;
}

export function formatSeconds(seconds) {
  if (!Number.isFinite(seconds) || seconds < 0) return "";
  return seconds < 10 ? `${seconds.toFixed(2)} s` : `${seconds.toFixed(1)} s`;
}

export function formatCount(n) {
  return Number(n || 0).toLocaleString("en-US");
}

/** Usage from any of its shapes (trace, OpenAI response, eval record) as one shape. */
export function normalizeUsage(usage) {
  if (!usage || typeof usage !== "object") return null;
  const details = usage.prompt_tokens_details || {};
  const prompt = Number(usage.prompt_tokens || 0);
  const completion = Number(usage.completion_tokens || 0);
  return {
    prompt,
    completion,
    total: Number(usage.total_tokens || prompt + completion),
    cached: Number(usage.cached_tokens ?? details.cached_tokens ?? 0),
    calls: Number(usage.engine_calls ?? usage.calls ?? 0),
  };
}

/** "candidate" -> "candidate 2", "reasoning 1" -> "reasoning 1 (2)", "3 abstractions" -> "abstraction 2". */
export function sampleLabel(name, index) {
  const counted = /^\d+ (.+)s$/.exec(name);
  if (counted) return `${counted[1]} ${index + 1}`;
  return /\d$/.test(name) ? `${name} (${index + 1})` : `${name} ${index + 1}`;
}

function scopeParent(scopeId) {
  const cut = scopeId.lastIndexOf(".");
  return cut < 0 ? null : scopeId.slice(0, cut);
}

function scopeDepth(scopeId) {
  return scopeId.split(".").length - 1;
}

function scopeOrder(scopeId) {
  const cut = scopeId.lastIndexOf(".");
  return cut < 0 ? 0 : Number(scopeId.slice(cut + 1)) || 0;
}

export class TraceTree {
  constructor(container) {
    this.container = container;
    this.clear();
  }

  clear() {
    this.scopes = new Map();
    this.steps = new Map();
    this.nodes = new Map(); // "stepId#index" -> {root, text, reasoning, tokens, time, answer}
    this.finalStepId = null;
    this.finalAnswer = null;
    this.container.replaceChildren();
    this.layoutPending = false;
  }

  /** Feed one trace event (step_started, step_delta, step_finished, step_note, run_finished). */
  feed(event) {
    if (!event || typeof event !== "object") return;
    switch (event.type) {
      case "step_started":
        this.started(event);
        break;
      case "step_delta":
        this.delta(event);
        break;
      case "step_finished":
        this.finished(event);
        break;
      case "step_note":
        this.noted(event);
        break;
      case "run_finished":
        this.runFinished(event);
        break;
      default:
        break;
    }
  }

  /** Every running node's clock, for a live view (call every few hundred ms). */
  tick(now) {
    for (const step of this.steps.values()) {
      if (step.done) continue;
      for (let i = 0; i < step.n; i++) {
        const node = this.nodes.get(`${step.id}#${i}`);
        if (node) node.time.textContent = formatSeconds(now - step.seenAt);
      }
    }
    this.drawLinks();
  }

  // -- building the model -----------------------------------------------------------
  scope(scopeId) {
    let scope = this.scopes.get(scopeId);
    if (scope) return scope;
    scope = { id: scopeId, label: null, children: [], notes: [] };
    this.scopes.set(scopeId, scope);
    const parent = scopeParent(scopeId);
    if (parent !== null) this.scope(parent).children.push({ scope: scopeId });
    return scope;
  }

  started(event) {
    const stepId = String(event.step_id);
    if (this.steps.has(stepId)) return;
    const scopeId = String(event.parent_id || stepId.split(":")[0] || "run");
    const scope = this.scope(scopeId);
    const segments = String(event.label || event.kind || "step").split(SEPARATOR);
    // Name this scope and its ancestors from the label path, deepest first.
    let id = scopeId;
    for (let depth = scopeDepth(scopeId); depth >= 1 && id !== null; depth--) {
      const known = this.scopes.get(id);
      if (known && known.label === null && segments.length > depth) known.label = segments[depth - 1];
      id = scopeParent(id);
    }
    const n = Math.max(1, Number(event.n) || 1);
    const step = {
      id: stepId,
      scope: scopeId,
      kind: String(event.kind || "generate"),
      name: segments[segments.length - 1],
      label: String(event.label || ""),
      n,
      final: Boolean(event.final),
      prompt: event.prompt || null,
      startedAt: Number(event.time) || null,
      seenAt: Date.now() / 1000, // the live clock runs on this browser's time
      finishedAt: null,
      done: false,
      usage: null,
      error: null,
      streamed: Array(n).fill(0),
      reads: readsOf(event),
      event,
    };
    this.steps.set(stepId, step);
    scope.children.push({ step: stepId });
    for (let i = 0; i < n; i++) this.nodes.set(`${stepId}#${i}`, this.makeNode(step, i));
    this.layout();
  }

  delta(event) {
    const node = this.nodes.get(`${event.step_id}#${event.index}`);
    const step = this.steps.get(String(event.step_id));
    if (!node || !step) return;
    if (event.reasoning) {
      node.reasoning.hidden = false;
      node.reasoning.textContent += event.reasoning;
    }
    if (event.text) node.text.textContent += event.text;
    step.streamed[event.index] += 1;
    node.tokens.textContent = `~${formatCount(step.streamed[event.index])} tok`;
    node.tokens.title = "chunks streamed so far (about one token each)";
    node.text.scrollTop = node.text.scrollHeight;
  }

  finished(event) {
    const step = this.steps.get(String(event.step_id));
    if (!step) return;
    step.done = true;
    step.finishedAt = Number(event.time) || null;
    step.usage = normalizeUsage(event.usage);
    step.sampleTokens = Array.isArray(event.completion_tokens) ? event.completion_tokens : [];
    step.error = event.error || null;
    const texts = event.texts || [];
    const answers = event.answers || [];
    const reasons = event.finish_reasons || [];
    const reasonings = event.reasonings || [];
    for (let i = 0; i < step.n; i++) {
      const node = this.nodes.get(`${step.id}#${i}`);
      if (!node) continue;
      // The finished texts are the step's own: they fill in what did not stream (a saved
      // trace, an engine without deltas) and win over what did, should the two differ.
      if (typeof texts[i] === "string" && texts[i] !== node.text.textContent) {
        node.text.textContent = texts[i];
      }
      if (reasonings[i] && reasonings[i] !== node.reasoning.textContent) {
        node.reasoning.hidden = false;
        node.reasoning.textContent = reasonings[i];
      }
      node.root.dataset.state = step.error ? "error" : "done";
      if (step.error) node.status.textContent = `failed: ${step.error}`;
      else if (reasons[i] === "length") node.status.textContent = "cut at length";
      else node.status.textContent = "";
      const answer = answers[i];
      node.answerValue = answer ?? null;
      node.answer.hidden = answer === null || answer === undefined;
      node.answer.textContent = node.answer.hidden ? "" : `answer ${answer}`;
      if (node.answer.hidden && !step.error) {
        node.answer.hidden = false;
        node.answer.textContent = "no answer";
        node.answer.classList.add("none");
      }
      this.showCost(step, node, i);
    }
    const caption = this.container.querySelector(`[data-group-for="${CSS.escape(step.id)}"]`);
    if (caption) caption.textContent = this.groupCaption(step);
    this.drawLinks();
  }

  /** A strategy's note: on a step's samples (deepconf's confidence and kept flag per
   * trace) it marks their nodes; otherwise it is a line under its scope (adaptive's
   * stopping probability after each wave). */
  noted(event) {
    if (event.step_id) {
      this.notedOnSamples(event);
      return;
    }
    this.scope(String(event.scope_id || "run")).notes.push(event);
    this.layout();
  }

  notedOnSamples(event) {
    const step = this.steps.get(String(event.step_id));
    const values = event.values || {};
    if (step && event.kind === "helper_text") {
      this.notedSubstitutes(step, values);
      return;
    }
    if (step && event.kind === "scores") {
      // A verifier's scores: on the search paths it scored (its own nodes show them too).
      for (const [key, text] of Object.entries(scoresOf(step.event, event))) {
        const node = this.nodes.get(key);
        if (!node) continue;
        node.note.hidden = false;
        node.note.textContent = text;
        node.note.title = `the verifier's score of this path (${values.verifier || "verifier"})`;
      }
      return;
    }
    if (!step || event.kind !== "confidence") return;
    const confidences = Array.isArray(values.confidence) ? values.confidence : [];
    const kept = Array.isArray(values.kept) ? values.kept : [];
    for (let i = 0; i < step.n; i++) {
      const node = this.nodes.get(`${step.id}#${i}`);
      if (!node) continue;
      const value = Number(confidences[i]);
      const isKept = Boolean(kept[i]);
      node.root.dataset.kept = String(isKept);
      node.note.hidden = false;
      node.note.textContent = `${Number.isFinite(value) ? `conf ${value.toFixed(2)}` : "no conf"} · ${
        isKept ? "kept" : "dropped"
      }`;
      node.note.title = "trace confidence (its weakest window's mean negative top-k logprob)";
      node.note.classList.toggle("dropped", !isKept);
    }
  }

  /** A helper step whose answer came back empty: its node shows the text the run passed
   * on instead (the thinking, or a placeholder), marked as such. */
  notedSubstitutes(step, values) {
    const origins = values.samples || {};
    const texts = values.texts || {};
    for (const [index, origin] of Object.entries(origins)) {
      const node = this.nodes.get(`${step.id}#${index}`);
      if (!node) continue;
      if (typeof texts[index] === "string") node.text.textContent = texts[index];
      node.note.hidden = false;
      node.note.textContent =
        origin === "reasoning"
          ? "empty answer: passed on its thinking"
          : "wrote nothing: passed on a placeholder";
      node.note.title = "what the next prompt read in place of this sample's empty answer";
    }
  }

  runFinished(event) {
    this.finalStepId = event.step_id || null;
    this.finalAnswer = event.answer ?? null;
    this.markFinal();
  }

  showCost(step, node, index) {
    const seconds =
      step.finishedAt !== null && step.startedAt !== null ? step.finishedAt - step.startedAt : NaN;
    node.time.textContent = formatSeconds(seconds);
    if (step.usage && step.n === 1) {
      node.tokens.textContent = `${formatCount(step.usage.completion)} tok`;
      node.tokens.title = `prompt ${formatCount(step.usage.prompt)} (cached ${formatCount(
        step.usage.cached,
      )}), completion ${formatCount(step.usage.completion)}`;
    } else if (Number.isFinite(step.sampleTokens?.[index])) {
      node.tokens.textContent = `${formatCount(step.sampleTokens[index])} tok`;
      node.tokens.title = `completion tokens of this sample (the step's ${step.n} share one request)`;
    } else if (!step.streamed[index]) {
      node.tokens.textContent = "";
    }
  }

  groupCaption(step) {
    const parts = [`${step.name} × ${step.n}`, "one engine request"];
    if (step.usage) parts.push(`${formatCount(step.usage.completion)} tok`);
    if (step.finishedAt !== null && step.startedAt !== null) {
      parts.push(formatSeconds(step.finishedAt - step.startedAt));
    }
    return parts.join(" · ");
  }

  markFinal() {
    for (const [key, node] of this.nodes) {
      const isFinal = this.finalStepId !== null && key.startsWith(`${this.finalStepId}#`);
      node.root.classList.toggle("is-final", isFinal && key.endsWith("#0"));
      // Answers other than the run's final one stand out (a candidate the refine overruled).
      const differs = this.finalAnswer !== null && node.answerValue && node.answerValue !== this.finalAnswer;
      node.answer.classList.toggle("differs", Boolean(differs));
    }
  }

  // -- drawing ------------------------------------------------------------------------
  makeNode(step, index) {
    const root = el("article", "node");
    const label = step.n > 1 ? sampleLabel(step.name, index) : step.name;
    root.dataset.stepId = step.id;
    root.dataset.index = String(index);
    root.dataset.kind = step.kind;
    root.dataset.label = label;
    root.dataset.state = "running";
    if (step.final) root.dataset.final = "true";
    root.title = step.label;
    const head = el("header", "node-head");
    head.append(el("span", "node-label", label), el("span", `kind kind-${step.kind}`, step.kind));
    const status = el("span", "node-status");
    head.append(status);
    root.append(head);
    if (step.prompt) {
      const details = el("details", "node-prompt");
      details.append(el("summary", null, "prompt"), el("pre", null, step.prompt));
      root.append(details);
    }
    if (step.reads.length) {
      root.dataset.reads = step.reads.join(" ");
      const names = step.reads.map((key) => this.describe(key));
      root.append(el("div", "node-reads", `read ${names.join(", ")}`));
      root.addEventListener("mouseenter", () => this.highlight(step.reads, true));
      root.addEventListener("mouseleave", () => this.highlight(step.reads, false));
    }
    const reasoning = el("pre", "node-reasoning");
    reasoning.hidden = true;
    const text = el("pre", "node-text");
    const foot = el("footer", "node-foot");
    const tokens = el("span", "tokens");
    const time = el("span", "time");
    const answer = el("span", "answer-chip small");
    answer.hidden = true;
    const note = el("span", "note-chip small");
    note.hidden = true;
    foot.append(tokens, time, note, answer);
    root.append(reasoning, text, foot);
    return { root, text, reasoning, tokens, time, answer, status, note };
  }

  /** "population > member 3", "round 1 > member 2": where a sample a step read sits. */
  describe(key) {
    const [stepId, index] = key.split("#");
    const step = this.steps.get(stepId);
    if (!step) return key;
    const path = step.label.split(SEPARATOR);
    if (step.n > 1) return [...path.slice(0, -1), sampleLabel(step.name, Number(index))].join(SEPARATOR);
    return (path.length > 1 ? path.slice(0, -1) : path).join(SEPARATOR);
  }

  highlight(keys, on) {
    for (const key of keys) this.nodes.get(key)?.root.classList.toggle("is-read", on);
  }

  /** Arrows from each sample a step read to the step (an SVG under the nodes). */
  drawLinks() {
    const links = [];
    for (const step of this.steps.values()) {
      for (const from of step.reads) links.push([from, `${step.id}#0`]);
    }
    let svg = this.container.querySelector(":scope > svg.links");
    if (!links.length) {
      svg?.remove();
      return;
    }
    if (!svg) {
      svg = document.createElementNS(SVG, "svg");
      svg.classList.add("links");
      this.container.prepend(svg);
    }
    const box = this.container.getBoundingClientRect();
    const dx = this.container.scrollLeft - box.left;
    const dy = this.container.scrollTop - box.top;
    svg.setAttribute("width", String(this.container.scrollWidth));
    svg.setAttribute("height", String(this.container.scrollHeight));
    const marker = document.createElementNS(SVG, "marker");
    marker.id = "link-head";
    for (const [name, value] of Object.entries({ viewBox: "0 0 8 8", refX: "7", refY: "4", markerWidth: "7", markerHeight: "7", orient: "auto" })) {
      marker.setAttribute(name, value);
    }
    const head = document.createElementNS(SVG, "path");
    head.setAttribute("d", "M0,0 L8,4 L0,8 z");
    marker.append(head);
    const defs = document.createElementNS(SVG, "defs");
    defs.append(marker);
    const paths = [];
    for (const [from, to] of links) {
      const a = this.nodes.get(from)?.root;
      const b = this.nodes.get(to)?.root;
      if (!a?.isConnected || !b?.isConnected) continue;
      const ra = a.getBoundingClientRect();
      const rb = b.getBoundingClientRect();
      const x1 = ra.left + ra.width / 2 + dx;
      const y1 = ra.bottom + dy;
      const x2 = rb.left + rb.width / 2 + dx;
      const y2 = rb.top + dy;
      const mid = (y1 + y2) / 2;
      const path = document.createElementNS(SVG, "path");
      path.setAttribute("d", `M${x1},${y1} C${x1},${mid} ${x2},${mid} ${x2},${y2}`);
      path.setAttribute("marker-end", "url(#link-head)");
      path.dataset.from = from;
      path.dataset.to = to;
      paths.push(path);
    }
    svg.replaceChildren(defs, ...paths);
  }

  /** {start, end} of everything under a scope (end Infinity while a step runs). */
  span(scope) {
    let start = null;
    let end = null;
    let unknown = false;
    const visit = (s) => {
      for (const child of s.children) {
        if (child.scope) {
          visit(this.scopes.get(child.scope));
          continue;
        }
        const step = this.steps.get(child.step);
        if (step.startedAt === null) unknown = true;
        else start = start === null ? step.startedAt : Math.min(start, step.startedAt);
        const stepEnd = step.done ? step.finishedAt : Infinity;
        if (stepEnd === null) unknown = true;
        else end = end === null ? stepEnd : Math.max(end, stepEnd);
      }
    };
    visit(scope);
    return unknown ? { start: null, end: null } : { start, end };
  }

  /** Re-arrange the nodes after the tree's shape changed (nodes keep their text). */
  layout() {
    if (this.layoutPending) return;
    this.layoutPending = true;
    queueMicrotask(() => {
      this.layoutPending = false;
      const root = this.scopes.get(this.rootScopeId());
      this.container.replaceChildren(root ? this.drawScopeBody(root) : el("div"));
      this.markFinal();
      this.drawLinks();
    });
  }

  rootScopeId() {
    for (const id of this.scopes.keys()) if (scopeParent(id) === null) return id;
    return null;
  }

  drawScope(scope) {
    const box = el("section", "scope");
    box.dataset.scope = scope.id;
    if (scope.label) box.append(el("h3", "scope-label", scope.label));
    box.append(this.drawScopeBody(scope));
    for (const note of scope.notes) {
      const line = el("p", "scope-note", noteText(note));
      line.dataset.kind = String(note.kind || "");
      if (note.values?.probability !== undefined) line.dataset.probability = String(note.values.probability);
      if (note.values?.stop) line.dataset.stop = "true";
      box.append(line);
    }
    return box;
  }

  drawScopeBody(scope) {
    const body = el("div", "sequence");
    const children = scope.children;
    let i = 0;
    while (i < children.length) {
      const child = children[i];
      if (child.step) {
        const step = this.steps.get(child.step);
        let j = i + 1;
        while (j < children.length && children[j].scope) j++;
        const followers = children.slice(i + 1, j).map((c) => this.scopes.get(c.scope));
        if (step.n > 1 && followers.length > 0 && followers.length <= step.n) {
          body.append(this.drawColumns(step, followers));
          i = j;
          continue;
        }
        body.append(this.drawStep(step));
        i += 1;
        continue;
      }
      let j = i;
      while (j < children.length && children[j].scope) j++;
      const scopes = children
        .slice(i, j)
        .map((c) => this.scopes.get(c.scope))
        .sort((a, b) => scopeOrder(a.id) - scopeOrder(b.id));
      // Scopes that ran at once sit side by side; one that ran after them goes below.
      for (const group of rowsByTime(scopes, (s) => this.span(s))) {
        if (group.length === 1) body.append(this.drawScope(group[0]));
        else {
          const row = el("div", "row");
          for (const s of group) row.append(this.drawScope(s));
          body.append(row);
        }
      }
      i = j;
    }
    return body;
  }

  drawStep(step) {
    if (step.n === 1) return this.nodes.get(`${step.id}#0`).root;
    const group = el("div", "step-group");
    const caption = el("div", "group-caption", this.groupCaption(step));
    caption.dataset.groupFor = step.id;
    const row = el("div", "row");
    for (let i = 0; i < step.n; i++) row.append(this.nodes.get(`${step.id}#${i}`).root);
    group.append(caption, row);
    return group;
  }

  drawColumns(step, scopes) {
    const group = el("div", "step-group");
    const caption = el("div", "group-caption", this.groupCaption(step));
    caption.dataset.groupFor = step.id;
    const row = el("div", "row");
    // Scope k of the step's scope serves sample k-1 (scopes are numbered as created).
    const sorted = [...scopes].sort((a, b) => scopeOrder(a.id) - scopeOrder(b.id));
    const numbered = sorted.every((s) => scopeOrder(s.id) >= 1 && scopeOrder(s.id) <= step.n);
    const byOrder = new Map(sorted.map((s) => [scopeOrder(s.id), s]));
    for (let i = 0; i < step.n; i++) {
      const column = el("section", "scope column");
      const scope = numbered ? byOrder.get(i + 1) : sorted[i];
      if (scope) {
        column.dataset.scope = scope.id;
        if (scope.label) column.append(el("h3", "scope-label", scope.label));
      }
      const body = el("div", "sequence");
      body.append(this.nodes.get(`${step.id}#${i}`).root);
      if (scope) body.append(...this.drawScopeBody(scope).childNodes);
      column.append(body);
      row.append(column);
    }
    group.append(caption, row);
    return group;
  }
}

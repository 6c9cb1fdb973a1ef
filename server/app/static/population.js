// What the tree draws besides steps, from the trace alone (no DOM here, so it runs
// under node too): which earlier samples a step read (an RSA aggregation's members,
// `fields.members` = [[step id, sample], ...]), which sibling scopes ran one after
// another (rounds, waves: stacked) rather than at once (candidates: side by side), and
// what a strategy's `step_note` says (adaptive voting's stopping probability).

/** "stepId#index" keys of the samples a step_started event says it read: an RSA
 * aggregation's members, or the path a search step (beam, particle_filter) continues
 * (its `parent_step` and `sample`: so a search draws as its tree). */
export function readsOf(event) {
  let members = event?.fields?.members;
  if (event?.kind === "search_step" && event.parent_step) {
    members = [[event.parent_step, event.sample ?? 0]];
  }
  if (!Array.isArray(members)) return [];
  return members
    .filter((m) => Array.isArray(m) && m[0] !== null && m[0] !== undefined)
    .map(([stepId, index]) => `${stepId}#${Number(index) || 0}`);
}

/**
 * Sibling scopes in rows: a scope that started once every scope of the row before had
 * finished begins a new row (it ran after them); the others share a row (they ran at
 * once). `span(scope)` gives {start, end} in seconds (end Infinity while running, null
 * times when unknown: then nothing is split).
 */
export function rowsByTime(scopes, span) {
  const rows = [];
  let end = null;
  for (const scope of scopes) {
    const { start, end: scopeEnd } = span(scope);
    const after = rows.length > 0 && start !== null && end !== null && start >= end;
    if (rows.length === 0 || after) {
      rows.push([scope]);
      end = scopeEnd;
    } else {
      rows[rows.length - 1].push(scope);
      end = end === null || scopeEnd === null ? null : Math.max(end, scopeEnd);
    }
  }
  return rows;
}

const score = (x) => (Number.isFinite(Number(x)) ? Number(x).toFixed(2) : "?");

/** "score 0.83" for each path a verify step scored: "stepId#index" -> text. */
export function scoresOf(started, note) {
  const paths = started?.fields?.paths;
  const scores = note?.values?.scores;
  const out = {};
  if (!Array.isArray(paths) || !Array.isArray(scores)) return out;
  paths.forEach((path, i) => {
    if (Array.isArray(path) && path[0]) out[`${path[0]}#${Number(path[1]) || 0}`] = `score ${score(scores[i])}`;
  });
  return out;
}

/** One line for a note: "8 samples · leader 42 (6 vs 2) · P(majority) 0.96 ≥ 0.95: stop";
 * a search's levels and rounds, and a verifier-weighted vote, in words. */
export function noteText(note) {
  const v = note?.values || {};
  if (note?.kind === "beam") {
    return `level ${v.level}: kept ${(v.scores || []).length} paths, scores ${(v.scores || []).map(score).join(", ")}`;
  }
  if (note?.kind === "resample") {
    const weights = (v.log_weights || []).map(score).join(", ");
    return `round ${v.round}: log weights ${weights} · drew particles ${(v.drawn || []).join(", ")}`;
  }
  if (note?.kind === "weighted_vote") {
    const parts = (v.answers || []).map((a, i) => `${a} ${score((v.weights || [])[i])}`);
    return `verifier-weighted vote: ${parts.join(" · ")}`;
  }
  if (note?.kind !== "stopping") return `${note?.kind || "note"}: ${JSON.stringify(v)}`;
  const p = Number(v.probability);
  const parts = [`${v.samples} samples`];
  if (v.leader !== null && v.leader !== undefined) {
    const [first, second] = Array.isArray(v.votes) ? v.votes : [];
    parts.push(first === undefined ? `leader ${v.leader}` : `leader ${v.leader} (${first} vs ${second})`);
  }
  const sign = p >= Number(v.confidence) ? "≥" : "<";
  let verdict = v.rule === "esc"
    ? `window ${v.unanimous ? "unanimous" : "split"}`
    : `P(leader is the majority) ${p.toFixed(3)} ${sign} ${v.confidence}`;
  if (v.reason === "settled") verdict += ": stop";
  else if (v.reason === "max_k") verdict += ": stop at max_k";
  else if (v.reason === "budget") verdict += ": stop, budget spent";
  else verdict += ": draw another wave";
  parts.push(verdict);
  return parts.join(" · ");
}

function byKey(a, b) {
  const [stepA, indexA] = a.split("#");
  const [stepB, indexB] = b.split("#");
  return stepA === stepB ? Number(indexA) - Number(indexB) : stepA < stepB ? -1 : 1;
}

/**
 * A population run's grid from its events: one row per round (row 0: the members the
 * first round read), each cell a "stepId#index" key, and the links (from member to the
 * aggregation that read it).
 */
export function populationGrid(events) {
  const rows = new Map();
  const links = [];
  for (const event of events || []) {
    if (event?.type !== "step_started") continue;
    const reads = readsOf(event);
    if (!reads.length) continue;
    const round = Number(event.fields?.round) || 1;
    const to = `${event.step_id}#0`;
    if (!rows.has(round)) rows.set(round, []);
    rows.get(round).push(to);
    for (const from of reads) links.push({ from, to });
  }
  const first = [...new Set(links.filter((l) => rows.get(1)?.includes(l.to)).map((l) => l.from))];
  const grid = [first.sort(byKey), ...[...rows.keys()].sort((a, b) => a - b).map((r) => rows.get(r))];
  return { rows: rows.size ? grid : [], links };
}

// Talking to Ponder: the API key, JSON requests, and the SSE stream of a run.
//
// The key lives in this tab's sessionStorage and travels only in the Authorization
// header, never in a URL.

const KEY_STORAGE = "ponder.apiKey";

export class ApiError extends Error {
  constructor(status, message, param, code) {
    super(message);
    this.status = status;
    this.param = param || null;
    this.code = code || null;
  }
}

export const apiKey = {
  get() {
    return sessionStorage.getItem(KEY_STORAGE) || "";
  },
  set(key) {
    sessionStorage.setItem(KEY_STORAGE, key);
  },
  forget() {
    sessionStorage.removeItem(KEY_STORAGE);
  },
};

async function errorOf(response) {
  let error = {};
  try {
    error = (await response.json()).error || {};
  } catch {
    // not JSON: the status alone says what happened
  }
  return new ApiError(response.status, error.message || `HTTP ${response.status}`, error.param, error.code);
}

/** fetch() with the key and JSON; a non-2xx answer throws its ApiError (OpenAI shape). */
export async function request(path, { method = "GET", body, signal } = {}) {
  const headers = {};
  const key = apiKey.get();
  if (key) headers.Authorization = `Bearer ${key}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    signal,
    cache: "no-store",
  });
  if (!response.ok) throw await errorOf(response);
  return response;
}

/** The JSON payloads of an SSE body, up to [DONE]. */
export async function* sseData(response) {
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

// Folds a run's event stream into what the views show: text pieces tagged with who proposed
// them, the steps, the summary and the failure, if any. Pure, so it is unit-tested directly.

import type { FinishedEvent, RunEvent, StepEvent, TokenSource } from './api/types';

/** A piece of output whose tokens all came from one source. */
export interface Segment {
  text: string;
  source: TokenSource;
  /** Index (0-based, among the generated tokens) of the piece's first token: which step made it. */
  token: number;
}

export interface RunState {
  runId: number | null;
  promptTokens: number | null;
  segments: Segment[];
  text: string;
  tokens: number;
  steps: StepEvent[];
  summary: FinishedEvent | null;
  error: { code: string; message: string } | null;
  /** Wall-clock time (ms, performance.now) when the run started and when it ended. */
  startedAt: number | null;
  endedAt: number | null;
}

export function emptyRun(): RunState {
  return {
    runId: null,
    promptTokens: null,
    segments: [],
    text: '',
    tokens: 0,
    steps: [],
    summary: null,
    error: null,
    startedAt: null,
    endedAt: null,
  };
}

/** The source a text event is shown with: a drafted source if any token was drafted. */
export function dominantSource(sources: TokenSource[]): TokenSource {
  return sources.find((s) => s !== 'model') ?? 'model';
}

/** The 0-based head index k of a `medusa_head_k` source (shown to people as "head k+1"), else null. */
export function headOf(source: TokenSource | string): number | null {
  const m = /^medusa_head_(\d+)$/.exec(source);
  return m ? Number(m[1]) : null;
}

/** Applies one event to `state` in place and returns it (Svelte `$state` proxies track this). */
export function applyEvent(state: RunState, event: RunEvent, now: number = Date.now()): RunState {
  switch (event.type) {
    case 'started':
      state.runId = event.run_id;
      state.promptTokens = event.prompt_tokens;
      state.startedAt = now;
      break;
    case 'text': {
      if (event.text.length > 0) {
        const source = dominantSource(event.sources);
        const last = state.segments[state.segments.length - 1];
        if (last && last.source === source) last.text += event.text;
        else state.segments.push({ text: event.text, source, token: state.tokens });
        state.text += event.text;
      }
      // A remote engine's text comes without token ids: a piece counts as one, as the backend
      // counts it.
      state.tokens += event.token_ids.length || (event.text.length > 0 ? 1 : 0);
      break;
    }
    case 'step':
      state.steps.push(event);
      break;
    case 'finished':
      state.runId = event.run_id;
      state.summary = event;
      state.endedAt = now;
      break;
    case 'failed':
      state.runId = event.run_id;
      state.error = { code: event.code, message: event.message };
      state.endedAt = now;
      break;
  }
  return state;
}

export function isDone(state: RunState): boolean {
  return state.summary !== null || state.error !== null;
}

/** Live tokens per second from the events so far (the summary's figure once finished). */
export function liveTokensPerSecond(state: RunState, now: number = Date.now()): number {
  if (state.summary) return state.summary.tokens_per_second;
  if (state.startedAt === null || state.tokens === 0) return 0;
  const ms = (state.endedAt ?? now) - state.startedAt;
  return ms > 0 ? (state.tokens * 1000) / ms : 0;
}

/** Tokens drafted per step on average: 0 before any step, or when nothing was drafted. */
export function meanDrafted(steps: Pick<StepEvent, 'tree_size'>[]): number {
  if (steps.length === 0) return 0;
  return steps.reduce((sum, s) => sum + s.tree_size, 0) / steps.length;
}

/** Index of the first place (character, token) where `a` and `b` differ; null when they are equal. */
export function firstDifference<T>(a: ArrayLike<T>, b: ArrayLike<T>): number | null {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return i;
  return a.length === b.length ? null : n;
}

// A chat's turns, the messages a request sends for them, and answers rebuilt from what the backend
// stored (a reopened conversation, a run read back from the history). Pure, so it is unit-tested
// directly.

import type {
  ChatMessage,
  ConversationMessage,
  FinishedEvent,
  Mode,
  RunWithSteps,
  StepEvent,
  StopReason,
  TokenSource,
} from './api/types';
import type { RunTarget } from './engines';
import { applyEvent, emptyRun, type RunState, type Segment } from './run';

type StepTree = StepEvent['tree'];

export interface Turn {
  /** Unique within the chat: answers that replace others (regenerate, edit) get new elements. */
  id: number;
  role: 'user' | 'assistant';
  /**
   * A user's message. For an answer, the text written before its run (what a continued answer
   * already said, or a reopened answer whose run is not loaded); the run's text follows it.
   */
  content: string;
  run?: RunState;
  mode?: Mode;
  /** The remote engine that wrote the answer; null or absent: the model served here. */
  remote?: RunTarget;
  /** The step shown in the answer's inspector; null or absent when it is closed. */
  inspect?: number | null;
  /** An answer read back from a stored conversation rather than written in this page. */
  restored?: boolean;
  /** A restored answer's run, until `run` holds it. */
  runId?: number | null;
  /** A restored answer that its run is still writing. */
  answering?: boolean;
  /** A restored answer's run is being read. */
  loading?: boolean;
  /** Why a restored answer's run could not be shown. */
  loadError?: string;
  /** The runs this page saw write the answer before its current one (it was continued). */
  earlier?: EarlierRuns;
}

/** What the runs before a continued answer's current one wrote, and how long they took. */
export interface EarlierRuns {
  runs: number;
  tokens: number;
  ms: number;
}

/** `earlier` with `run` added, as an answer is continued. */
export function withEarlierRun(earlier: EarlierRuns | undefined, run: RunState | undefined): EarlierRuns | undefined {
  if (!run || (run.tokens === 0 && !run.summary)) return earlier;
  const ms = run.summary?.total_ms ?? (run.startedAt !== null && run.endedAt !== null ? run.endedAt - run.startedAt : 0);
  const sum = earlier ?? { runs: 0, tokens: 0, ms: 0 };
  return { runs: sum.runs + 1, tokens: sum.tokens + (run.summary?.tokens_generated ?? run.tokens), ms: sum.ms + ms };
}

/**
 * The whole answer's figures once a continued answer's current run finished: tokens and tokens
 * per second over all its runs; null for an answer written by one run.
 */
export function wholeAnswer(earlier: EarlierRuns | undefined, run: RunState): { runs: number; tokens: number; tokensPerSecond: number } | null {
  if (!earlier || !run.summary) return null;
  const tokens = earlier.tokens + run.summary.tokens_generated;
  const ms = earlier.ms + run.summary.total_ms;
  return { runs: earlier.runs + 1, tokens, tokensPerSecond: ms > 0 ? (tokens * 1000) / ms : 0 };
}

/** What a turn says: a question's text, or an answer's text so far. */
export function turnText(turn: Turn): string {
  return turn.role === 'assistant' ? turn.content + (turn.run?.text ?? '') : turn.content;
}

/** Whether an answer failed before it said anything: its exchange is not part of the chat. */
function failed(turn: Turn | undefined): boolean {
  return !!turn?.run?.error && turn.content === '';
}

/**
 * The messages of a request answering `turns` (the last a user's), or continuing them (the last
 * an answer): the system prompt first when it is not blank, then the turns. Exchanges whose answer
 * failed are left out, question and all.
 */
export function conversation(system: string, turns: Turn[]): ChatMessage[] {
  const messages: ChatMessage[] = system.trim() === '' ? [] : [{ role: 'system', content: system.trim() }];
  turns.forEach((turn, i) => {
    if (!failed(turn.role === 'user' ? turns[i + 1] : turn)) messages.push({ role: turn.role, content: turnText(turn) });
  });
  return messages;
}

/** Stop reasons after which an answer may have more to say. */
const UNFINISHED: StopReason[] = ['max_tokens', 'cancelled'];

/**
 * Whether Continue is offered for `turn`: the last answer, once its run stopped short (out of
 * tokens, or stopped). A restored answer's end is not known from the conversation alone: any that
 * says something and is no longer being written may be continued.
 */
export function canContinue(turn: Turn, last: boolean): boolean {
  if (!last || turn.role !== 'assistant' || turn.answering) return false;
  if (turn.restored) return turnText(turn) !== '';
  const reason = turn.run?.summary?.stop_reason;
  return reason !== undefined && UNFINISHED.includes(reason);
}

/** Text pieces for the tinted view: what came before the run as the model's own, then the run's. */
export function turnSegments(turn: Turn): Segment[] {
  const run = turn.run?.segments ?? [];
  return turn.content === '' ? run : [{ text: turn.content, source: 'model', token: -1 }, ...run];
}

/** Turns showing a stored conversation's messages, numbered from `firstId`. */
export function restoredTurns(messages: ConversationMessage[], firstId: number): Turn[] {
  return messages.map((m, i): Turn =>
    m.role === 'user'
      ? { id: firstId + i, role: 'user', content: m.content }
      : { id: firstId + i, role: 'assistant', content: m.content, restored: true, runId: m.run_id, answering: m.answering },
  );
}

/** Whether `turns` are the same messages as `messages`, in number and roles. */
export function sameShape(turns: Turn[], messages: ConversationMessage[]): boolean {
  return turns.length === messages.length && turns.every((t, i) => t.role === messages[i].role);
}

/**
 * A stored run as the chat shows a live one: its summary, its steps, and its output in pieces by
 * who proposed them. The pieces come from the steps' drafted trees (the texts of the emitted
 * tokens, token by token as a run streams them); when those do not spell the output exactly (no
 * steps or trees, or a character split across tokens), the output is one piece of the model's.
 */
export function storedRun({ run, steps }: RunWithSteps): RunState {
  const state = emptyRun();
  state.runId = run.id;
  state.promptTokens = run.prompt_tokens;
  state.steps = steps.map(
    (s): StepEvent => ({
      index: s.step_index,
      tree_size: s.tree_size,
      tree_depth: s.tree_depth,
      accepted_len: s.accepted_len,
      tokens: s.tokens,
      sources: s.sources as TokenSource[],
      depth_hits: s.depth_hits,
      draft_ms: s.draft_ms,
      verify_ms: s.verify_ms,
      // Null for runs stored before trees were kept: the inspector says so rather than draw one.
      tree: s.tree as StepTree,
      skip: s.skip as StepEvent['skip'],
      decision: s.decision,
    }),
  );
  const output = run.output ?? '';
  const pieces = stepPieces(state.steps)?.slice(0, run.tokens_generated ?? undefined);
  if (pieces && pieces.map((p) => p.text).join('') === output) {
    for (const p of pieces) applyEvent(state, { type: 'text', text: p.text, token_ids: p.tokens, sources: p.sources }, 0);
  } else {
    applyEvent(state, { type: 'text', text: output, token_ids: [], sources: ['model'] }, 0);
    state.tokens = run.tokens_generated ?? 0;
  }
  if (run.error !== null || run.status === 'failed') {
    state.error = { code: run.status, message: run.error ?? 'the run failed' };
  } else if (run.stop_reason !== null) {
    state.summary = summaryOf(run, state, output);
  }
  // Stored runs have no wall-clock times here; `endedAt` marks a run that is over.
  state.endedAt = run.status === 'running' ? null : 0;
  return state;
}

/**
 * The generated tokens with their texts: the first, read with the prompt before any step (the
 * token the first step's tree hangs from), then per step its accepted drafts and the model's own.
 */
function stepPieces(steps: StepEvent[]): { text: string; tokens: number[]; sources: TokenSource[] }[] | null {
  const first = (steps[0]?.tree as StepTree | null | undefined)?.root;
  if (!first) return null;
  const pieces = [{ text: first.text, tokens: [first.token], sources: ['model' as TokenSource] }];
  for (const step of steps) {
    const tree = step.tree as StepTree | null;
    if (!tree) return null;
    const path = new Set<number | null>([null]);
    const texts: string[] = [];
    tree.nodes.forEach((node, i) => {
      if (node.accepted && path.has(node.parent)) {
        path.add(i);
        texts.push(node.text);
      }
    });
    texts.push(tree.model_token.text);
    // A step may emit fewer tokens than it accepted (max tokens cuts it); a last token that ends
    // the generation is kept with the step but is not part of the output (the slice by
    // `tokens_generated` drops it).
    step.tokens.forEach((token, i) => pieces.push({ text: texts[i] ?? '', tokens: [token], sources: [step.sources[i] ?? 'model'] }));
  }
  return pieces;
}

function summaryOf(run: RunWithSteps['run'], state: RunState, output: string): FinishedEvent {
  const sum = (key: 'draft_ms' | 'verify_ms') => state.steps.reduce((total, s) => total + s[key], 0);
  return {
    run_id: run.id,
    text: output,
    prompt_tokens: run.prompt_tokens ?? 0,
    cached_prompt_tokens: 0,
    tokens_generated: run.tokens_generated ?? state.tokens,
    queue_ms: run.queue_ms ?? 0,
    ttft_ms: run.ttft_ms ?? 0,
    total_ms: run.total_ms ?? 0,
    tokens_per_second: run.tokens_per_second ?? 0,
    decode_tokens_per_second: run.decode_tokens_per_second ?? 0,
    stop_reason: run.stop_reason as StopReason,
    seed: run.seed ?? 0,
    token_ids: run.token_ids ?? [],
    mode: run.mode as Mode,
    steps: run.steps ?? state.steps.length,
    mean_accepted: run.mean_accepted ?? 1,
    acceptance_by_depth: run.acceptance_by_depth ?? [],
    draft_tokens: run.draft_tokens,
    accepted_draft_tokens: run.accepted_draft_tokens,
    draft_ms: sum('draft_ms'),
    verify_ms: sum('verify_ms'),
  };
}

/**
 * A restored answer split at its run: the text before the run (written by runs it continued) and
 * the run as the chat shows one. Null when the answer does not end with the run's output.
 */
export function withStoredRun(content: string, detail: RunWithSteps): { content: string; run: RunState } | null {
  const run = storedRun(detail);
  if (!content.endsWith(run.text)) return null;
  return { content: content.slice(0, content.length - run.text.length), run };
}

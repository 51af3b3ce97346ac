import { describe, expect, it } from 'vitest';
import type { ConversationMessage, RunRecord, RunWithSteps, StepRecord } from './api/types';
import {
  canContinue,
  conversation,
  restoredTurns,
  sameShape,
  storedRun,
  turnSegments,
  turnText,
  wholeAnswer,
  withEarlierRun,
  withStoredRun,
  type Turn,
} from './chat';
import { applyEvent, emptyRun, type RunState } from './run';

function answer(id: number, text: string, error = false): Turn {
  const run: RunState = { ...emptyRun(), text };
  if (error) run.error = { code: 'busy', message: 'queue full' };
  return { id, role: 'assistant', content: '', run, mode: 'normal' };
}

function question(id: number, content: string): Turn {
  return { id, role: 'user', content };
}

/** A live answer that finished for `reason`. */
function stopped(id: number, text: string, reason: 'max_tokens' | 'cancelled' | 'end_of_generation' | 'stop_string' | 'context_full'): Turn {
  const turn = answer(id, text);
  applyEvent(turn.run!, { type: 'finished', ...finished(reason) });
  return turn;
}

function finished(reason: 'max_tokens' | 'cancelled' | 'end_of_generation' | 'stop_string' | 'context_full') {
  return {
    run_id: 9, text: '', prompt_tokens: 1, cached_prompt_tokens: 0, tokens_generated: 1, queue_ms: 0, ttft_ms: 1,
    total_ms: 1, tokens_per_second: 1, decode_tokens_per_second: 1, stop_reason: reason, seed: 1, token_ids: [],
    mode: 'normal' as const, steps: 1, mean_accepted: 1, acceptance_by_depth: [], draft_tokens: null,
    accepted_draft_tokens: null, draft_ms: 0, verify_ms: 0,
  };
}

function message(id: number, role: 'user' | 'assistant', content: string, run_id: number | null = null, answering = false): ConversationMessage {
  return { id, role, content, run_id, answering, created_at: '2025-03-12T10:00:00Z' };
}

describe('conversation', () => {
  it('sends the turns in order, answers by their run’s text', () => {
    expect(conversation('', [question(0, 'Hi'), answer(1, 'Hello!'), question(2, 'And?')])).toEqual([
      { role: 'user', content: 'Hi' },
      { role: 'assistant', content: 'Hello!' },
      { role: 'user', content: 'And?' },
    ]);
  });

  it('puts the system prompt first, trimmed, and leaves a blank one out', () => {
    expect(conversation('  Be brief.\n', [question(0, 'Hi')])).toEqual([
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Hi' },
    ]);
    expect(conversation(' \n ', [question(0, 'Hi')])).toEqual([{ role: 'user', content: 'Hi' }]);
  });

  it('leaves out exchanges whose answer failed, question and all', () => {
    const turns = [question(0, 'One'), answer(1, '', true), question(2, 'Two'), answer(3, 'B'), question(4, 'Three')];
    expect(conversation('S', turns)).toEqual([
      { role: 'system', content: 'S' },
      { role: 'user', content: 'Two' },
      { role: 'assistant', content: 'B' },
      { role: 'user', content: 'Three' },
    ]);
  });

  it('keeps the question whose failed answer was dropped to ask again', () => {
    expect(conversation('', [question(0, 'One')])).toEqual([{ role: 'user', content: 'One' }]);
  });

  it('ends with the answer to continue, its earlier text and its run’s together', () => {
    const continued: Turn = { ...answer(1, ' and a pear'), content: 'An apple' };
    expect(conversation('S', [question(0, 'Fruit?'), continued])).toEqual([
      { role: 'system', content: 'S' },
      { role: 'user', content: 'Fruit?' },
      { role: 'assistant', content: 'An apple and a pear' },
    ]);
  });

  it('keeps an answer whose continuation failed: what it said before stays', () => {
    const continued: Turn = { ...answer(1, '', true), content: 'An apple' };
    expect(conversation('', [question(0, 'Fruit?'), continued, question(2, 'More?')])).toEqual([
      { role: 'user', content: 'Fruit?' },
      { role: 'assistant', content: 'An apple' },
      { role: 'user', content: 'More?' },
    ]);
  });

  it('sends reopened answers by their stored text', () => {
    const turns = restoredTurns([message(1, 'user', 'Hi'), message(2, 'assistant', 'Hello!', 4)], 0);
    expect(conversation('', turns)).toEqual([
      { role: 'user', content: 'Hi' },
      { role: 'assistant', content: 'Hello!' },
    ]);
  });
});

describe('turnText', () => {
  it('is a question’s text or an answer’s text so far', () => {
    expect(turnText(question(0, 'Q'))).toBe('Q');
    expect(turnText(answer(1, '```py\nx'))).toBe('```py\nx');
    expect(turnText({ id: 2, role: 'assistant', content: '' })).toBe('');
  });

  it('puts an answer’s earlier text before its run’s', () => {
    expect(turnText({ ...answer(1, ' world'), content: 'Hello' })).toBe('Hello world');
    expect(turnText({ id: 2, role: 'assistant', content: 'Stored', restored: true })).toBe('Stored');
  });
});

describe('canContinue', () => {
  it('offers the last live answer that ran out of tokens or was stopped', () => {
    expect(canContinue(stopped(1, 'A', 'max_tokens'), true)).toBe(true);
    expect(canContinue(stopped(1, 'A', 'cancelled'), true)).toBe(true);
    expect(canContinue(stopped(1, 'A', 'end_of_generation'), true)).toBe(false);
    expect(canContinue(stopped(1, 'A', 'stop_string'), true)).toBe(false);
    expect(canContinue(stopped(1, 'A', 'context_full'), true)).toBe(false);
  });

  it('never offers an answer that is not the last, still streams, or failed', () => {
    expect(canContinue(stopped(1, 'A', 'max_tokens'), false)).toBe(false);
    expect(canContinue(answer(1, 'streaming'), true)).toBe(false);
    expect(canContinue(answer(1, '', true), true)).toBe(false);
    expect(canContinue(question(0, 'Q'), true)).toBe(false);
  });

  it('offers a reopened last answer that says something and is no longer being written', () => {
    const [, done] = restoredTurns([message(1, 'user', 'Q'), message(2, 'assistant', 'A', 3)], 0);
    expect(canContinue(done, true)).toBe(true);
    expect(canContinue(done, false)).toBe(false);
    const [, writing] = restoredTurns([message(1, 'user', 'Q'), message(2, 'assistant', 'A', 3, true)], 0);
    expect(canContinue(writing, true)).toBe(false);
    const [, empty] = restoredTurns([message(1, 'user', 'Q'), message(2, 'assistant', '', null)], 0);
    expect(canContinue(empty, true)).toBe(false);
  });
});

describe('a continued answer', () => {
  /** A finished run that wrote `tokens` in `ms`. */
  function ran(tokens: number, ms: number): RunState {
    const run = emptyRun();
    applyEvent(run, { type: 'finished', ...finished('max_tokens'), tokens_generated: tokens, total_ms: ms });
    return run;
  }

  it('counts every run that wrote it, the last one too', () => {
    const earlier = withEarlierRun(withEarlierRun(undefined, ran(64, 2000)), ran(64, 2000));
    expect(earlier).toEqual({ runs: 2, tokens: 128, ms: 4000 });
    expect(wholeAnswer(earlier, ran(32, 1000))).toEqual({ runs: 3, tokens: 160, tokensPerSecond: 32 });
  });

  it('says nothing for an answer one run wrote, or before the last run finished', () => {
    expect(wholeAnswer(undefined, ran(10, 100))).toBeNull();
    expect(wholeAnswer({ runs: 1, tokens: 5, ms: 50 }, emptyRun())).toBeNull();
    // A run that never started adds nothing.
    expect(withEarlierRun(undefined, emptyRun())).toBeUndefined();
  });
});

describe('turnSegments', () => {
  it('is the run’s pieces, after the earlier text as the model’s own', () => {
    const turn = answer(1, '');
    applyEvent(turn.run!, { type: 'text', text: ' more', token_ids: [5, 6], sources: ['model', 'medusa_head_0'] });
    expect(turnSegments(turn)).toEqual([{ text: ' more', source: 'medusa_head_0', token: 0 }]);
    turn.content = 'Said';
    expect(turnSegments(turn)).toEqual([
      { text: 'Said', source: 'model', token: -1 },
      { text: ' more', source: 'medusa_head_0', token: 0 },
    ]);
  });
});

describe('restoredTurns', () => {
  it('numbers the messages from the given id, answers with their run and whether still written', () => {
    expect(
      restoredTurns([message(10, 'user', 'Q'), message(11, 'assistant', 'A', 7), message(12, 'user', 'R'), message(13, 'assistant', 'B', 8, true)], 5),
    ).toEqual([
      { id: 5, role: 'user', content: 'Q' },
      { id: 6, role: 'assistant', content: 'A', restored: true, runId: 7, answering: false },
      { id: 7, role: 'user', content: 'R' },
      { id: 8, role: 'assistant', content: 'B', restored: true, runId: 8, answering: true },
    ]);
    expect(restoredTurns([], 3)).toEqual([]);
  });
});

describe('sameShape', () => {
  it('compares the number of messages and their roles', () => {
    const messages = [message(1, 'user', 'Q'), message(2, 'assistant', 'A')];
    expect(sameShape([question(0, 'other'), answer(1, 'x')], messages)).toBe(true);
    expect(sameShape([question(0, 'Q')], messages)).toBe(false);
    expect(sameShape([question(0, 'Q'), question(1, 'A')], messages)).toBe(false);
  });
});

function record(fields: Partial<RunRecord>): RunRecord {
  return {
    id: 4, uid: 'u', status: 'finished', created_at: '2025-03-12T10:00:00Z', mode: 'medusa',
    model: { name: 'm', path: '/m.gguf', file_type: 'Q4_1', identity: '' }, heads: null, draft_model: null, tree: null,
    prompt: { kind: 'chat', content: [] }, sampling: {}, max_tokens: 8, stop: [], comparison_id: null,
    queue_ms: 2, engine: null, output: 'The cat sat', stop_reason: 'max_tokens', prompt_tokens: 12, tokens_generated: 4,
    ttft_ms: 30, total_ms: 90, tokens_per_second: 44.4, decode_tokens_per_second: 50, steps: 2,
    mean_accepted: 2, acceptance_by_depth: [0.5], draft_tokens: 2, accepted_draft_tokens: 2, token_ids: null, seed: 77, error: null, finished_at: '2025-03-12T10:00:01Z',
    ...fields,
  };
}

/**
 * A step hanging from `root` that accepted `drafts` (texts of a chain of drafted nodes) then the
 * model's `own` token, emitting `tokens`.
 */
function step(index: number, root: [number, string], tokens: number[], drafts: string[], own: string): StepRecord {
  const nodes = drafts.map((text, i) => ({
    token: tokens[i], text, parent: i === 0 ? null : i - 1, source: `medusa_head_${i}`, rank: 0, accepted: true,
  }));
  // A rejected guess hanging from the root: not on the path, its text not emitted.
  nodes.push({ token: 999, text: 'x', parent: null, source: 'medusa_head_0', rank: 1, accepted: false });
  return {
    step_index: index, tree_size: nodes.length, tree_depth: drafts.length, accepted_len: tokens.length, tokens,
    sources: [...drafts.map((_, i) => `medusa_head_${i}`), 'model'].slice(0, tokens.length),
    depth_hits: drafts.map(() => true), draft_ms: 1.5, verify_ms: 10,
    tree: { root: { token: root[0], text: root[1] }, nodes, model_token: { token: tokens[drafts.length] ?? 0, text: own } },
    skip: null,
  };
}

describe('storedRun', () => {
  it('rebuilds the tinted pieces from the first token and the steps’ emitted tokens, and the summary', () => {
    // "The" is read with the prompt; step 0 emits " cat", step 1 accepts " sat" " on" and adds " a".
    const steps = [step(0, [1, 'The'], [2], [], ' cat'), step(1, [2, ' cat'], [3, 4, 5], [' sat', ' on'], ' a')];
    const run = storedRun({ run: record({ output: 'The cat sat on a', tokens_generated: 5 }), steps });
    expect(run.runId).toBe(4);
    expect(run.text).toBe('The cat sat on a');
    expect(run.tokens).toBe(5);
    expect(run.segments).toEqual([
      { text: 'The cat', source: 'model', token: 0 },
      { text: ' sat', source: 'medusa_head_0', token: 2 },
      { text: ' on', source: 'medusa_head_1', token: 3 },
      { text: ' a', source: 'model', token: 4 },
    ]);
    expect(run.steps.map((s) => [s.index, s.accepted_len, s.tree?.nodes.length])).toEqual([
      [0, 1, 1],
      [1, 3, 3],
    ]);
    expect(run.summary).toMatchObject({
      run_id: 4, stop_reason: 'max_tokens', tokens_generated: 5, tokens_per_second: 44.4, decode_tokens_per_second: 50,
      ttft_ms: 30, mean_accepted: 2, acceptance_by_depth: [0.5], mode: 'medusa', seed: 77, draft_ms: 3, verify_ms: 20,
      draft_tokens: 2, accepted_draft_tokens: 2,
    });
    expect(run.error).toBeNull();
    expect(run.endedAt).toBe(0);
  });

  it('leaves out the token that ended the generation', () => {
    const steps = [step(0, [1, 'The'], [2, 3], [' cat'], '<|im_end|>')];
    expect(storedRun({ run: record({ output: 'The cat', tokens_generated: 2 }), steps }).segments).toEqual([
      { text: 'The', source: 'model', token: 0 },
      { text: ' cat', source: 'medusa_head_0', token: 1 },
    ]);
  });

  it('stops a step’s text at the tokens it emitted', () => {
    const steps = [step(0, [1, 'The'], [2], [' cat', ' sat'], ' on')];
    expect(storedRun({ run: record({ output: 'The cat', tokens_generated: 2 }), steps }).segments).toEqual([
      { text: 'The', source: 'model', token: 0 },
      { text: ' cat', source: 'medusa_head_0', token: 1 },
    ]);
  });

  it('shows the output as the model’s own when the steps do not spell it', () => {
    const plain = storedRun({ run: record({ mode: 'normal', output: 'Hello', tokens_generated: 2 }), steps: [] });
    expect(plain.segments).toEqual([{ text: 'Hello', source: 'model', token: 0 }]);
    expect(plain.tokens).toBe(2);
    const noTrees = { ...step(0, [1, 'Hel'], [2], [], 'lo'), tree: null };
    expect(storedRun({ run: record({ output: 'Hello' }), steps: [noTrees] }).segments).toEqual([
      { text: 'Hello', source: 'model', token: 0 },
    ]);
    // A character split over two tokens reads as replacement characters token by token.
    const split = storedRun({ run: record({ output: 'é' }), steps: [step(0, [1, '\ufffd'], [2], [], '\ufffd')] });
    expect(split.segments).toEqual([{ text: 'é', source: 'model', token: 0 }]);
  });

  it('reads a failed run as an error, without a summary', () => {
    const run = storedRun({ run: record({ status: 'failed', output: null, stop_reason: null, error: 'out of memory' }), steps: [] });
    expect(run.error).toEqual({ code: 'failed', message: 'out of memory' });
    expect(run.summary).toBeNull();
    expect(run.text).toBe('');
  });
});

describe('withStoredRun', () => {
  it('splits an answer into what earlier runs wrote and the run', () => {
    const detail: RunWithSteps = { run: record({ mode: 'normal', output: ' and a pear.' }), steps: [] };
    const split = withStoredRun('An apple and a pear.', detail);
    expect(split?.content).toBe('An apple');
    expect(split?.run.text).toBe(' and a pear.');
    expect(withStoredRun(' and a pear.', detail)?.content).toBe('');
  });

  it('is null when the answer does not end with the run’s output', () => {
    expect(withStoredRun('Something else', { run: record({ mode: 'normal', output: 'Hello' }), steps: [] })).toBeNull();
  });
});

import { describe, expect, it } from 'vitest';
import type { Comparison, ComparisonMember, ListedRun, ModeFigures, RunRecord, StepRecord } from './api/types';
import { stepFigures } from './runFigures';
import {
  buildQuery,
  compareSelected,
  comparisonOf,
  divergenceQuestion,
  draftingText,
  isWholeRun,
  nextSort,
  pickedRuns,
  promptLetters,
  promptMismatchText,
  promptText,
  replayDelayMs,
  replayTotals,
  replayedTokens,
  samePrompt,
  togglePick,
} from './history';

describe('history', () => {
  it('shows a chat by its last user message', () => {
    expect(promptText({ kind: 'text', content: 'Once' })).toBe('Once');
    expect(
      promptText({
        kind: 'chat',
        content: [
          { role: 'user', content: 'a' },
          { role: 'assistant', content: 'b' },
          { role: 'user', content: 'c' },
          { role: 'assistant', content: 'd' },
        ],
      }),
    ).toBe('c');
  });

  it('builds the query of a page from the filters', () => {
    const q = buildQuery({ mode: 'medusa', status: '', engine: '', model: ' smol ', search: ' giraff ', since: '', until: '' }, 'tokens_per_second', 'desc', 2);
    expect(q).toEqual({ sort: 'tokens_per_second', order: 'desc', limit: 50, offset: 100, mode: 'medusa', model: 'smol', search: 'giraff' });
    const dated = buildQuery({ mode: '', status: 'finished', engine: 'lab', model: '', search: '', since: '2026-01-02', until: '2026-01-03' }, 'created_at', 'asc', 0);
    expect(dated.engine).toBe('lab');
    expect(new Date(dated.since!).getDate()).toBe(2);
    expect(new Date(dated.until!).getHours()).toBe(23);
  });

  it('compares selected runs with the first normal one', () => {
    const run = (id: number, mode: string, output: string, tps: number) =>
      ({ id, mode, output, tokens_per_second: tps, decode_tokens_per_second: null, token_ids: null }) as unknown as RunRecord;
    const figures = compareSelected([run(1, 'medusa', 'abc', 30), run(2, 'normal', 'abc', 20), run(3, 'lookup', 'abX', 10)]);
    expect(figures.map((f) => [f.run.id, f.speedup, f.identical, f.differsAt])).toEqual([
      [1, 1.5, true, null],
      [2, null, null, null],
      [3, 0.5, false, 'character 2'],
    ]);
  });

  const prompt = { kind: 'text', content: 'Name a colour.' } as const;
  const picked = (id: number, mode: string, decode: number, draft_tokens: number | null = 5) =>
    ({ id, mode, prompt, output: 'Red.', tokens_per_second: decode / 2, decode_tokens_per_second: decode, draft_tokens, token_ids: null }) as unknown as RunRecord;

  it('calls no hand-picked run a gain: one run each cannot tell speed from noise', () => {
    const figures = compareSelected([
      picked(1, 'normal', 100),
      picked(2, 'medusa', 136),
      picked(3, 'normal', 120),
      picked(4, 'lookup', 150, 0),
      { ...picked(5, 'auto', 90), prompt: { kind: 'text', content: 'Other.' } } as RunRecord,
    ]);
    expect(figures.map((f) => [f.speedup, f.speedupCell.text, f.speedupCell.tone])).toEqual([
      [null, 'baseline', 'muted'],
      // Decode speeds, as Compare measures.
      [1.36, '1.36×', 'plain'],
      [1.2, '1.20× (normal again)', 'muted'],
      [1.5, 'noise (measured 1.50×)', 'muted'],
      [0.9, '0.90× (another prompt)', 'muted'],
    ]);
  });

  it("shows a comparison's runs with the comparison's own figures and verdicts", () => {
    const runs = [picked(1, 'normal', 100), picked(2, 'medusa', 136), picked(3, 'lookup', 300), picked(4, 'normal', 90), picked(5, 'medusa', 130), picked(6, 'lookup', 290)];
    const member = (run_id: number, mode: string, round: number, speedup: number | null) =>
      ({ run_id, mode, round, speedup }) as ComparisonMember;
    const mode = (name: string, verdict: ModeFigures['verdict']) =>
      ({ mode: name, verdict, speedup: { median: 1.4, min: 1.36, max: 1.44, count: 2 }, mean_accepted: 1.0, drafted_per_step: 0.0, drafted_tokens: 0 }) as ModeFigures;
    const comparison = {
      id: 7,
      runs: [member(1, 'normal', 0, null), member(2, 'medusa', 0, 1.36), member(3, 'lookup', 0, 3.0), member(4, 'normal', 1, null), member(5, 'medusa', 1, 1.44), member(6, 'lookup', 1, 3.22)],
      modes: [mode('normal', null), mode('medusa', 'drafted_nothing'), mode('lookup', 'faster')],
    } as unknown as Comparison;
    expect(comparisonOf(runs, [comparison])).toBe(comparison);
    expect(comparisonOf(runs.slice(1), [comparison])).toBeNull();
    const cells = compareSelected(runs, comparison).map((f) => [f.speedupCell.text, f.speedupCell.tone]);
    expect(cells).toEqual([
      ['baseline', 'muted'],
      ['noise (measured 1.36×)', 'muted'],
      ['3.00×', 'gain'],
      // Paired by round, not against the first normal run.
      ['round 2 baseline', 'muted'],
      ['noise (measured 1.44×)', 'muted'],
      ['3.22×', 'gain'],
    ]);
    expect(compareSelected(runs, comparison)[1].speedupCell.title).toMatch(/^noise: drafted nothing/);
  });

  it('compares token by token where both runs kept their tokens', () => {
    const run = (id: number, mode: string, token_ids: number[] | null) =>
      ({ id, mode, output: 'same text', tokens_per_second: 10, token_ids }) as unknown as RunRecord;
    const figures = compareSelected([
      run(1, 'normal', [5, 6, 7]),
      run(2, 'medusa', [5, 6, 7]),
      run(3, 'lookup', [5, 9, 7]),
      run(4, 'auto', [5, 6]),
      run(5, 'auto', null),
    ]);
    expect(figures.map((f) => [f.identical, f.differsAt])).toEqual([
      [null, null],
      [true, null],
      [false, 'token 2'],
      [false, 'token 3'],
      [true, null],
    ]);
  });

  it('asks where greedy runs of the served model part, and only those', () => {
    const base = {
      id: 1,
      mode: 'normal',
      engine: null,
      model: { path: '/m.gguf' },
      sampling: { temperature: 0 },
      prompt: { kind: 'chat', content: [{ role: 'user', content: 'Hi' }] },
      token_ids: [5, 6, 7],
    } as unknown as RunRecord;
    const other = (change: Partial<RunRecord>) => ({ ...base, id: 2, mode: 'medusa', token_ids: [5, 8, 7], ...change }) as RunRecord;
    expect(divergenceQuestion(base, other({}), '/m.gguf')).toEqual({
      messages: [{ role: 'user', content: 'Hi' }],
      expected: [5, 6, 7],
      got: [5, 8, 7],
    });
    const text = { kind: 'text', content: 'Once' } as const;
    expect(divergenceQuestion({ ...base, prompt: text }, other({ prompt: text }), '/m.gguf')).toEqual({
      prompt: 'Once',
      expected: [5, 6, 7],
      got: [5, 8, 7],
    });
    expect(divergenceQuestion(base, other({ token_ids: [5, 6, 7] }), '/m.gguf')).toBeNull();
    expect(divergenceQuestion(base, other({}), '/other.gguf')).toBeNull();
    expect(divergenceQuestion(base, other({ engine: 'lab' }), '/m.gguf')).toBeNull();
    expect(divergenceQuestion(base, other({ sampling: { temperature: 0.7 } }), '/m.gguf')).toBeNull();
    expect(divergenceQuestion(base, other({ prompt: text }), '/m.gguf')).toBeNull();
    expect(divergenceQuestion(base, other({ token_ids: null }), '/m.gguf')).toBeNull();
    expect(divergenceQuestion({ ...base, mode: 'lookup' }, other({}), '/m.gguf')).toBeNull();
  });

  it('flips the order on the same column and starts a new one descending', () => {
    expect(nextSort({ sort: 'created_at', order: 'desc' }, 'created_at')).toEqual({ sort: 'created_at', order: 'asc' });
    expect(nextSort({ sort: 'created_at', order: 'asc' }, 'ttft_ms')).toEqual({ sort: 'ttft_ms', order: 'desc' });
  });

  it('toggles a run in the selection by id, in the order picked', () => {
    expect(togglePick([1], 2)).toEqual([1, 2]);
    expect(togglePick([1, 2], 1)).toEqual([2]);
    expect(togglePick([], 3)).toEqual([3]);
  });

  it('tells a whole run from a listed one and selects only runs whose records came', () => {
    const listed = { id: 1, mode: 'normal' } as ListedRun;
    const whole = { id: 2, mode: 'normal', token_ids: null } as RunRecord;
    expect(isWholeRun(listed)).toBe(false);
    expect(isWholeRun(whole)).toBe(true);
    const three = { id: 3, token_ids: [1] } as RunRecord;
    expect(pickedRuns([3, 1, 2], { 2: whole, 3: three }).map((r) => r.id)).toEqual([3, 2]);
  });

  it('paces the replay within bounds', () => {
    expect(replayDelayMs(10)).toBe(100);
    expect(replayDelayMs(1000)).toBe(10);
    expect(replayDelayMs(0)).toBe(2000);
    expect(replayDelayMs(Number.NaN)).toBe(100);
  });

  it('totals the replayed steps', () => {
    const step = (accepted_len: number, tree_size: number, draft_ms: number, verify_ms: number) =>
      ({ accepted_len, tree_size, tree_depth: tree_size ? 2 : 0, depth_hits: [], draft_ms, verify_ms }) as unknown as StepRecord;
    const steps = [step(1, 4, 1, 10), step(3, 4, 2, 20), step(2, 0, 0.5, 8)];
    expect(replayTotals(steps, 2)).toEqual({
      steps: 2,
      tokens: 4,
      meanAccepted: 2,
      drafted: 8,
      acceptedDrafts: 2,
      draftMs: 3,
      verifyMs: 30,
    });
    expect(replayTotals(steps, 0)).toEqual({
      steps: 0,
      tokens: 0,
      meanAccepted: 1,
      drafted: 0,
      acceptedDrafts: 0,
      draftMs: 0,
      verifyMs: 0,
    });
  });
});

describe('replayedTokens', () => {
  it('counts the first token, from the prompt, before any step', () => {
    expect(replayedTokens(0, 7)).toBe(1);
    expect(replayedTokens(4, 7)).toBe(5);
  });

  it('stops at what the run wrote: an end token accepted in the last step is not written', () => {
    expect(replayedTokens(6, 7)).toBe(7);
    expect(replayedTokens(7, 7)).toBe(7);
  });

  it('counts nothing for a run that wrote nothing', () => {
    expect(replayedTokens(0, 0)).toBe(0);
  });
});

describe('draftingText', () => {
  const step = (tree_size: number, accepted_len: number) => ({ tree_size, tree_depth: tree_size ? 3 : 0, accepted_len, depth_hits: [] });

  it('counts what the trees held and what was accepted', () => {
    expect(draftingText('medusa', stepFigures([step(63, 3), step(63, 1)]))).toBe('126 tokens (63.0 per step), 2 accepted');
  });

  it('says why nothing was drafted', () => {
    const figures = stepFigures([step(0, 1)]);
    expect(draftingText('medusa', figures)).toMatch(/^nothing: under auto drafting the draft budget/);
    expect(draftingText('lookup', figures)).toMatch(/^nothing: no earlier text matched/);
    expect(draftingText('auto', figures)).toBe(
      'nothing: neither an earlier match nor the heads had a draft that the budget expected to pay ' +
        'on this machine; choose a named tree to see every guess',
    );
  });
});

describe('runs of different prompts side by side', () => {
  const chat = (...contents: string[]) =>
    ({ prompt: { kind: 'chat', content: contents.map((content, i) => ({ role: i === 0 && contents.length > 1 ? 'system' : 'user', content })) } }) as unknown as RunRecord;
  const text = (content: string) => ({ prompt: { kind: 'text', content } }) as unknown as RunRecord;

  it('finds nothing to say when every run was asked the same thing', () => {
    expect(promptLetters([chat('Hi'), chat('Hi'), chat('Hi')])).toBeNull();
    expect(promptMismatchText([chat('Hi'), chat('Hi')])).toBeNull();
    expect(promptMismatchText([text('Hi')])).toBeNull();
    expect(promptMismatchText([])).toBeNull();
    expect(samePrompt(chat('Hi').prompt, chat('Hi').prompt)).toBe(true);
    expect(samePrompt(chat('Hi').prompt, text('Hi').prompt)).toBe(false);
  });

  it('letters each prompt in the order it first comes', () => {
    expect(promptLetters([chat('Hi'), chat('Bye'), chat('Hi'), text('Hi')])).toEqual(['A', 'B', 'A', 'C']);
    const many = Array.from({ length: 28 }, (_, i) => text(`prompt ${i}`));
    expect(promptLetters(many)?.slice(24)).toEqual(['Y', 'Z', '27', '28']);
  });

  it('says the outputs answer different prompts, and what that means for the comparison', () => {
    expect(promptMismatchText([chat('Name a colour.'), chat('Name a fruit.'), chat('Name a colour.')])).toBe(
      'These runs were asked 2 different prompts (marked A, B in the Prompt row). Where a run’s prompt is not the ' +
        'baseline’s, its output differs because it answers something else, not because of how it was decoded, and its ' +
        'speed-up sets different work side by side. Select runs of one prompt to see what decoding changes.',
    );
  });

  it('says so too when the prompts end with the same message', () => {
    expect(promptMismatchText([chat('Be brief.', 'Hi'), chat('Hi'), text('Hi')])).toBe(
      'These runs were asked 3 different prompts that end with the same message (their system prompts, earlier ' +
        'turns or chat format differ; marked A, B, C in the Prompt row). Where a run’s prompt is not the baseline’s, ' +
        'its output differs because it answers something else, not because of how it was decoded, and its speed-up ' +
        'sets different work side by side. Select runs of one prompt to see what decoding changes.',
    );
  });
});

import { describe, expect, it } from 'vitest';
import { DEFAULT_SETTINGS, requestFields, settingsProblem } from './sampling';

describe('generation settings', () => {
  it('accepts the defaults and sends them greedy with a fresh seed', () => {
    expect(settingsProblem(DEFAULT_SETTINGS)).toBeNull();
    expect(requestFields(DEFAULT_SETTINGS)).toEqual({
      sampling: { temperature: 0, top_k: 40, top_p: 0.95, min_p: 0.05, repeat_penalty: 1, seed: null },
      max_tokens: 256,
    });
  });

  it('names the first out-of-range field', () => {
    expect(settingsProblem({ ...DEFAULT_SETTINGS, top_p: 0 })).toBe('top-p must be in (0, 1]');
    expect(settingsProblem({ ...DEFAULT_SETTINGS, seed: '12x' })).toBe('seed must be a whole number');
    expect(settingsProblem({ ...DEFAULT_SETTINGS, max_tokens: 0 })).toBe('max tokens must be at least 1');
  });

  it('sends a seed and a draft cap when given', () => {
    const fields = requestFields({ ...DEFAULT_SETTINGS, seed: ' 42 ', max_draft_tokens: 8 });
    expect(fields.sampling?.seed).toBe(42);
    expect(fields.max_draft_tokens).toBe(8);
  });
});

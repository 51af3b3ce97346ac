import { describe, expect, it } from 'vitest';
import type { RunRecord } from './api/types';
import { DEFAULT_SETTINGS, greedy, isGreedy, modelSettings, requestFields, runSettings, settingsProblem, settingsSource } from './sampling';
import type { Info } from './api/types';

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

  it('asks for JSON: any object with an empty schema box, else the schema typed', () => {
    expect(requestFields({ ...DEFAULT_SETTINGS, json: true }).json).toBe(true);
    const schema = '{"type": "object", "required": ["name"]}';
    expect(requestFields({ ...DEFAULT_SETTINGS, json: true, json_schema: schema }).json).toEqual({ type: 'object', required: ['name'] });
    // A schema left in the box while JSON is off is neither checked nor sent.
    expect(settingsProblem({ ...DEFAULT_SETTINGS, json_schema: '{oops' })).toBeNull();
    expect(requestFields({ ...DEFAULT_SETTINGS, json_schema: schema }).json).toBeUndefined();
    expect(settingsProblem({ ...DEFAULT_SETTINGS, json: true, json_schema: '{oops' })).toMatch(/^the JSON schema is not JSON: /);
    expect(settingsProblem({ ...DEFAULT_SETTINGS, json: true, json_schema: '[1]' })).toBe('the JSON schema must be an object, such as {"type": "object"}');
  });

  it("starts chats from the model's sampling, else from the chat default the backend reports", () => {
    const info = (from_model: string[]) =>
      ({
        model: {
          sampling_defaults: {
            params: { temperature: 0.7, top_k: 40, top_p: 0.9, min_p: 0.05, repeat_penalty: 1.1, repeat_last_n: 64, seed: null },
            from_model,
          },
        },
      }) as unknown as Info;
    const settings = modelSettings(info([]), { ...DEFAULT_SETTINGS, max_tokens: 512 });
    expect(settings).toEqual({ ...DEFAULT_SETTINGS, temperature: 0.7, top_p: 0.9, repeat_penalty: 1.1, max_tokens: 512 });
    expect(settingsSource(info([]))).toBe("the playground's chat default");
    expect(settingsSource(info(['general.sampling.temp']))).toBe("the model's recommended sampling");
    expect(modelSettings(null)).toEqual(DEFAULT_SETTINGS);
  });

  it('makes settings greedy in one step', () => {
    const warm = { ...DEFAULT_SETTINGS, temperature: 0.7, repeat_penalty: 1.1, seed: '3' };
    expect(isGreedy(warm)).toBe(false);
    expect(greedy(warm)).toEqual({ ...warm, temperature: 0, repeat_penalty: 1 });
    expect(isGreedy(greedy(warm))).toBe(true);
    expect(isGreedy(DEFAULT_SETTINGS)).toBe(true);
  });

  it('takes up the settings a stored run was written with, keeping what runs do not record', () => {
    const run = {
      max_tokens: 64,
      sampling: { temperature: 0.7, top_k: 20, top_p: 0.9, min_p: 0.1, repeat_penalty: 1.1, repeat_last_n: 64, seed: 42 },
    } as unknown as RunRecord;
    const base = { ...DEFAULT_SETTINGS, max_draft_tokens: 6, json: true, json_schema: '{}' };
    expect(runSettings(run, base)).toEqual({
      temperature: 0.7,
      top_k: 20,
      top_p: 0.9,
      min_p: 0.1,
      repeat_penalty: 1.1,
      seed: '42',
      max_tokens: 64,
      max_draft_tokens: 6,
      json: true,
      json_schema: '{}',
    });
    const fresh = { ...run, sampling: { temperature: 0 } } as unknown as RunRecord;
    expect(runSettings(fresh, { ...base, seed: '7' })).toMatchObject({ temperature: 0, top_k: 40, seed: '', max_tokens: 64 });
  });
});

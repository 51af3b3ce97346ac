// Generation settings as the UI edits them, checked before they are sent.

import type { PlaygroundRequest, Info, RunRecord, SamplingParams } from './api/types';

export interface GenerationSettings {
  temperature: number;
  top_k: number;
  top_p: number;
  min_p: number;
  repeat_penalty: number;
  /** Empty for a fresh seed each run. */
  seed: string;
  max_tokens: number;
  /** 0: the engine's own budget. */
  max_draft_tokens: number;
  /** The answer must be JSON: any JSON object, or one that follows `json_schema`. */
  json: boolean;
  /** A JSON schema (as text) the answer must follow when `json` is on; empty for any object. */
  json_schema: string;
}

/** Greedy decoding, the settings comparisons start from: every mode must then answer alike. */
export const DEFAULT_SETTINGS: GenerationSettings = {
  temperature: 0,
  top_k: 40,
  top_p: 0.95,
  min_p: 0.05,
  repeat_penalty: 1,
  seed: '',
  max_tokens: 256,
  max_draft_tokens: 0,
  json: false,
  json_schema: '',
};

/**
 * The settings chats start with on the loaded model: its recommended sampling (GGUF
 * `general.sampling.*`), else the backend's chat default (temperature 0.7, top-p 0.9, repeat
 * penalty 1.1), which keeps small models from looping. Lengths come from `base`.
 */
export function modelSettings(info: Info | null, base: GenerationSettings = DEFAULT_SETTINGS): GenerationSettings {
  const params = info?.model?.sampling_defaults.params;
  if (!params) return { ...base };
  const { temperature, top_k, top_p, min_p, repeat_penalty } = params;
  return { ...base, temperature, top_k, top_p, min_p, repeat_penalty };
}

/** Where `modelSettings` took its sampling from, in words. */
export function settingsSource(info: Info | null): string {
  const keys = info?.model?.sampling_defaults.from_model ?? [];
  return keys.length > 0 ? "the model's recommended sampling" : "the playground's chat default";
}

/** `s` made greedy: the most likely token every time, no repeat penalty. */
export function greedy(s: GenerationSettings): GenerationSettings {
  return { ...s, temperature: 0, repeat_penalty: 1 };
}

export function isGreedy(s: GenerationSettings): boolean {
  return s.temperature === 0 && s.repeat_penalty === 1;
}

/** The first problem with `s`, or null when it can be sent. */
export function settingsProblem(s: GenerationSettings): string | null {
  if (!(s.temperature >= 0 && s.temperature <= 5)) return 'temperature must be between 0 and 5';
  if (!(Number.isInteger(s.top_k) && s.top_k >= 0)) return 'top-k must be a whole number ≥ 0';
  if (!(s.top_p > 0 && s.top_p <= 1)) return 'top-p must be in (0, 1]';
  if (!(s.min_p >= 0 && s.min_p < 1)) return 'min-p must be in [0, 1)';
  if (!(s.repeat_penalty > 0 && s.repeat_penalty <= 10)) return 'repeat penalty must be in (0, 10]';
  if (s.seed.trim() !== '' && !/^\d+$/.test(s.seed.trim())) return 'seed must be a whole number';
  if (!(Number.isInteger(s.max_tokens) && s.max_tokens >= 1)) return 'max tokens must be at least 1';
  if (!(Number.isInteger(s.max_draft_tokens) && s.max_draft_tokens >= 0)) {
    return 'max draft tokens must be a whole number ≥ 0';
  }
  if (s.json) return schemaProblem(s.json_schema);
  return null;
}

/** What is wrong with a JSON schema typed into the schema box, or null (empty is fine). */
export function schemaProblem(text: string): string | null {
  if (text.trim() === '') return null;
  try {
    const schema: unknown = JSON.parse(text);
    return typeof schema === 'object' && schema !== null && !Array.isArray(schema) ? null : 'the JSON schema must be an object, such as {"type": "object"}';
  } catch (err) {
    return `the JSON schema is not JSON: ${(err as Error).message}`;
  }
}

/** The settings the presets keep: lengths, the seed and the answer's format. */
export function keptByPresets(s: GenerationSettings): Pick<GenerationSettings, 'seed' | 'max_tokens' | 'max_draft_tokens' | 'json' | 'json_schema'> {
  const { seed, max_tokens, max_draft_tokens, json, json_schema } = s;
  return { seed, max_tokens, max_draft_tokens, json, json_schema };
}

/** The request fields the settings stand for. */
export function requestFields(s: GenerationSettings): Pick<PlaygroundRequest, 'sampling' | 'max_tokens' | 'max_draft_tokens' | 'json'> {
  const sampling: Partial<SamplingParams> = {
    temperature: s.temperature,
    top_k: s.top_k,
    top_p: s.top_p,
    min_p: s.min_p,
    repeat_penalty: s.repeat_penalty,
    seed: s.seed.trim() === '' ? null : Number(s.seed.trim()),
  };
  return {
    sampling,
    max_tokens: s.max_tokens,
    ...(s.max_draft_tokens > 0 ? { max_draft_tokens: s.max_draft_tokens } : {}),
    ...jsonField(s.json, s.json_schema),
  };
}

/** The request's `json` field: none, any JSON object, or the typed schema (checked first). */
export function jsonField(json: boolean, schema: string): Pick<PlaygroundRequest, 'json'> {
  if (!json) return {};
  return { json: schema.trim() === '' ? true : (JSON.parse(schema) as Record<string, unknown>) };
}

/**
 * The settings `run` was written with, over `base` (what a run does not record, such as the
 * draft cap, stays as it was). A seed is kept only where the run was asked for one.
 */
export function runSettings(run: RunRecord, base: GenerationSettings): GenerationSettings {
  const sampling = run.sampling as Partial<SamplingParams> | null;
  const number = (value: unknown, fallback: number) => (typeof value === 'number' && Number.isFinite(value) ? value : fallback);
  return {
    ...base,
    temperature: number(sampling?.temperature, base.temperature),
    top_k: number(sampling?.top_k, base.top_k),
    top_p: number(sampling?.top_p, base.top_p),
    min_p: number(sampling?.min_p, base.min_p),
    repeat_penalty: number(sampling?.repeat_penalty, base.repeat_penalty),
    seed: typeof sampling?.seed === 'number' ? String(sampling.seed) : '',
    max_tokens: run.max_tokens,
  };
}

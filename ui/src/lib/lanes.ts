// Several prompts at once: lane status and the batch's aggregate throughput.

import { isDone, type RunState } from './run';

export type LaneStatus = 'queued' | 'running' | 'finished' | 'failed' | 'cancelled';

export function laneStatus(run: RunState): LaneStatus {
  if (run.error) return 'failed';
  if (run.summary) return run.summary.stop_reason === 'cancelled' ? 'cancelled' : 'finished';
  return run.runId === null ? 'queued' : 'running';
}

/** Generated tokens of all lanes over the wall time since the batch started, in tokens/s. */
export function aggregateTokensPerSecond(runs: RunState[], startedAt: number, now: number): number {
  const end = runs.every(isDone) ? Math.max(...runs.map((r) => r.endedAt ?? now)) : now;
  const seconds = (end - startedAt) / 1000;
  const tokens = runs.reduce((sum, r) => sum + r.tokens, 0);
  return seconds > 0 ? tokens / seconds : 0;
}

/** Non-empty lines of `text`, trimmed: one prompt each. */
export function promptLines(text: string): string[] {
  return text
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '');
}

export const PRESET_PROMPTS = [
  'Write a haiku about the sea.',
  'List five fruits and their colours.',
  'Write a Python function that reverses a string.',
  'Explain what a black hole is to a child.',
  'Tell a two-sentence story about a lost key.',
  'What are the planets of the solar system?',
  'Give three tips for a good night’s sleep.',
  'Translate "good morning" into French, Spanish and German.',
];

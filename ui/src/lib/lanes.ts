// Several prompts at once: lane status and the batch's aggregate throughput.

import type { EngineMetrics } from './api/types';
import { isDone, type RunState } from './run';

export type LaneStatus = 'queued' | 'running' | 'finished' | 'failed' | 'cancelled';

/** The error code a lane is given when it was stopped while still waiting for a slot. */
export const CANCELLED_BEFORE_START = 'cancelled';

export function laneStatus(run: RunState): LaneStatus {
  if (run.error) return run.error.code === CANCELLED_BEFORE_START ? 'cancelled' : 'failed';
  if (run.summary) return run.summary.stop_reason === 'cancelled' ? 'cancelled' : 'finished';
  return run.runId === null ? 'queued' : 'running';
}

/** Whether a lane still waits for or holds a slot. */
export function laneActive(status: LaneStatus): boolean {
  return status === 'queued' || status === 'running';
}

/** Generated tokens of all lanes over the wall time since the batch started, in tokens/s. */
export function aggregateTokensPerSecond(runs: RunState[], startedAt: number, now: number): number {
  if (runs.length === 0) return 0;
  const end = runs.every(isDone) ? Math.max(...runs.map((r) => r.endedAt ?? now)) : now;
  const seconds = (end - startedAt) / 1000;
  const tokens = runs.reduce((sum, r) => sum + r.tokens, 0);
  return seconds > 0 ? tokens / seconds : 0;
}

/** How many lanes are in each status. */
export function laneCounts(runs: RunState[]): Record<LaneStatus, number> {
  const counts: Record<LaneStatus, number> = { queued: 0, running: 0, finished: 0, failed: 0, cancelled: 0 };
  for (const run of runs) counts[laneStatus(run)] += 1;
  return counts;
}

/** One cell per decoding slot of the engine, busy ones first. */
export function slotCells(metrics: Pick<EngineMetrics, 'slots' | 'active'>): boolean[] {
  const busy = Math.min(metrics.active, metrics.slots);
  return Array.from({ length: metrics.slots }, (_, i) => i < busy);
}

/** Non-empty lines of `text`, trimmed: one prompt each. */
export function promptLines(text: string): string[] {
  return text
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '');
}

/**
 * Short prompts of different kinds (chat, facts, list, code, story), so the lanes differ in
 * length; all of them at once fill the slots several times over.
 */
export const PRESET_PROMPTS = [
  'Write a haiku about the sea.',
  'List five fruits and their colours.',
  'Write a Python function that reverses a string.',
  'Explain what a black hole is to a child.',
  'Tell a two-sentence story about a lost key.',
  'What are the planets of the solar system?',
  'Give three tips for a good night’s sleep.',
  'Translate "good morning" into French, Spanish and German.',
  'Name three animals that live in the Arctic.',
  'Write a limerick about a cat.',
  'At what temperature does water boil, in Fahrenheit?',
  'Write a JavaScript function that sums an array of numbers.',
  'Describe a sunset in one sentence.',
  'List the first five prime numbers.',
  'Suggest three names for a coffee shop.',
  'Why is the sky blue? Answer in two sentences.',
];

/** The preset picker's choices: how many of the preset prompts, and in words. */
export const PRESETS: { count: number; label: string }[] = [
  { count: 3, label: '3 mixed prompts' },
  { count: 4, label: '4 mixed prompts' },
  { count: 8, label: '8: chat, code, lists, a story, facts' },
  { count: PRESET_PROMPTS.length, label: `All ${PRESET_PROMPTS.length}: the queue at work` },
];

// What the Training view shows of a heads training job, kept pure so it is unit-tested: the
// request its form makes, the job's state and progress in words, and its figures as uPlot data.

import { sizeText } from './catalog';
import { counted } from './words';
import type {
  DeletedTrainingJob,
  EvaluationPoint,
  Info,
  LossPoint,
  ModelsOnDisk,
  PhaseTime,
  TrainingFigures,
  TrainingJob,
  TrainingReport,
  TrainingRequest,
  TrainingSettings,
  TuneSummary,
} from './api/types';

/**
 * Fewest answered prompts a job may ask for: training holds one in 10 out to measure the heads
 * (the server's default, which refuses fewer with the same reason).
 */
export const MIN_TRAINING_PROMPTS = 10;

const PHASES: Record<string, string> = {
  starting: 'Starting',
  loading_model: 'Loading the model',
  collecting: 'Collecting answers',
  training: 'Training',
  writing: 'Writing the heads',
  tuning: 'Tuning',
  done: 'Done',
};

/** A phase in words; an unknown one as it is named, readable. */
export function phaseName(phase: string): string {
  const known = PHASES[phase];
  if (known) return known;
  return upperFirst(phase.replace(/_/g, ' '));
}

function lowerFirst(text: string): string {
  return text.charAt(0).toLowerCase() + text.slice(1);
}

/** The job's status with the phase it is in, or stopped in. */
export function statusText(job: Pick<TrainingJob, 'status' | 'phase'>): string {
  const phase = lowerFirst(phaseName(job.phase));
  switch (job.status) {
    case 'running':
      return `Running: ${phase}`;
    case 'finished':
      return 'Finished';
    case 'cancelled':
      return `Cancelled while ${phase}`;
    case 'failed':
      return `Failed while ${phase}`;
    case 'interrupted':
      return `Interrupted while ${phase} (the server stopped)`;
    default:
      return `${job.status}: ${phase}`;
  }
}

const grouped = new Intl.NumberFormat('en-US');

/** `1234` as `1,234`. */
export function count(n: number): string {
  return grouped.format(n);
}

/** An estimate of the time a phase still needs, in round words; empty when there is none. */
export function timeLeftText(seconds: number | null | undefined): string {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds) || seconds < 0) return '';
  if (seconds < 10) return 'a few seconds left';
  if (seconds < 60) return `about ${Math.round(seconds / 5) * 5} s left`;
  const minutes = Math.round(seconds / 60);
  if (minutes < 60) return `about ${minutes} min left`;
  const hours = Math.floor(minutes / 60);
  const rest = minutes % 60;
  return `about ${hours} h${rest ? ` ${rest} min` : ''} left`;
}

/** A time taken: `0.2 s`, `12 s`, `2 min 5 s`, `1 h 3 min`. */
export function durationText(seconds: number): string {
  if (seconds < 10) return `${seconds.toFixed(1)} s`;
  const whole = Math.round(seconds);
  if (whole < 60) return `${whole} s`;
  const minutes = Math.floor(whole / 60);
  if (minutes < 60) return `${minutes} min${whole % 60 ? ` ${whole % 60} s` : ''}`;
  const rest = minutes % 60;
  return `${Math.floor(minutes / 60)} h${rest ? ` ${rest} min` : ''}`;
}

/** The time each phase took, in the order they ran. */
export function phaseTimes(times: readonly PhaseTime[]): { phase: string; text: string }[] {
  return times.map((t) => ({ phase: phaseName(t.phase), text: durationText(t.seconds) }));
}

/**
 * How far the job is in its phase: counts while it runs (with the time left, when estimated),
 * what it got to when it stopped, what it did when it finished.
 */
export function progressText(job: Pick<TrainingJob, 'status' | 'phase' | 'figures'>): string {
  const f = job.figures;
  const answers = `${count(f.answered)} of ${count(f.prompts)} (${count(f.answer_tokens)} tokens)`;
  const training = `epoch ${f.epoch} of ${f.epochs}, step ${count(f.step)} of ${count(f.steps)}`;
  const tuning = `${f.tuned} of ${f.tune_prompts} prompts`;
  if (job.status === 'finished') {
    return (
      `Done: ${count(f.answered)} answers (${count(f.answer_tokens)} tokens), ` +
      `${counted(f.epochs, 'epoch')}, ${counted(f.steps, 'step', undefined, count(f.steps))}, ${tuning} tuned on`
    );
  }
  const running = job.status === 'running';
  let text: string;
  switch (job.phase) {
    case 'collecting':
      text = `${running ? 'Collecting answers' : 'Answers collected'}: ${answers}`;
      break;
    case 'training':
      text = `${running ? 'Training' : 'Trained'}: ${training}`;
      break;
    case 'tuning':
      text = `${running ? 'Tuning' : 'Tuned'}: ${tuning}`;
      break;
    default:
      // Before collecting: nothing to count yet; after training: the answers are what it has.
      text = f.answered > 0 ? `${phaseName(job.phase)}; answers collected: ${answers}` : phaseName(job.phase);
  }
  const left = running ? timeLeftText(f.seconds_left) : '';
  return left ? `${text} · ${left}` : text;
}

/** What a job runs with, in one line. */
export function settingsText(settings: TrainingSettings): string {
  const prompts = settings.prompts_file ? ` from ${settings.prompts_file}` : '';
  const vocab = settings.vocab_subset ? `, ${count(settings.vocab_subset)} frequent tokens` : '';
  return (
    `${count(settings.samples)} prompts${prompts}, ${count(settings.max_tokens)} tokens each; ` +
    `${counted(settings.heads, 'head')}${vocab}, ${counted(settings.epochs, 'epoch')}; ` +
    `tuned on ${counted(settings.tune_prompts, 'prompt')}`
  );
}

/** How far the phase under way is (0..1), where it is counted. */
export function phaseShare(job: Pick<TrainingJob, 'phase' | 'figures'>): number | null {
  const f = job.figures;
  const of = (done: number, all: number) => (all > 0 ? Math.min(1, done / all) : null);
  switch (job.phase) {
    case 'collecting':
      return of(f.answered, f.prompts);
    case 'training':
      return of(f.step, f.steps);
    case 'tuning':
      return of(f.tuned, f.tune_prompts);
    default:
      return null;
  }
}

/** Whether the job can be stopped now: while it runs, but not during its final tune. */
export function canCancel(job: Pick<TrainingJob, 'status' | 'phase'>): boolean {
  return job.status === 'running' && job.phase !== 'tuning';
}

export function canResume(job: Pick<TrainingJob, 'status'>): boolean {
  return job.status === 'cancelled' || job.status === 'failed' || job.status === 'interrupted';
}

/** The question asked before a job is deleted. */
export function deleteQuestion(job: Pick<TrainingJob, 'id' | 'name' | 'status' | 'heads_path'>): string {
  const heads = job.status === 'finished' && job.heads_path ? ` The heads it wrote stay (${job.heads_path}).` : '';
  return `Delete training job ${job.id} (${job.name}) and the answers it collected?${heads}`;
}

/**
 * Where the job's heads go, in words: chosen when it started, written once it finished. Null
 * for a job that has no heads file yet.
 */
export function headsText(job: Pick<TrainingJob, 'status' | 'heads_path'>): string | null {
  if (!job.heads_path) return null;
  return job.status === 'finished' ? `Heads written to ${job.heads_path}` : `Heads will be written to ${job.heads_path}`;
}

/** "Deleted job 3, freeing 230 MB of collected answers." */
export function deletedText(deleted: DeletedTrainingJob): string {
  return deleted.freed_bytes > 0
    ? `Deleted job ${deleted.id}, freeing ${sizeText(deleted.freed_bytes)} of collected answers.`
    : `Deleted job ${deleted.id}.`;
}

/**
 * The job a list opens on: the one chosen before while it is still listed, else the running
 * one, else the latest (the list comes latest first).
 */
export function defaultJob(jobs: readonly TrainingJob[], chosen: number | null): number | null {
  if (chosen !== null && jobs.some((j) => j.id === chosen)) return chosen;
  return (jobs.find((j) => j.status === 'running') ?? jobs[0])?.id ?? null;
}

/**
 * A job's name cut where a narrow list may shorten it: the end that tells jobs of one model
 * apart (`-3.medusa.gguf`, ` (job 3)`) stays whole, the model's name before it may be elided.
 */
export function jobNameParts(name: string): { start: string; end: string } {
  const end = /(-\d+)?(\.medusa)?\.gguf$|\s\(job \d+\)$/i.exec(name)?.[0] ?? '';
  return { start: name.slice(0, name.length - end.length), end };
}

/** `jobs` with `job` in place of its older snapshot, or first when it is new. */
export function withJob(jobs: readonly TrainingJob[], job: TrainingJob): TrainingJob[] {
  const at = jobs.findIndex((j) => j.id === job.id);
  if (at < 0) return [job, ...jobs];
  const next = [...jobs];
  next[at] = job;
  return next;
}

export interface ModelChoice {
  path: string;
  label: string;
}

/**
 * The models heads can be trained for: the GGUF models on disk (not heads, not unfinished
 * downloads), once each, the loaded one first even when it is in none of the folders. A file
 * name in two folders is told apart by its folder.
 */
export function modelChoices(disk: ModelsOnDisk | null, info: Info | null): ModelChoice[] {
  const found: { path: string; name: string; folder: string }[] = [];
  const loaded = info?.model?.path ?? null;
  for (const folder of disk?.folders ?? []) {
    for (const m of folder.models) {
      if (m.heads || m.partial || found.some((f) => f.path === m.path)) continue;
      found.push({ path: m.path, name: m.file_name, folder: folder.path });
    }
  }
  if (loaded && !found.some((f) => f.path === loaded)) {
    const slash = Math.max(loaded.lastIndexOf('/'), loaded.lastIndexOf('\\'));
    found.push({ path: loaded, name: loaded.slice(slash + 1), folder: loaded.slice(0, Math.max(slash, 0)) });
  }
  found.sort((a, b) => Number(b.path === loaded) - Number(a.path === loaded));
  return found.map((f) => {
    const twin = found.some((o) => o !== f && o.name === f.name);
    const label = twin ? `${f.name} (${f.folder})` : f.name;
    return { path: f.path, label: f.path === loaded ? `${label}, loaded now` : label };
  });
}

/** The form's fields as typed: numbers, or null / '' when left empty. */
export interface TrainingForm {
  model: string;
  prompts: string;
  samples: number | string | null;
  maxTokens: number | string | null;
  epochs: number | string | null;
  tunePrompts: number | string | null;
}

function given(value: number | string | null): number | undefined {
  if (value === null || value === '') return undefined;
  const n = typeof value === 'number' ? value : Number(value.trim());
  // Zero, negative or fractional counts go as typed: the backend names the field it refuses.
  return Number.isNaN(n) ? undefined : n;
}

/** The request the form makes: empty fields left out, for the backend's defaults. */
export function trainingRequest(form: TrainingForm): TrainingRequest {
  const request: TrainingRequest = { model: form.model.trim() };
  const prompts = form.prompts.trim();
  if (prompts) request.prompts = prompts;
  const fields = [
    ['samples', form.samples],
    ['max_tokens', form.maxTokens],
    ['epochs', form.epochs],
    ['tune_prompts', form.tunePrompts],
  ] as const;
  for (const [key, value] of fields) {
    const n = given(value);
    if (n !== undefined) request[key] = n;
  }
  return request;
}

/** uPlot's columns: the x values, then one series each (null where a series has no value). */
export type ChartColumns = [number[], ...(number | null)[][]];

/**
 * The points of the latest training run: a resumed job trains again from its first step, and
 * its points then start over after those of the attempt before.
 */
export function latestRun<T extends { step: number }>(points: readonly T[]): T[] {
  let start = 0;
  for (let i = 1; i < points.length; i++) if (points[i].step <= points[i - 1].step) start = i;
  return points.slice(start);
}

/** How many heads the figures speak of. */
export function headCount(figures: TrainingFigures, heads = 0): number {
  let n = heads;
  for (const p of figures.losses) n = Math.max(n, p.head_losses.length);
  for (const e of figures.evaluations) n = Math.max(n, e.top1.length);
  return n;
}

/** Training loss per head against the optimizer step. */
export function lossColumns(losses: readonly LossPoint[], heads: number): ChartColumns {
  const points = latestRun(losses);
  const columns: ChartColumns = [points.map((p) => p.step)];
  for (let h = 0; h < heads; h++) columns.push(points.map((p) => p.head_losses[h] ?? null));
  return columns;
}

/** Held-out top-1 accuracy per head, in percent, against the optimizer step. */
export function top1Columns(evaluations: readonly EvaluationPoint[], heads: number): ChartColumns {
  const points = latestRun(evaluations);
  const columns: ChartColumns = [points.map((p) => p.step)];
  for (let h = 0; h < heads; h++) {
    columns.push(points.map((p) => (p.top1[h] === undefined ? null : round(p.top1[h] * 100, 2))));
  }
  return columns;
}

/** Tokens per step a 64-node tree from the held-out accuracy would give, against the step. */
export function treeColumns(evaluations: readonly EvaluationPoint[]): ChartColumns {
  const points = latestRun(evaluations);
  return [points.map((p) => p.step), points.map((p) => p.tree_tokens_per_step)];
}

function round(value: number, digits: number): number {
  const scale = 10 ** digits;
  return Math.round(value * scale) / scale;
}

/** A share (0..1) as a percentage with one decimal. */
export function percent(share: number): string {
  return `${(share * 100).toFixed(1)}%`;
}

/** Each head's held-out top-1 accuracy, before and after training. */
export function headAccuracy(report: TrainingReport): { head: number; top1: string; top5: string; untrained: string | null }[] {
  return report.heldout_top1.map((top1, i) => ({
    head: i + 1,
    top1: percent(top1),
    top5: report.heldout_top5[i] === undefined ? '–' : percent(report.heldout_top5[i]),
    untrained: report.untrained_top1[i] === undefined ? null : percent(report.untrained_top1[i]),
  }));
}

/** What the tune after training measured and decided, in one line. */
export function tuneText(tune: TuneSummary | null): string {
  if (!tune) return 'Not tuned.';
  const parts: string[] = [];
  if (tune.measured_tokens_per_step !== null) parts.push(`measured ${tune.measured_tokens_per_step.toFixed(2)} tokens per step`);
  if (tune.chosen_nodes !== null) {
    const expected = tune.chosen_expected_tokens_per_step;
    parts.push(`chose a tree of ${tune.chosen_nodes} nodes${expected !== null ? ` (${expected.toFixed(2)} tokens per step expected)` : ''}`);
  }
  if (tune.predicted_speedup !== null) parts.push(`${tune.predicted_speedup.toFixed(2)}× predicted speed-up`);
  const decision = upperFirst(tune.decision);
  return parts.length ? `${upperFirst(parts.join(', '))}. ${decision}` : decision;
}

function upperFirst(text: string): string {
  return text.charAt(0).toUpperCase() + text.slice(1);
}

// The models card's words and figures: sizes, a download's progress, which heads go with a
// model, and what each file on disk may do.

import type { DiskModel, DownloadProgress, HubFile, ModelsOnDisk } from './api/types';

/** A size as people read it: "98 MB", "1.07 GB". */
export function sizeText(bytes: number): string {
  if (bytes >= 1e9) return `${(bytes / 1e9).toFixed(2)} GB`;
  if (bytes >= 1e6) return `${Math.round(bytes / 1e6)} MB`;
  if (bytes >= 1e3) return `${Math.round(bytes / 1e3)} kB`;
  return `${bytes} B`;
}

/**
 * "412 MB of 1.07 GB (38%) · 12 MB/s · 54 s left": the speed from what this attempt fetched in
 * `elapsedMs` (bytes kept from an earlier attempt are not counted as fetched now).
 */
export function progressText(p: DownloadProgress, elapsedMs: number): string {
  const share = p.total > 0 ? Math.floor((p.downloaded / p.total) * 100) : 0;
  const parts = [`${sizeText(p.downloaded)} of ${sizeText(p.total)} (${share}%)`];
  const fetched = p.downloaded - p.resumed_from;
  if (elapsedMs >= 500 && fetched > 0) {
    const perSecond = fetched / (elapsedMs / 1000);
    parts.push(`${sizeText(perSecond)}/s`);
    const left = (p.total - p.downloaded) / perSecond;
    if (p.downloaded < p.total) parts.push(`${durationText(left)} left`);
  }
  if (p.resumed_from > 0) parts.push(`resumed at ${sizeText(p.resumed_from)}`);
  return parts.join(' · ');
}

function durationText(seconds: number): string {
  if (seconds < 90) return `${Math.max(1, Math.round(seconds))} s`;
  if (seconds < 5400) return `${Math.round(seconds / 60)} min`;
  return `${(seconds / 3600).toFixed(1)} h`;
}

/** The heads file made for `model` in the same folder (`NAME.medusa.gguf` beside `NAME.gguf`). */
export function headsFor(model: DiskModel, folder: DiskModel[]): DiskModel | null {
  const stem = model.file_name.replace(/\.gguf$/i, '');
  return folder.find((m) => m.heads && !m.partial && m.file_name.toLowerCase() === `${stem}.medusa.gguf`.toLowerCase()) ?? null;
}

/** A model on disk as a picker offers it: its file, the heads made for it, whether it is in use. */
export interface LoadableModel {
  path: string;
  fileName: string;
  heads: string | null;
  loaded: boolean;
}

/**
 * The models a picker offers from `disk`, folder by folder: whole files that are models (not
 * heads, not unfinished downloads), each once, with the heads made for it beside it.
 */
export function loadableModels(disk: ModelsOnDisk): LoadableModel[] {
  const seen = new Set<string>();
  const models: LoadableModel[] = [];
  for (const folder of disk.folders) {
    for (const model of folder.models) {
      if (model.heads || model.partial || seen.has(model.path)) continue;
      seen.add(model.path);
      models.push({
        path: model.path,
        fileName: model.file_name,
        heads: headsFor(model, folder.models)?.path ?? null,
        loaded: model.loaded,
      });
    }
  }
  return models;
}

/** A file's base name, the one it is saved under. */
export function fileNameOf(file: HubFile): string {
  return file.path.split('/').pop() ?? file.path;
}

/** Why a hub file cannot be downloaded here, or null. */
export function downloadRefusal(file: HubFile): string | null {
  return file.split ? 'one part of a model split over several files, which cannot be loaded here yet' : null;
}

/** "1.2M downloads": counts as the hub shows them. */
export function countText(n: number): string {
  if (n >= 1e6) return `${(n / 1e6).toFixed(1)}M`;
  if (n >= 1e3) return `${(n / 1e3).toFixed(1)}k`;
  return String(n);
}

/**
 * Weight formats in the order a model is offered for download from the chat: Q4_K_M keeps the
 * most quality at 4 bits; the plain 4-bit formats are faster on a CPU (docs/BENCHMARKS.md).
 */
const OFFERED_FORMATS = ['Q4_K_M', 'Q4_0', 'Q4_1', 'IQ4_NL', 'Q5_K_M', 'Q8_0'];

/** The file of a repository to offer: the smallest of the first offered format it has, else its smallest. */
export function offeredFile(files: readonly HubFile[]): HubFile | null {
  const loadable = files.filter((f) => downloadRefusal(f) === null).sort((a, b) => a.size_bytes - b.size_bytes);
  for (const format of OFFERED_FORMATS) {
    const found = loadable.find((f) => f.quantization?.toUpperCase() === format);
    if (found) return found;
  }
  return loadable[0] ?? null;
}

/** Memory for the runtime's buffers and a context beside the weights. */
const RUNTIME_BYTES = 512e6;
/** The share of the machine's memory a model may take, leaving the rest to the system and other work. */
const MEMORY_SHARE = 0.75;

/** About how much memory a model file takes loaded: its weights a fifth over, and the runtime's buffers. */
export function memoryNeeded(sizeBytes: number): number {
  return sizeBytes * 1.2 + RUNTIME_BYTES;
}

/** Whether a model file fits this machine's memory (null where the memory is not known), in words. */
export function fitText(sizeBytes: number, memoryBytes: number | null): { fits: boolean | null; text: string } {
  if (memoryBytes === null) return { fits: null, text: sizeText(sizeBytes) };
  const needed = memoryNeeded(sizeBytes);
  return needed <= memoryBytes * MEMORY_SHARE
    ? { fits: true, text: `${sizeText(sizeBytes)} · fits this machine's ${sizeText(memoryBytes)} of memory` }
    : { fits: false, text: `${sizeText(sizeBytes)} · needs about ${sizeText(needed)}: too large for this machine's ${sizeText(memoryBytes)} of memory` };
}

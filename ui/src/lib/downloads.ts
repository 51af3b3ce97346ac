// A model file's download as the models lists follow it: its progress, its end, its failure.

import type { Transport } from './api/transport';
import type { Downloaded, DownloadProgress, HubFile } from './api/types';
import { fileNameOf } from './catalog';

/** One download as a list shows it; `now` moves with each progress event, for the speed. */
export interface Download {
  progress: DownloadProgress | null;
  startedAt: number;
  now: number;
  error: string | null;
  done: Downloaded | null;
}

/**
 * Downloads `file`, keeping its state in `downloads` under its file name (a `$state` record, so
 * that the list follows it). Answers the saved file, or null where it failed or was cancelled.
 */
export async function download(
  transport: Transport,
  file: HubFile,
  downloads: Record<string, Download>,
): Promise<Downloaded | null> {
  const name = fileNameOf(file);
  const now = Date.now();
  downloads[name] = { progress: null, startedAt: now, now, error: null, done: null };
  try {
    await transport.downloadModel({ repo: file.repo, file: file.path }, (event) => {
      const d = downloads[name];
      if (event.type === 'progress') {
        d.progress = event;
        d.now = Date.now();
      } else if (event.type === 'done') {
        d.done = event;
      } else {
        d.error = event.error.message;
      }
    });
  } catch (err) {
    downloads[name].error = (err as Error).message;
  }
  return downloads[name].done;
}

/** Asks the download of `name` to stop; a failure to ask is kept as its error. */
export async function cancelDownload(transport: Transport, name: string, downloads: Record<string, Download>): Promise<void> {
  try {
    await transport.cancelDownload(name);
  } catch (err) {
    downloads[name].error = (err as Error).message;
  }
}

/** Whether the download of `name` is under way. */
export function downloading(downloads: Record<string, Download>, name: string): boolean {
  const d = downloads[name];
  return !!d && !d.done && !d.error;
}

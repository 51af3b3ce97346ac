// What the UI imports to talk to the backend: the transport that fits where the page runs, and
// the names that go with it.

import { HttpTransport } from './http';
import { TauriTransport } from './tauri';
import type { Transport } from './transport';

/** Tauri IPC inside the desktop app, HTTP against the page's own server in a browser. */
export function createTransport(): Transport {
  return '__TAURI_INTERNALS__' in window ? new TauriTransport() : new HttpTransport();
}

export { ApiError } from './transport';
export type { RunHandle, TrainingWatch, Transport } from './transport';

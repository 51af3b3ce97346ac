// The UI's entry point: mounts the app on the page.

import { invoke } from '@tauri-apps/api/core';
import { mount } from 'svelte';
import './theme.css';
import App from './App.svelte';
import { startTheme } from './lib/theme';

// In the desktop app there is no console to read: script errors go to the app's log.
if ('__TAURI_INTERNALS__' in window) {
  const report = (message: string) =>
    void invoke('report_ui_error', { message }).catch(() => {});
  window.addEventListener('error', (e) => report(`${e.message} at ${e.filename}:${e.lineno}`));
  window.addEventListener('unhandledrejection', (e) => report(String(e.reason?.stack ?? e.reason)));
}

startTheme(typeof localStorage === 'undefined' ? undefined : localStorage);

const app = mount(App, { target: document.getElementById('app')! });

export default app;

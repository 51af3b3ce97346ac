// Starts `medusa serve` on the real default model with a fresh history and the built UI, and a
// headless Debian Chromium driven by playwright-core.

import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, mkdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
export const artifacts = join(root, 'test-artifacts', 'ui');

export const medusa = join(root, 'target/release/medusa');

/**
 * Medusa heads for the default model whose residual blocks are zero: each head then proposes the
 * model's own next token again. They guess little, but exercise the whole Medusa path in the UI
 * (drafting, tree verification, tinting, acceptance per head) with outputs that must equal the
 * normal ones under greedy decoding. Written as a FasterDecoding checkpoint and imported.
 */
function zeroHeads(dir, heads = 4) {
  const info = JSON.parse(execFileSync(medusa, ['info', '--json'], { encoding: 'utf8' }));
  const n = info.n_embd;
  const tensors = {};
  let offset = 0;
  const add = (name, shape) => {
    const bytes = shape.reduce((a, b) => a * b, 1) * 4;
    tensors[name] = { dtype: 'F32', shape, data_offsets: [offset, offset + bytes] };
    offset += bytes;
  };
  for (let h = 0; h < heads; h++) {
    add(`${h}.0.linear.weight`, [n, n]);
    add(`${h}.0.linear.bias`, [n]);
  }
  let header = JSON.stringify(tensors);
  header += ' '.repeat((8 - (header.length % 8)) % 8);
  const length = Buffer.alloc(8);
  length.writeBigUInt64LE(BigInt(header.length));
  const checkpoint = join(dir, 'zero_heads.safetensors');
  writeFileSync(checkpoint, Buffer.concat([length, Buffer.from(header), Buffer.alloc(offset)]));
  const out = join(dir, 'zero.medusa.gguf');
  execFileSync(medusa, ['convert-heads', '--checkpoint', checkpoint, '--out', out], { stdio: 'ignore' });
  return out;
}

/**
 * With `apiKey`, the server requires it: `openUrl` is the link it prints for browsers, and
 * `headers` what Node's own requests must carry. With `plain`, it serves the API alone, without
 * heads or the web UI: a remote engine for another server to run on. `restart()` stops the server
 * and starts it again on the same history database (on a new port: `url` and `openUrl` change).
 */
/**
 * `extraArgs`: more `medusa serve` options (e.g. `--models-dir DIR`). With `heads: false` the
 * server loads no heads (Medusa mode unavailable) but serves the web UI.
 */
export async function startServer({ apiKey, plain = false, heads = true, extraArgs = [], extraEnv = {} } = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'medusa-e2e-'));
  const db = join(dir, 'history.sqlite');
  const env = { ...process.env };
  delete env.MEDUSA_API_KEY;
  if (apiKey) env.MEDUSA_API_KEY = apiKey;
  Object.assign(env, extraEnv);
  const args = ['serve', '--port', '0', '--db', db, '--ctx-size', '1024'];
  if (plain) args.push('--no-ui', '--no-heads');
  else args.push('--ui', join(root, 'ui/dist'), ...(heads ? ['--heads', zeroHeads(dir)] : ['--no-heads']));
  args.push(...extraArgs);
  let server;
  const handle = {
    url: '',
    openUrl: '',
    headers: apiKey ? { Authorization: `Bearer ${apiKey}` } : {},
    async stop() {
      if (server.exitCode !== null || server.signalCode !== null) return;
      server.kill('SIGTERM');
      await new Promise((r) => server.once('exit', r));
    },
    async restart() {
      await handle.stop();
      await launch();
    },
  };
  async function launch() {
    server = spawn(medusa, args, { stdio: ['ignore', 'pipe', 'inherit'], env });
    const started = server;
    [handle.url, handle.openUrl] = await new Promise((resolveUrl, reject) => {
      let seen = '';
      const timer = setTimeout(() => reject(new Error(`server did not start: ${seen}`)), 180_000);
      started.stdout.on('data', (chunk) => {
        seen += chunk;
        const listening = /listening on (http:\/\/\S+)/.exec(seen);
        const link = /open the web UI at (http:\/\/\S+)/.exec(seen);
        // It listens while the model loads; the tests start once it serves.
        const ready = /^ready: /m.test(seen);
        if (listening && ready && (link || !apiKey)) {
          clearTimeout(timer);
          resolveUrl([listening[1], link ? link[1] : listening[1]]);
        }
      });
      started.on('exit', (code) => reject(new Error(`server exited with ${code}: ${seen}`)));
    });
  }
  await launch();
  return handle;
}

/**
 * With `scrollbars`, scroll bars take their room as on most desktops (headless Chromium hides them
 * otherwise): for tests of what fits.
 */
export async function startBrowser({ scrollbars = false } = {}) {
  mkdirSync(artifacts, { recursive: true });
  return chromium.launch({
    ...(scrollbars ? { ignoreDefaultArgs: ['--hide-scrollbars'] } : {}),
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
}

/** How long one step of a test may wait: the machine may be slow and busy. */
export const LONG = 240_000;

/**
 * A page in a context of its own (`options`: Playwright's context options, such as `viewport`),
 * waiting up to `LONG`, opened at `url`; with `ready`, once the status says the model is in.
 */
export async function openPage(browser, url, { ready = true, ...options } = {}) {
  const page = await (await browser.newContext(options)).newPage();
  page.setDefaultTimeout(LONG);
  await page.goto(url);
  if (ready) await page.locator('[data-testid="status"][data-status="ready"]').waitFor();
  return page;
}

/** Opens a view by its tab and waits until it shows. */
export async function openTab(page, name) {
  await page.getByTestId(`tab-${name}`).click();
  await page.getByTestId(`view-${name}`).waitFor({ state: 'visible' });
}

/**
 * One of the chat's speculative controls (`chat-mode`, `chat-tree`, `chat-draft-length`,
 * `chat-show-drafted`), with the toolbar's decoding disclosure opened first if it is folded.
 */
export async function chatControl(page, testid) {
  const toggle = page.getByTestId('chat-decoding-toggle');
  if ((await toggle.getAttribute('aria-expanded')) !== 'true') await toggle.click();
  return page.getByTestId(testid);
}

/** Emulates the system's colour scheme and waits until the page (following the system) shows it. */
export async function followScheme(page, scheme) {
  await page.emulateMedia({ colorScheme: scheme });
  await page.waitForFunction((s) => document.documentElement.dataset.theme === s, scheme);
}

/** Screenshots `page` as `NAME-light.png` and `NAME-dark.png` in `artifacts`. */
export async function screenshots(page, name, options = {}) {
  for (const scheme of ['light', 'dark']) {
    await followScheme(page, scheme);
    await page.screenshot({ ...options, path: join(artifacts, `${name}-${scheme}.png`) });
  }
  await followScheme(page, 'light');
}

/** Parses CSV (RFC 4180: quoted fields may hold commas, quotes and newlines). */
export function parseCsv(text) {
  const rows = [];
  let row = [];
  let field = '';
  let quoted = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (quoted) {
      if (c === '"' && text[i + 1] === '"') {
        field += '"';
        i++;
      } else if (c === '"') quoted = false;
      else field += c;
    } else if (c === '"') quoted = true;
    else if (c === ',') {
      row.push(field);
      field = '';
    } else if (c === '\n' || c === '\r') {
      if (c === '\r' && text[i + 1] === '\n') i++;
      row.push(field);
      rows.push(row);
      row = [];
      field = '';
    } else field += c;
  }
  if (field !== '' || row.length > 0) {
    row.push(field);
    rows.push(row);
  }
  return rows;
}

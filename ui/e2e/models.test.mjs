// Settings' models card end to end: a real `medusa serve` whose model hub is a local HTTP server
// answering in Hugging Face's URL layout, and headless Chromium. Search, a repository's files,
// a download with progress, a cancel that keeps what arrived, the download resumed, the file
// listed on disk and deleted. The chat toolbar's model picker: it lists the models on disk with the
// one in use selected, fits an 800 px window, opens the catalog, and loads another model (a link
// to the default model under another name, so the switch is a real load of a small model); its Get
// a model offers the suggested models sized for this machine, downloads one and loads it, and says
// when the hub cannot be reached.

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createReadStream, existsSync, mkdtempSync, readFileSync, statSync, symlinkSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { medusa, screenshots, startBrowser, startServer, LONG } from './harness.mjs';

const REPO = 'tester/Tiny-Chat-GGUF';
const FILE = 'tiny-chat-Q4_K_M.gguf';
const content = Buffer.alloc(3 << 20, 0).map((_, i) => (i * 31) % 251);
const sha256 = createHash('sha256').update(content).digest('hex');
/** The first suggested repository, and the file the chat's Get a model offers from it. */
const SUGGESTED = 'HuggingFaceTB/SmolLM2-360M-Instruct-GGUF';
const SUGGESTED_FILE = 'smollm2-360m-instruct-q4_k_m.gguf';
let defaultSha;
function defaultSha256() {
  defaultSha ??= createHash('sha256').update(readFileSync(defaultModel)).digest('hex');
  return defaultSha;
}
/** Range headers of the file's requests, in order. */
const ranges = [];

/** Serves the repository slowly (64 KiB every 40 ms), so that a download can be watched and cut. */
function hub() {
  return createServer((req, res) => {
    const url = new URL(req.url, 'http://hub');
    const json = (body) => {
      res.writeHead(200, { 'Content-Type': 'application/json' });
      res.end(JSON.stringify(body));
    };
    if (url.pathname === '/api/models') {
      const term = (url.searchParams.get('search') ?? '').toLowerCase();
      return json(REPO.toLowerCase().includes(term) ? [{ id: REPO, downloads: 1234, likes: 5, tags: ['gguf', 'license:mit'] }] : []);
    }
    if (url.pathname === `/api/models/${REPO}`) return json({ id: REPO, tags: ['gguf', 'license:mit'] });
    if (url.pathname === `/api/models/${REPO}/tree/main`) {
      return json([
        { type: 'file', path: 'README.md', size: 10 },
        { type: 'file', path: FILE, size: 134, lfs: { oid: sha256, size: content.length, pointerSize: 134 } },
        { type: 'file', path: 'tiny-chat-Q8_0-00001-of-00002.gguf', size: 134, lfs: { oid: sha256, size: content.length } },
      ]);
    }
    // A suggested repository whose file is the default model under another name: served at once.
    if (url.pathname === `/api/models/${SUGGESTED}/tree/main`) {
      const size = statSync(defaultModel).size;
      return json([{ type: 'file', path: SUGGESTED_FILE, size: 134, lfs: { oid: defaultSha256(), size, pointerSize: 134 } }]);
    }
    if (url.pathname === `/api/models/${SUGGESTED}`) return json({ id: SUGGESTED, tags: ['gguf', 'license:apache-2.0'] });
    if (url.pathname === `/${SUGGESTED}/resolve/main/${SUGGESTED_FILE}`) {
      res.writeHead(200, { 'Content-Length': statSync(defaultModel).size, 'Content-Type': 'application/octet-stream' });
      return createReadStream(defaultModel).pipe(res);
    }
    if (url.pathname === `/${REPO}/resolve/main/${FILE}`) {
      const range = req.headers.range ?? null;
      ranges.push(range);
      const start = range ? Number(/bytes=(\d+)-/.exec(range)[1]) : 0;
      const headers = { 'Content-Length': content.length - start, 'Content-Type': 'application/octet-stream' };
      if (range) headers['Content-Range'] = `bytes ${start}-${content.length - 1}/${content.length}`;
      res.writeHead(range ? 206 : 200, headers);
      let at = start;
      const timer = setInterval(() => {
        if (at >= content.length || res.destroyed) {
          clearInterval(timer);
          res.end();
          return;
        }
        res.write(content.subarray(at, at + (64 << 10)));
        at += 64 << 10;
      }, 40);
      req.on('close', () => clearInterval(timer));
      return;
    }
    res.writeHead(404).end();
  });
}

/** Waits until `check()` resolves to a truthy value, and answers it. */
async function until(check) {
  for (;;) {
    const value = await check();
    if (value) return value;
    await new Promise((r) => setTimeout(r, 200));
  }
}

const modelsDir = mkdtempSync(join(tmpdir(), 'medusa-catalog-'));
/** The default model's file, and the same file under another name in the models folder. */
let defaultModel;
const SECOND = 'second-copy.gguf';
let fakeHub;
let server;
let browser;
let page;

before(async () => {
  fakeHub = hub();
  await new Promise((resolve) => fakeHub.listen(0, '127.0.0.1', resolve));
  defaultModel = execFileSync(medusa, ['fetch-model'], { encoding: 'utf8' }).trim();
  symlinkSync(defaultModel, join(modelsDir, SECOND));
  server = await startServer({
    extraArgs: ['--model', defaultModel],
    extraEnv: { MEDUSA_MODELS_DIR: modelsDir, HF_ENDPOINT: `http://127.0.0.1:${fakeHub.address().port}` },
  });
  browser = await startBrowser();
  page = await browser.newPage({ viewport: { width: 1360, height: 1000 } });
  page.setDefaultTimeout(LONG);
  page.on('dialog', (dialog) => dialog.accept());
  await page.goto(server.url);
  await page.getByTestId('tab-settings').click();
  await page.getByTestId('settings-models').waitFor();
});

after(async () => {
  await browser?.close();
  await server?.stop();
  if (fakeHub?.listening) fakeHub.close();
});

test('an empty search suggests models, and a search lists the hub repositories with licence', async () => {
  const card = page.getByTestId('settings-models');
  await card.getByTestId('models-search-button').click();
  await card.getByTestId('models-result').first().waitFor();
  assert.match(await card.innerText(), /Suggested instruct models/);
  assert.match(await card.getByTestId('models-result').first().innerText(), /HuggingFaceTB\/SmolLM2-360M-Instruct-GGUF\s+360M parameters/);

  await card.getByTestId('models-search').fill('tiny');
  await card.getByTestId('models-search-button').click();
  const result = card.locator(`[data-testid="models-result"][data-repo="${REPO}"]`);
  await result.waitFor();
  assert.match(await result.innerText(), /1\.2k downloads · mit/);

  await result.getByTestId('models-open-repo').click();
  await card.getByTestId('models-repo').waitFor();
  assert.match(await card.getByTestId('models-repo').innerText(), /licence mit/);
  const files = card.getByTestId('models-repo-file');
  assert.equal(await files.count(), 2, 'GGUF files only');
  assert.match(await files.nth(0).innerText(), /tiny-chat-Q4_K_M\.gguf\s+3 MB · Q4_K_M/);
  assert.match(await files.nth(1).innerText(), /split over several files/);
  assert.equal(await files.nth(1).getByTestId('models-download').count(), 0);
});

test('a download shows progress, a cancel keeps what arrived, and the next download resumes', async () => {
  const card = page.getByTestId('settings-models');
  const row = card.locator(`[data-testid="models-repo-file"][data-file="${FILE}"]`);
  await row.getByTestId('models-download').click();
  const status = row.getByTestId('models-download-status');
  await status.filter({ hasText: /of 3 MB \(\d+%\)/ }).waitFor();
  await row.getByTestId('models-cancel').click();
  await status.filter({ hasText: /cancelled/ }).waitFor();
  const partial = card.locator(`[data-testid="models-disk-file"][data-file="${FILE}"]`);
  await partial.filter({ hasText: /unfinished/ }).waitFor();
  const kept = statSync(join(modelsDir, `${FILE}.part`)).size;
  assert.ok(kept > 0 && kept < content.length, `kept ${kept}`);

  await row.getByTestId('models-download').click();
  await status.filter({ hasText: /Saved \(resumed\), SHA-256 checked/ }).waitFor();
  assert.equal(ranges.length, 2);
  assert.equal(ranges[0], null);
  assert.match(ranges[1], /^bytes=\d+-$/);
  assert.ok(Number(/\d+/.exec(ranges[1])[0]) >= kept);
  assert.ok(readFileSync(join(modelsDir, FILE)).equals(content), 'the whole file, checked');
  assert.equal(existsSync(join(modelsDir, `${FILE}.part`)), false);
  await partial.filter({ hasText: /3 MB · Q4_K_M/ }).waitFor();
  await screenshots(page, 'settings-models', { fullPage: true });
});

test('a downloaded file is deleted from the models folder', async () => {
  const card = page.getByTestId('settings-models');
  const listed = card.locator(`[data-testid="models-disk-file"][data-file="${FILE}"]`);
  await listed.getByTestId('models-delete').click();
  await listed.waitFor({ state: 'detached' });
  assert.equal(existsSync(join(modelsDir, FILE)), false);
});

test('the chat toolbar picks the model: the models on disk, the one in use, the catalog, a switch', async () => {
  await page.setViewportSize({ width: 800, height: 700 });
  await page.getByTestId('tab-chat').click();
  const picker = page.getByTestId('chat-model');
  await picker.locator(`option[value="${join(modelsDir, SECOND)}"]`).waitFor({ state: 'attached' });
  const info = await (await fetch(`${server.url}/api/info`)).json();
  assert.equal(await picker.inputValue(), info.model.path, 'the model in use is selected');
  const labels = await picker.locator('option').allInnerTexts();
  assert.ok(labels.includes('second-copy'), labels.join(', '));
  assert.equal(labels.at(-1), 'Get a model…');
  // It fits the toolbar at 800 px: nothing scrolls sideways, the picker is in the window.
  assert.equal(await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth), true);
  const box = await picker.boundingBox();
  assert.ok(box && box.x >= 0 && box.x + box.width <= 800, JSON.stringify(box));
  await screenshots(page, 'chat-model-picker');

  // The whole catalog is two clicks away: Settings opens at the models card, the picker keeps its model.
  await picker.selectOption({ label: 'Get a model…' });
  await page.getByTestId('chat-model-catalog').click();
  await page.getByTestId('view-settings').waitFor();
  assert.equal(await page.getByTestId('tab-settings').getAttribute('aria-selected'), 'true');
  assert.equal(await page.evaluate(() => document.activeElement?.getAttribute('data-testid')), 'models-search');
  assert.equal(await picker.inputValue(), info.model.path);

  // Another model: it loads as Settings' Use does, and the picker follows it.
  await page.getByTestId('tab-chat').click();
  const second = join(modelsDir, SECOND);
  await picker.selectOption(second);
  const loaded = await until(async () => {
    const now = await (await fetch(`${server.url}/api/info`)).json();
    return now.model?.path === second && !now.loading && now;
  });
  assert.equal(loaded.error, null);
  await page.waitForFunction(
    (path) => {
      const select = document.querySelector('[data-testid="chat-model"]');
      return select?.value === path && !select.disabled;
    },
    second,
  );
  await page.locator('[data-testid="status"][data-status="ready"]').waitFor();
  assert.equal(await page.getByTestId('chat-model-error').count(), 0);
});

test("the chat's Get a model offers the suggested models for this machine, downloads one and uses it", async () => {
  await page.getByTestId('tab-chat').click();
  const picker = page.getByTestId('chat-model');
  await picker.selectOption({ label: 'Get a model…' });
  const offers = page.getByTestId('chat-model-offers');
  const offer = offers.locator(`[data-testid="chat-model-offer"][data-repo="${SUGGESTED}"]`);
  // Sized against this machine's memory, which holds the default model many times over.
  await offer.getByTestId('chat-model-offer-file').filter({ hasText: /fits this machine's [\d.]+ GB of memory/ }).waitFor();
  assert.match(await offer.getByTestId('chat-model-offer-file').innerText(), new RegExp(`^${SUGGESTED_FILE} · \\d+ MB · fits`));
  // The hub has no such repository: said in its row, the others still offered.
  const missing = offers.locator('[data-testid="chat-model-offer"][data-repo="Qwen/Qwen2.5-0.5B-Instruct-GGUF"]');
  await missing.getByTestId('chat-model-offer-error').waitFor();
  assert.equal(await page.getByTestId('chat-model-offline').count(), 0);
  await screenshots(page, 'chat-model-offers');

  await offer.getByTestId('chat-model-offer-download').click();
  const path = join(modelsDir, SUGGESTED_FILE);
  const loaded = await until(async () => {
    const now = await (await fetch(`${server.url}/api/info`)).json();
    return now.model?.path === path && !now.loading && now;
  });
  assert.equal(loaded.error, null);
  assert.equal(await offers.count(), 0, 'the panel closes once the model is in');
  await page.waitForFunction((p) => document.querySelector('[data-testid="chat-model"]')?.value === p, path);
  assert.ok(readFileSync(path).equals(readFileSync(defaultModel)), 'the whole file');

  // Offered again, it is on disk: Use, not a second download.
  await picker.selectOption({ label: 'Get a model…' });
  await offer.getByTestId('chat-model-offer-use').waitFor();
  await page.keyboard.press('Escape');
  await offers.waitFor({ state: 'detached' });

  // With the hub gone, the panel says there is no network.
  fakeHub.closeAllConnections();
  await new Promise((resolve) => fakeHub.close(resolve));
  await picker.selectOption({ label: 'Get a model…' });
  const offline = page.getByTestId('chat-model-offline');
  await offline.waitFor();
  assert.match(await offline.innerText(), /^No network: cannot reach 127\.0\.0\.1:\d+ \(offline\?\)/);
  await screenshots(page, 'chat-model-offers-offline');
  await page.getByTestId('chat-model-offers-close').click();
});

// The web UI end to end: a real `medusa serve` on the default model, a real SQLite history and
// headless Chromium. The server requires an API key, so every view is also shown to work with
// the cookie its printed link sets. Screenshots of each view go to test-artifacts/ui/.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { artifacts, screenshots, parseCsv, startBrowser, startServer } from './harness.mjs';

/** CPU generation is slow and the machine may be busy: generous limits, never timing asserts. */
const LONG = 240_000;
// Five rounds: two modes that decode alike then have overlapping ranges all but by a rare chance.
const COMPARE_REPEATS = 5;
const COMPARE_TOKENS = 24;

let server;
let browser;
let page;

before(async () => {
  server = await startServer({ apiKey: 'e2e-key-0123456789abcdef' });
  browser = await startBrowser();
  const context = await browser.newContext({ viewport: { width: 1360, height: 900 }, acceptDownloads: true });
  page = await context.newPage();
  page.setDefaultTimeout(LONG);
  // Without the key the UI's page is refused; the printed link lets the browser in and leaves
  // the key out of the address bar.
  const refused = await page.goto(server.url);
  assert.equal(refused.status(), 401);
  await page.goto(server.openUrl);
  assert.equal(page.url(), `${server.url}/`);
});

after(async () => {
  await browser?.close();
  await server?.stop();
});

function shoot(name) {
  return screenshots(page, name, { fullPage: true });
}

async function openTab(name) {
  await page.getByTestId(`tab-${name}`).click();
  await page.getByTestId(`view-${name}`).waitFor({ state: 'visible' });
}

test('chat streams an answer and shows its stats', async () => {
  await openTab('chat');
  await page.getByTestId('chat-mode').selectOption('medusa');
  const input = page.getByTestId('chat-input');
  await input.fill('What is the capital of France?');
  await input.press('Enter');
  const stats = page.getByTestId('chat-stats').last();
  await stats.waitFor();
  const answer = page.locator('[data-testid="chat-message"][data-role="assistant"]').last();
  assert.ok((await answer.innerText()).trim().length > 0, 'the answer has text');
  const figures = await stats.innerText();
  assert.match(figures, /tok\/s/);
  assert.match(figures, /TTFT|first token/i);
  assert.match(figures, /mean accepted/);
  // Medusa runs show acceptance per head.
  assert.equal(await stats.getByTestId('acceptance-bars').count(), 1);
  await shoot('chat');
});

test('Esc stops a chat run, which is kept as cancelled', async () => {
  await openTab('chat');
  await page.getByTestId('chat-mode').selectOption('normal');
  const input = page.getByTestId('chat-input');
  await input.fill('Count from one to two hundred in words, separated by commas.');
  await input.press('Enter');
  await page.getByTestId('chat-stop').waitFor();
  // Wait for the first text, then stop with the keyboard.
  await page.waitForFunction(() => {
    const answers = document.querySelectorAll('[data-testid="chat-message"][data-role="assistant"]');
    return (answers[answers.length - 1]?.textContent ?? '').length > 20;
  });
  await page.keyboard.press('Escape');
  // The second answer of this chat (the first was the previous test's).
  const stats = page.getByTestId('chat-stats').nth(1);
  await stats.waitFor();
  assert.match(await stats.innerText(), /cancelled/);
  await page.getByTestId('chat-send').waitFor();
  await page.getByTestId('chat-new').click();
});

test('compare repeats every mode and shows medians, ranges and an honest verdict', async () => {
  await openTab('compare');
  await page.getByTestId('compare-input').fill('List the days of the week, one per line.');
  await page.getByTestId('compare-max-tokens').fill(String(COMPARE_TOKENS));
  await page.getByTestId('compare-repeats').fill(String(COMPARE_REPEATS));
  await page.getByTestId('compare-run').click();
  await page.getByTestId('compare-stored').waitFor({ timeout: LONG });
  const panels = page.getByTestId('compare-panel');
  assert.deepEqual(
    await panels.evaluateAll((els) => els.map((e) => e.dataset.mode)),
    ['normal', 'medusa', 'lookup'],
  );
  const speedups = await page.getByTestId('compare-speedup').allInnerTexts();
  assert.equal(speedups.length, 2);
  // A median with its range over the rounds.
  for (const s of speedups) assert.match(s, /^\d+\.\d\d× \(\d+\.\d\d×–\d+\.\d\d×\)$/);
  const rows = await page.getByTestId('compare-figures-row').evaluateAll((els) =>
    els.map((e) => [e.dataset.mode, ...[...e.querySelectorAll('td')].map((td) => td.textContent.trim())]),
  );
  assert.deepEqual(rows.map((r) => r[0]), ['normal', 'medusa', 'lookup']);
  const range = (text) => {
    const m = text.match(/^([\d.]+) \(([\d.]+)–([\d.]+)\)$/);
    assert.ok(m, `a median and range: ${text}`);
    const [median, min, max] = m.slice(1).map(Number);
    assert.ok(min <= median && median <= max, text);
    return { min, max };
  };
  for (const row of rows) {
    assert.equal(row[2], String(COMPARE_REPEATS));
    range(row[3]); // decode tokens per second
    range(row[4]); // time to first token
  }
  assert.equal(rows[0][5], '–', 'normal runs show no tokens per step');
  // Medusa with `auto` on this CPU: the verdict follows the ranges shown, and overlapping ranges
  // are called noise, in a neutral colour.
  const normal = range(rows[0][3]);
  for (const [i, mode] of [[1, 'medusa'], [2, 'lookup']]) {
    const own = range(rows[i][3]);
    const card = page.locator(`[data-testid="compare-verdict"][data-mode="${mode}"]`);
    const verdict = await card.getAttribute('data-verdict');
    const overlap = own.min <= normal.max && normal.min <= own.max;
    if (overlap && verdict !== 'unexplained') {
      assert.equal(verdict, 'within_noise', `${mode}: overlapping ranges`);
      assert.match(await card.getByTestId('compare-verdict-text').innerText(), /^within noise/);
      assert.ok(!(await card.getByTestId('compare-speedup').getAttribute('class')).includes('faster'));
    } else {
      assert.ok(['faster', 'slower', 'unexplained'].includes(verdict), `${mode}: ${verdict}`);
    }
  }
  // Greedy runs are checked against normal's, every one of them.
  for (const text of await page.getByTestId('compare-identical').allInnerTexts()) {
    assert.match(text, new RegExp(`^(Identical output in all ${COMPARE_REPEATS} runs|Differs from normal in \\d+ of ${COMPARE_REPEATS} runs)$`));
  }
  const stored = await (await fetch(`${server.url}/api/comparisons`, { headers: server.headers })).json();
  assert.equal(stored.comparisons[0].repeats, COMPARE_REPEATS);
  assert.equal(stored.comparisons[0].runs.length, 3 * COMPARE_REPEATS);
  await shoot('compare');
});

test('three concurrent prompts stream in three lanes and finish', async () => {
  await openTab('concurrent');
  await page
    .getByTestId('concurrent-input')
    .fill(['Name a fruit.', 'Write a haiku about the sea.', 'What is 2 + 2?'].join('\n'));
  await page.getByTestId('concurrent-run').click();
  const lanes = page.getByTestId('concurrent-lane');
  await page.waitForFunction(
    () => document.querySelectorAll('[data-testid="concurrent-lane"]').length === 3,
  );
  await page.waitForFunction(
    () =>
      [...document.querySelectorAll('[data-testid="concurrent-lane"]')].every(
        (lane) => lane.getAttribute('data-status') === 'finished',
      ),
    null,
    { timeout: LONG },
  );
  assert.equal(await lanes.count(), 3);
  assert.match(await page.getByTestId('concurrent-throughput').innerText(), /\d/);
  await shoot('concurrent');
});

test('history lists the runs and exports them as CSV', async () => {
  await openTab('history');
  const stored = await (await fetch(`${server.url}/api/runs?limit=1000`, { headers: server.headers })).json();
  // 1 chat + 1 stopped chat + the compared runs + 3 concurrent.
  assert.equal(stored.runs.length, 5 + 3 * COMPARE_REPEATS);
  await page.waitForFunction(
    (n) => document.querySelectorAll('[data-testid="history-row"]').length === n,
    stored.runs.length,
  );
  // Open the compared Medusa run: its steps replay as a chart.
  const medusaRun = stored.runs.find((r) => r.mode === 'medusa' && r.comparison_id !== null);
  await page.locator(`[data-testid="history-row"][data-run-id="${medusaRun.id}"]`).click();
  await page.getByTestId('history-detail').waitFor();
  await page.locator('[data-testid="history-chart"] canvas').waitFor();
  await shoot('history');

  const [download] = await Promise.all([
    page.waitForEvent('download'),
    page.getByTestId('history-export-csv').click(),
  ]);
  assert.match(download.suggestedFilename(), /\.csv$/);
  const path = join(artifacts, download.suggestedFilename());
  await download.saveAs(path);
  const [header, ...rows] = parseCsv(readFileSync(path, 'utf8')).filter((r) => r.length > 1);
  assert.equal(rows.length, stored.runs.length);
  const id = header.indexOf('id');
  const status = header.indexOf('status');
  assert.ok(id >= 0 && status >= 0, `columns: ${header}`);
  assert.deepEqual(
    rows.map((r) => Number(r[id])).sort((a, b) => a - b),
    stored.runs.map((r) => r.id).sort((a, b) => a - b),
  );
  assert.deepEqual(
    rows.map((r) => r[status]).sort(),
    stored.runs.map((r) => r.status).sort(),
  );
  assert.equal(rows.filter((r) => r[status] === 'cancelled').length, 1);
});

test('settings show the model in use and tune the tree', async () => {
  await openTab('settings');
  const info = await (await fetch(`${server.url}/api/info`, { headers: server.headers })).json();
  assert.match(await page.getByTestId('view-settings').innerText(), new RegExp(info.model.file_type));
  // Heads without a training record keep the tree stored with them, and Settings says so.
  assert.match(await page.getByTestId('settings-medusa-plan').innerText(), /stored \d+-node tree/);
  await page.getByTestId('settings-tune-run').click();
  const decision = page.getByTestId('settings-tune-decision');
  await decision.waitFor();
  // Heads that repeat the model's next token never pay for themselves on this CPU.
  assert.match(await decision.innerText(), /plain decoding|medusa with a \d+-node tree/);
  assert.ok((await page.locator('[data-testid="settings-tune"] tbody tr').count()) >= 8);
  await shoot('settings');
});

test('a named tree is drafted in full at every step', async () => {
  await openTab('chat');
  const fresh = page.getByTestId('chat-new');
  if (await fresh.isEnabled()) await fresh.click();
  await page.getByTestId('chat-mode').selectOption('medusa');
  // Auto drafts what pays on this machine; a named tree is drafted whatever it costs.
  await page.getByTestId('chat-tree').selectOption('mc_sim_7b_63');
  const input = page.getByTestId('chat-input');
  await input.fill('Name three colours.');
  await input.press('Enter');
  const stats = page.getByTestId('chat-stats').last();
  await stats.waitFor();
  const drafted = parseFloat(await stats.getByTestId('drafted-per-step').innerText());
  // 63 at every step but the last few, which stop at the answer's end.
  assert.ok(drafted > 30, `${drafted} drafted per step`);
  // The history keeps the tree the run drafted, not the one sized at load.
  const latest = await (await fetch(`${server.url}/api/runs?limit=1`, { headers: server.headers })).json();
  assert.equal(latest.runs[0].tree.length, 63);
  await page.getByTestId('chat-tree').selectOption('auto');
  await fresh.click();
});

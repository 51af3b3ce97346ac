// History end to end at the smallest layout the UI supports (800x600): full-text search, the model
// filter by part of the name, deleting a run after confirming, and importing an export back,
// against a real `medusa serve` (with an API key, so Node's requests carry the harness headers)
// on the default model and a real SQLite history. Screenshots go to test-artifacts/ui/.

import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { screenshots, startBrowser, startServer, openPage } from './harness.mjs';

/** CPU generation is slow and the machine may be busy: generous limits, never timing asserts. */

const PROMPTS = {
  giraffe: 'Tell me one fact about giraffes.',
  volcano: 'Tell me one fact about volcanoes.',
  colour: 'Name a colour.',
};

let server;
let browser;
let page;
/** The run id of each prompt above. */
const ids = {};

async function api(path, init = {}) {
  const response = await fetch(`${server.url}${path}`, {
    ...init,
    headers: { ...server.headers, ...(init.body ? { 'Content-Type': 'application/json' } : {}) },
  });
  assert.equal(response.status, 200, `${path}: ${response.status}`);
  return response;
}

async function listRuns(query = '') {
  return (await (await api(`/api/runs?limit=1000${query}`)).json()).runs;
}

/** One short greedy run through the API; the SSE stream is read to its end. */
async function generate(prompt) {
  const response = await api('/api/generate', {
    method: 'POST',
    body: JSON.stringify({ messages: [{ role: 'user', content: prompt }], mode: 'normal', max_tokens: 8 }),
  });
  const stream = await response.text();
  assert.match(stream, /"type":"finished"/, `the run of ${JSON.stringify(prompt)} finished`);
  return Number(/"run_id":(\d+)/.exec(stream)[1]);
}

before(async () => {
  server = await startServer({ apiKey: 'e2e-history-key-0123456789' });
  for (const [name, prompt] of Object.entries(PROMPTS)) ids[name] = await generate(prompt);
  browser = await startBrowser();
  page = await openPage(browser, server.openUrl, { viewport: { width: 800, height: 600 } });
  await page.getByTestId('tab-history').click();
  await page.getByTestId('view-history').waitFor({ state: 'visible' });
});

after(async () => {
  await browser?.close();
  await server?.stop();
});

function shoot(name) {
  return screenshots(page, name, { fullPage: true });
}

/** The run ids History's table shows, once it shows exactly `expected` (in any order). */
async function rowsAre(expected) {
  const want = [...expected].sort((a, b) => a - b).join(',');
  await page.waitForFunction(
    (want) =>
      [...document.querySelectorAll('[data-testid="history-row"]')]
        .map((r) => Number(r.dataset.runId))
        .sort((a, b) => a - b)
        .join(',') === want,
    want,
  );
}

test('search finds runs by a word of their prompt or answer', async () => {
  await rowsAre(Object.values(ids));
  await page.getByTestId('history-search').fill('giraff');
  await rowsAre([ids.giraffe]);
  assert.match(await page.getByTestId('history-row').innerText(), /giraffes/);
  await shoot('history-search');
  await page.getByTestId('history-search').fill('');
  await rowsAre(Object.values(ids));
});

test('the model filter matches part of the name in any case', async () => {
  const runs = await listRuns();
  assert.ok(runs.every((r) => r.model.name === 'SmolLM2-135M-Instruct'), 'the default model made every run');
  await page.getByTestId('history-filter-model').fill('smollm');
  await rowsAre(Object.values(ids));
  assert.equal((await listRuns('&model=smollm')).length, 3, 'the API matches it too');
  await page.getByTestId('history-filter-model').fill('no-such-model');
  await rowsAre([]);
  await page.getByTestId('history-filter-model').fill('');
  await rowsAre(Object.values(ids));
});

test('a run is deleted from its detail after confirming', async () => {
  await page.locator(`[data-testid="history-row"][data-run-id="${ids.volcano}"]`).click();
  const detail = page.getByTestId('history-detail');
  await detail.waitFor();
  assert.equal(await detail.getAttribute('data-run-id'), String(ids.volcano));

  // Cancel leaves it.
  await detail.getByTestId('history-delete').click();
  await detail.getByTestId('history-delete-cancel').click();
  assert.ok((await listRuns()).some((r) => r.id === ids.volcano));

  await detail.getByTestId('history-delete').click();
  assert.match(await detail.getByTestId('history-delete-question').innerText(), /Delete 1 run\b/);
  await shoot('history-delete-confirm');
  await detail.getByTestId('history-delete-confirm').click();
  await page.getByTestId('history-report').filter({ hasText: 'Deleted 1 run' }).waitFor();
  await rowsAre([ids.giraffe, ids.colour]);
  assert.equal(await page.getByTestId('history-detail').count(), 0, 'the detail of a deleted run closes');
  assert.ok(!(await listRuns()).some((r) => r.id === ids.volcano), 'the API no longer lists it');
});

test('an export imported back restores a deleted run', async () => {
  const exported = await (await api('/api/runs/export?format=json')).text();
  const file = join(mkdtempSync(join(tmpdir(), 'medusa-history-')), 'medusa-runs.json');
  writeFileSync(file, exported);
  const giraffeUid = (await listRuns()).find((r) => r.id === ids.giraffe).uid;
  const report = await (await api('/api/runs/delete', { method: 'POST', body: JSON.stringify({ run_ids: [ids.giraffe] }) })).json();
  assert.equal(report.deleted, 1);
  await page.getByTestId('history-refresh').click();
  await rowsAre([ids.colour]);

  const [chooser] = await Promise.all([page.waitForEvent('filechooser'), page.getByTestId('history-import').click()]);
  await chooser.setFiles(file);
  const note = page.getByTestId('history-report').filter({ hasText: 'Imported' });
  await note.waitFor();
  assert.match(await note.innerText(), /Imported 1 run; skipped 1 duplicate; rejected 0/);
  await page.waitForFunction(() => document.querySelectorAll('[data-testid="history-row"]').length === 2);
  const back = (await listRuns()).find((r) => r.uid === giraffeUid);
  assert.ok(back, 'the deleted run is back, under its uid');
  assert.match(await page.locator(`[data-testid="history-row"][data-run-id="${back.id}"]`).innerText(), /giraffes/);
  await shoot('history-import');
});

test('every view fits 800x600 without scrolling sideways', async () => {
  for (const tab of ['chat', 'compare', 'concurrent', 'history', 'settings', 'training']) {
    await page.getByTestId(`tab-${tab}`).click();
    await page.getByTestId(`view-${tab}`).waitFor({ state: 'visible' });
    const overflow = await page.evaluate(() => {
      const main = document.querySelector('main');
      return { page: document.documentElement.scrollWidth - innerWidth, main: main.scrollWidth - main.clientWidth };
    });
    assert.deepEqual(overflow, { page: 0, main: 0 }, `${tab} overflows sideways`);
    if (tab === 'history') {
      // The runs' columns fit too, rather than hiding behind a scroll bar.
      const table = await page.getByTestId('history-row').first().evaluate((row) => {
        const wrap = row.closest('table').parentElement;
        return wrap.scrollWidth - wrap.clientWidth;
      });
      assert.equal(table, 0, 'the runs table overflows its card');
    }
    await shoot(`layout-800-${tab}`);
  }
});

test("History's toolbar holds one line at 1280 px, filters and their Clear included", async () => {
  await page.setViewportSize({ width: 1280, height: 800 });
  try {
    await page.getByTestId('tab-history').click();
    await page.getByTestId('history-search').fill('giraff');
    await page.getByTestId('history-filter-model').fill('smollm');
    await rowsAre([(await listRuns('&search=giraff'))[0].id]);
    const tops = await page.evaluate(() =>
      [...document.querySelector('.history .toolbar').children].map((c) => Math.round(c.getBoundingClientRect().top)),
    );
    assert.ok(Math.max(...tops) - Math.min(...tops) < 10, `the toolbar wrapped: tops ${tops}`);
    await shoot('history-toolbar-1280');
  } finally {
    await page.setViewportSize({ width: 800, height: 600 });
  }
});

/** One greedy run of `prompt` in `mode` through the API; returns its stored record. */
async function greedyRun(prompt, mode) {
  const response = await api('/api/generate', {
    method: 'POST',
    body: JSON.stringify({ messages: [{ role: 'user', content: prompt }], mode, max_tokens: 8, sampling: { temperature: 0 } }),
  });
  const id = Number(/"run_id":(\d+)/.exec(await response.text())[1]);
  return (await (await api(`/api/runs/${id}`)).json()).run;
}

async function selectRuns(runIds) {
  for (const id of runIds) {
    await page.getByRole('checkbox', { name: `Select run ${id} to compare` }).check();
  }
}

test('selected greedy runs say "identical to normal" token for token, and where one parts, how likely both tokens were', async () => {
  const prompt = 'Name a fruit.';
  const normal = await greedyRun(prompt, 'normal');
  const lookup = await greedyRun(prompt, 'lookup');
  assert.equal(normal.token_ids.length, 8, 'the normal run kept its tokens');
  assert.deepEqual(lookup.token_ids, normal.token_ids, 'exact sums: lookup wrote the same tokens');

  // A run that parts from normal at its third token, as one would where sums tip a near-tie.
  const document = JSON.parse(await (await api(`/api/runs/export?format=json&search=${encodeURIComponent('fruit')}`)).text());
  const entry = document.runs.find((e) => e.run.id === lookup.id);
  entry.run.uid = crypto.randomUUID();
  entry.run.token_ids = [...normal.token_ids.slice(0, 2), normal.token_ids[2] + 1, ...normal.token_ids.slice(3)];
  const imported = await (
    await api('/api/runs/import', { method: 'POST', body: JSON.stringify({ ...document, runs: [entry], comparisons: [] }) })
  ).json();
  assert.equal(imported.imported, 1, JSON.stringify(imported));
  const parted = (await listRuns()).find((r) => r.uid === entry.run.uid);

  await page.getByTestId('tab-history').click();
  await page.getByTestId('history-search').fill('');
  await page.getByTestId('history-filter-model').fill('');
  await page.getByTestId('history-refresh').click();
  await selectRuns([normal.id, lookup.id, parted.id]);
  const outputs = page.getByTestId('history-selected-output');
  await outputs.nth(1).filter({ hasText: 'identical to normal' }).waitFor();
  await outputs.nth(2).filter({ hasText: 'differs at token 3' }).waitFor();
  const divergence = page.getByTestId('history-selected-divergence');
  await divergence.waitFor();
  assert.match(await divergence.innerText(), /Parted from normal at token 3: normal wrote “.*” \(log-prob -?\d+\.\d\d, the model's .*\), prompt lookup “.*” \(log-prob -?\d+\.\d\d/s);
  assert.equal(await divergence.count(), 1, 'only the run that parts is explained');
  await shoot('history-selected-divergence');
});

test('a side by side of runs of different prompts says so above the comparison', async () => {
  // Still selected from the test before: runs of one prompt, with nothing to say of it.
  await page.getByTestId('history-selected').waitFor();
  assert.equal(await page.getByTestId('history-selected-prompts-differ').count(), 0);
  const other = await greedyRun('Name a vegetable.', 'lookup');
  await page.getByTestId('history-refresh').click();
  await selectRuns([other.id]);
  const note = page.getByTestId('history-selected-prompts-differ');
  await note.waitFor();
  assert.match(await note.innerText(), /^Different prompts\. These runs were asked 2 different prompts \(marked A, B in the Prompt row\)\./);
  assert.match(await note.innerText(), /not because of how it was decoded/);
  assert.deepEqual(await page.getByTestId('history-selected-prompt-letter').allInnerTexts(), ['A', 'A', 'A', 'B']);
  // Its output is not called a difference of decoding.
  const outputs = page.getByTestId('history-selected-output');
  assert.match(await outputs.nth(3).innerText(), /^another prompt than #\d+/);
  assert.match(await page.getByTestId('history-selected-speedup').nth(3).innerText(), /^\d+\.\d\d× \(another prompt\)$/);
  await page.getByTestId('history-selected').scrollIntoViewIfNeeded();
  await shoot('history-selected-prompts-differ');
  // Back to one prompt, the note goes.
  await page.getByRole('button', { name: `Remove run ${other.id}` }).click();
  await note.waitFor({ state: 'detached' });
});

test("a comparison's runs side by side show the comparison's own figures, as Compare judged them", async () => {
  const prompt = 'Name a planet.';
  const runs = [];
  // Two rounds in rotating order, as Compare runs them.
  for (const mode of ['normal', 'medusa', 'medusa', 'normal']) runs.push(await greedyRun(prompt, mode));
  const created = await fetch(`${server.url}/api/comparisons`, {
    method: 'POST',
    headers: { ...server.headers, 'Content-Type': 'application/json' },
    body: JSON.stringify({ run_ids: runs.map((r) => r.id) }),
  });
  assert.equal(created.status, 201);
  const comparison = await created.json();
  await page.getByTestId('history-refresh').click();
  await page.getByTestId('history-tab-comparisons').click();
  await page.locator(`[data-testid="history-comparison"][data-comparison-id="${comparison.id}"]`).click();
  const selected = page.getByTestId('history-selected');
  await selected.filter({ hasText: `Comparison #${comparison.id}: each run's decode speed over its own round's normal run` }).waitFor();
  const cells = page.getByTestId('history-selected-speedup');
  assert.equal(await cells.count(), 4);
  const verdicts = Object.fromEntries(comparison.modes.map((m) => [m.mode, m.verdict]));
  const noise = new Set(['within_noise', 'unexplained', 'drafted_nothing', 'barely_drafted', 'rounds_disagree']);
  for (const [i, member] of comparison.runs.entries()) {
    const cell = cells.nth(i);
    const [text, tone] = [await cell.innerText(), await cell.getAttribute('data-tone')];
    if (member.mode === 'normal') {
      assert.equal(text, i === 0 ? 'baseline' : `round ${member.round + 1} baseline`);
    } else if (noise.has(verdicts[member.mode])) {
      assert.equal(text, `noise (measured ${member.speedup.toFixed(2)}×)`);
      assert.equal(tone, 'muted');
    } else {
      assert.equal(text, `${member.speedup.toFixed(2)}×`);
      assert.equal(tone, verdicts[member.mode] === 'faster' ? 'gain' : 'plain');
    }
  }
  await selected.scrollIntoViewIfNeeded();
  await shoot('history-comparison-side-by-side');
});

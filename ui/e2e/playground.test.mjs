// The web UI end to end: a real `medusa serve` on the default model, a real SQLite history and
// headless Chromium. The server requires an API key, so every view is also shown to work with
// the cookie its printed link sets. Screenshots of each view go to test-artifacts/ui/.

import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { artifacts, chatControl, LONG, openTab, parseCsv, screenshots, startBrowser, startServer } from './harness.mjs';

/** CPU generation is slow and the machine may be busy: generous limits, never timing asserts. */
/** A folder the server may load models from over HTTP (besides the models cache). */
const modelsDir = mkdtempSync(join(tmpdir(), 'medusa-models-'));
// Five rounds: two modes that decode alike then have overlapping ranges all but by a rare chance.
const COMPARE_REPEATS = 5;
const COMPARE_TOKENS = 24;

let server;
let browser;
let page;

before(async () => {
  server = await startServer({ apiKey: 'e2e-key-0123456789abcdef', extraArgs: ['--models-dir', modelsDir] });
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

test('chat streams an answer and shows its stats', async () => {
  await openTab(page, 'chat');
  // Greedy for the chats of this file: their answers (long enough to stop, say) then repeat.
  await page.getByTestId('chat-sampling-toggle').click();
  await page.getByTestId('view-chat').getByTestId('sampling-greedy').click();
  await page.getByTestId('chat-sampling-toggle').click();
  await (await chatControl(page, 'chat-mode')).selectOption('medusa');
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
  assert.match(figures, /tokens\/step/);
  // Medusa runs show acceptance per head.
  assert.equal(await stats.getByTestId('acceptance-bars').count(), 1);
  await shoot('chat');
});

test('Esc stops a chat run, which is kept as cancelled', async () => {
  await openTab(page, 'chat');
  await (await chatControl(page, 'chat-mode')).selectOption('normal');
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
  await openTab(page, 'compare');
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
  // are called noise, in a neutral colour; a mode that drafted nothing decoded as normal does, so
  // its difference is noise in either direction.
  const stored = await (await fetch(`${server.url}/api/comparisons`, { headers: server.headers })).json();
  const normal = range(rows[0][3]);
  for (const [i, mode] of [[1, 'medusa'], [2, 'lookup']]) {
    const own = range(rows[i][3]);
    const card = page.locator(`[data-testid="compare-verdict"][data-mode="${mode}"]`);
    const verdict = await card.getAttribute('data-verdict');
    const figures = stored.comparisons[0].modes.find((m) => m.mode === mode);
    const drafted = figures.drafted_tokens;
    const overlap = own.min <= normal.max && normal.min <= own.max;
    const text = await card.getByTestId('compare-verdict-text').innerText();
    if (drafted === 0) {
      assert.equal(verdict, 'drafted_nothing', `${mode} drafted nothing`);
      assert.match(text, /^noise: drafted nothing/);
    } else if (figures.drafted_per_step !== null && figures.drafted_per_step < 0.15) {
      // Too few drafted tokens per step to move the speed that far, whichever way it went.
      assert.equal(verdict, 'barely_drafted', `${mode}: ${figures.drafted_per_step} drafted per step`);
      assert.match(text, /^noise: it drafted only \d+\.\d\d tokens per step, too few to move the speed/);
    } else if (overlap && !['unexplained', 'rounds_disagree'].includes(verdict)) {
      assert.equal(verdict, 'within_noise', `${mode}: overlapping ranges`);
      assert.match(text, /^within noise/);
    } else {
      assert.ok(['faster', 'slower', 'unexplained', 'rounds_disagree'].includes(verdict), `${mode}: ${verdict}`);
    }
    // Noise is the result shown big; the measured figure stays beside it, small.
    const noise = ['drafted_nothing', 'barely_drafted', 'within_noise', 'unexplained', 'rounds_disagree'].includes(verdict);
    assert.equal(await card.getByTestId('compare-noise').count(), noise ? 1 : 0, `${mode}: ${verdict}`);
    if (noise) {
      assert.match(await card.getByTestId('compare-noise').innerText(), /^noise\s+\d+\.\d\d×/);
      assert.ok(!(await card.getByTestId('compare-speedup').getAttribute('class')).includes('faster'));
    }
  }
  // Greedy runs are checked against normal's, every one of them.
  for (const text of await page.getByTestId('compare-identical').allInnerTexts()) {
    assert.match(text, new RegExp(`^(Identical output in all ${COMPARE_REPEATS} runs|Differs from normal in \\d+ of ${COMPARE_REPEATS} runs)$`));
  }
  assert.equal(stored.comparisons[0].repeats, COMPARE_REPEATS);
  assert.equal(stored.comparisons[0].runs.length, 3 * COMPARE_REPEATS);
  await shoot('compare');
});

test('three concurrent prompts stream in three lanes and finish', async () => {
  await openTab(page, 'concurrent');
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
  // Answers read as markdown, as in Chat; Drafted tokens shows them as tinted text instead.
  assert.equal(await lanes.locator('[data-testid="chat-markdown"]').count(), 3);
  await page.getByTestId('concurrent-show-drafted').check();
  assert.equal(await lanes.locator('[data-testid="tinted-text"]').count(), 3);
  assert.equal(await lanes.locator('[data-testid="chat-markdown"]').count(), 0);
  await page.getByTestId('concurrent-show-drafted').uncheck();
  await shoot('concurrent');
});

test('history lists the runs and exports them as CSV', async () => {
  await openTab(page, 'history');
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
  await openTab(page, 'settings');
  const info = await (await fetch(`${server.url}/api/info`, { headers: server.headers })).json();
  assert.match(await page.getByTestId('view-settings').innerText(), new RegExp(info.model.file_type));
  // Heads without a training record keep the tree stored with them, and Settings says so.
  assert.match(await page.getByTestId('settings-medusa-plan').innerText(), /stored \d+-node tree/);
  // Where the heads run, as the backend measured it when they loaded.
  assert.equal(await page.getByTestId('settings-heads-compute').innerText(), info.model.heads.compute.summary);
  assert.match(info.model.heads.compute.summary, /ms per head/);
  await page.getByTestId('settings-tune-run').click();
  const decision = page.getByTestId('settings-tune-decision');
  await decision.waitFor();
  // Heads that repeat the model's next token never pay for themselves on this CPU.
  assert.match(await decision.innerText(), /plain decoding|medusa with a \d+-node tree/);
  assert.ok((await page.locator('[data-testid="settings-tune"] tbody tr').count()) >= 8);
  assert.match(await page.getByTestId('settings-tune-counted').innerText(), /rank paths most often right here would yield \d\.\d\d tokens per step/);
  await shoot('settings');
});

test('a named tree is drafted in full at every step', async () => {
  await openTab(page, 'chat');
  const fresh = page.getByTestId('chat-new');
  if (await fresh.isEnabled()) await fresh.click();
  await (await chatControl(page, 'chat-mode')).selectOption('medusa');
  // Auto drafts what pays on this machine; a named tree is drafted whatever it costs.
  await (await chatControl(page, 'chat-tree')).selectOption('mc_sim_7b_63');
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
  await (await chatControl(page, 'chat-tree')).selectOption('auto');
  await fresh.click();
});

async function api(path) {
  const response = await fetch(`${server.url}${path}`, { headers: server.headers });
  assert.equal(response.status, 200, path);
  return response.json();
}

/** Asks `read` again until `done` holds for its answer (the machine may be slow), and returns it. */
async function until(read, done, what) {
  const deadline = Date.now() + LONG;
  for (;;) {
    const value = await read();
    if (done(value)) return value;
    assert.ok(Date.now() < deadline, `timed out waiting for ${what}: ${JSON.stringify(value).slice(0, 300)}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

/** Waits until the page shows `n` lanes, all finished. */
async function lanesFinished(on, n) {
  await on.waitForFunction(
    (count) => {
      const lanes = [...document.querySelectorAll('[data-testid="concurrent-lane"]')];
      return lanes.length === count && lanes.every((lane) => lane.getAttribute('data-status') === 'finished');
    },
    n,
    { timeout: LONG },
  );
}

test('sixteen lanes stream over the page one event socket and all finish', async () => {
  // A fresh page (the browser keeps the key's cookie), so that every socket it opens is seen.
  const fresh = await page.context().newPage();
  fresh.setDefaultTimeout(LONG);
  const sockets = [];
  const finished = new Set();
  const generatePosts = [];
  fresh.on('request', (r) => r.url().endsWith('/api/generate') && generatePosts.push(r.url()));
  fresh.on('websocket', (ws) => {
    sockets.push(ws.url());
    ws.on('framereceived', ({ payload }) => {
      const message = JSON.parse(String(payload));
      if (message.type === 'run' && message.event.type === 'finished') finished.add(message.id);
    });
  });
  try {
    await fresh.goto(server.url);
    await fresh.getByTestId('status').and(fresh.locator('[data-status="ready"]')).waitFor();
    await fresh.getByTestId('tab-concurrent').click();
    await fresh.getByTestId('concurrent-preset').selectOption('16');
    await fresh.getByTestId('concurrent-max-tokens').fill('16');
    const info = await api('/api/info');
    assert.ok(info.model.parallel < 16, `${info.model.parallel} slots: some lanes must queue`);
    await fresh.getByTestId('concurrent-run').click();
    await lanesFinished(fresh, 16);
    assert.deepEqual(sockets, [`${server.url.replace(/^http/, 'ws')}/api/events`]);
    assert.equal(finished.size, 16, 'a finished event for each of the 16 generations');
    assert.deepEqual(generatePosts, []);
    const runs = (await api('/api/runs?limit=16')).runs;
    assert.equal(runs.length, 16);
    for (const run of runs) {
      assert.equal(run.status, 'finished');
      assert.equal(run.max_tokens, 16);
    }
    await screenshots(fresh, 'concurrent-16', { fullPage: true });
  } finally {
    await fresh.close();
  }
});

test('Concurrent has the sampling panel of Chat, and Greedy makes its runs greedy', async () => {
  await openTab(page, 'concurrent');
  const info = await api('/api/info');
  const recommended = info.model.sampling_defaults.params;
  const toggle = page.getByTestId('concurrent-sampling-toggle');
  // The lanes sample like Chat: the model's recommendation, else the chat default.
  assert.equal((await toggle.innerText()).trim(), `Sampling: temperature ${recommended.temperature} ▾`);
  await toggle.click();
  const panel = page.getByTestId('concurrent-sampling');
  const temperature = panel.getByLabel('Temperature');
  assert.equal(Number(await temperature.inputValue()), recommended.temperature);
  assert.equal(Number(await panel.getByLabel('Top-p').inputValue()), recommended.top_p);
  assert.equal(Number(await panel.getByLabel('Repeat penalty').inputValue()), recommended.repeat_penalty);
  // Every input stays inside its own cell.
  const cells = await panel.locator('label:has(input)').evaluateAll((labels) =>
    labels.map((label) => {
      const cell = label.getBoundingClientRect();
      const input = label.querySelector('input').getBoundingClientRect();
      return { name: label.textContent.trim(), cell: [cell.left, cell.right], input: [input.left, input.right] };
    }),
  );
  // Eight numbers and the JSON answer toggle.
  assert.equal(cells.length, 9);
  assert.ok(cells.some(({ name }) => name.startsWith('JSON answer')), JSON.stringify(cells.map(({ name }) => name)));
  for (const { name, cell, input } of cells) {
    assert.ok(input[0] >= cell[0] - 0.5 && input[1] <= cell[1] + 0.5, `${name}: input ${input} spills out of ${cell}`);
  }
  await screenshots(page, 'concurrent-sampling', { fullPage: true });

  await panel.getByTestId('sampling-greedy').click();
  assert.equal(await temperature.inputValue(), '0');
  assert.equal(await panel.getByLabel('Repeat penalty').inputValue(), '1');
  assert.match(await toggle.innerText(), /^Sampling: greedy/);
  await page.getByTestId('concurrent-input').fill(['Name a colour.', 'Name a month.'].join('\n'));
  await page.getByTestId('concurrent-max-tokens').fill('8');
  await page.getByTestId('concurrent-run').click();
  await lanesFinished(page, 2);
  const runs = (await api('/api/runs?limit=2')).runs;
  assert.deepEqual(
    runs.map((r) => [r.prompt.content.at(-1).content, r.sampling.temperature, r.sampling.repeat_penalty, r.max_tokens]).sort(),
    [
      ['Name a colour.', 0, 1, 8],
      ['Name a month.', 0, 1, 8],
    ],
  );
  // And back to the model's sampling.
  await panel.getByTestId('sampling-defaults').click();
  assert.equal(Number(await temperature.inputValue()), recommended.temperature);
  await toggle.click();
});

test('Compare stays greedy, and says so', async () => {
  await openTab(page, 'compare');
  assert.match(await page.getByTestId('view-compare').innerText(), /Greedy, one mode at a time/);
  const compared = (await api('/api/comparisons')).comparisons[0];
  const runs = await Promise.all(compared.runs.map((m) => api(`/api/runs/${m.run_id}`)));
  assert.equal(runs.length, 3 * COMPARE_REPEATS);
  for (const { run } of runs) assert.equal(run.sampling.temperature, 0);
});

test('Compare gives Medusa and Auto each their own tree, and the stored runs say which', async () => {
  await openTab(page, 'compare');
  // No draft model is loaded here: its box is off, not ticked and greyed.
  const draft = page.getByTestId('compare-draft');
  assert.ok((await draft.isDisabled()) && !(await draft.isChecked()), 'no draft model: unticked');
  await page.getByTestId('compare-input').fill('Say "yes yes yes".');
  await page.getByTestId('compare-lookup').uncheck();
  await page.getByTestId('compare-auto').check();
  await page.getByTestId('compare-tree').selectOption('chain-2');
  const autoTree = page.getByTestId('compare-auto-tree');
  assert.equal(await autoTree.inputValue(), 'auto', 'a tree picked for Medusa is not Auto\'s');
  await page.getByTestId('compare-max-tokens').fill('8');
  await page.getByTestId('compare-repeats').fill('1');
  await page.getByTestId('compare-run').click();
  await page.getByTestId('compare-stored').waitFor({ timeout: LONG });
  const compared = (await api('/api/comparisons')).comparisons[0];
  const trees = {};
  for (const member of compared.runs) {
    const { run } = await api(`/api/runs/${member.run_id}`);
    trees[run.mode] = run.tree;
  }
  assert.deepEqual(Object.keys(trees).sort(), ['auto', 'medusa', 'normal']);
  // Stored as paths of ranks: Medusa's is the chain picked for it; Auto's is the heads' own.
  assert.deepEqual(trees.medusa, [[0], [0, 0]]);
  assert.notDeepEqual(trees.auto, trees.medusa, 'a tree picked for Medusa is not applied to Auto');
  // As it was, for the tests after this one.
  await page.getByTestId('compare-tree').selectOption('auto');
  await page.getByTestId('compare-auto').uncheck();
  await page.getByTestId('compare-lookup').check();
  await page.getByTestId('compare-repeats').fill(String(COMPARE_REPEATS));
});

test('a failed load beside the model in use is said in Settings only; the model keeps serving', async () => {
  const before = await api('/api/info');
  const broken = join(modelsDir, 'broken.gguf');
  writeFileSync(broken, 'not a GGUF file');
  const response = await fetch(`${server.url}/api/model`, {
    method: 'POST',
    headers: { ...server.headers, 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: broken }),
  });
  assert.ok(response.ok, `the load starts: ${response.status}`);
  const failed = await until(() => api('/api/info'), (i) => !i.loading && i.error !== null, 'the load to fail');
  assert.equal(failed.model.path, before.model.path, 'the old model still serves');

  // A fresh tab of the page: no banner over any view.
  const fresh = await page.context().newPage();
  try {
    await fresh.goto(server.openUrl);
    await fresh.locator('[data-testid="status"][data-status="ready"]').waitFor();
    for (const tab of ['chat', 'compare', 'history']) {
      await fresh.getByTestId(`tab-${tab}`).click();
      assert.equal(await fresh.getByTestId('load-error').count(), 0, `no banner in ${tab}`);
    }
    await fresh.getByTestId('tab-settings').click();
    const said = fresh.getByTestId('settings-error');
    await said.waitFor();
    assert.match(await said.innerText(), new RegExp(`^Last load failed \\(.+\\): .+ ${before.model.name} is still in use\\.$`, 's'));
    assert.equal(await fresh.getByTestId('load-error').count(), 0);
  } finally {
    await fresh.close();
  }
});

test('settings reload the model with another context size', async () => {
  await openTab(page, 'settings');
  const before = await api('/api/info');
  assert.equal(before.model.n_ctx, 1024);
  const size = page.getByTestId('settings-context-size');
  const apply = page.getByTestId('settings-context-apply');
  assert.equal(await size.inputValue(), '1024');
  assert.ok(await apply.isDisabled(), 'nothing to apply at the size in use');

  // The backend's own answer to a size it does not take.
  await size.fill('100');
  await apply.click();
  const error = page.getByTestId('settings-context-error');
  await error.waitFor();
  assert.equal(
    await error.innerText(),
    'invalid_parameter: the context size must be between 256 and 1048576 tokens, not 100',
  );

  const exactBox = page.getByTestId('settings-exact');
  assert.ok(await exactBox.isChecked(), 'exact sums by default');
  const reload = async (n, exact = true) => {
    await size.fill(String(n));
    await exactBox.setChecked(exact);
    await apply.click();
    const info = await until(
      () => api('/api/info'),
      (i) => !i.loading && i.model?.n_ctx === n && i.model?.exact === exact,
      `n_ctx ${n}, exact ${exact}`,
    );
    const sums = exact ? 'exact sums' : 'sums by batch shape';
    await page.getByTestId('settings-context-status').and(page.getByText(`Reloaded: ${n} tokens per request, ${sums}.`)).waitFor();
    assert.equal(await size.inputValue(), String(n));
    assert.equal(await exactBox.isChecked(), exact);
    assert.match(await page.getByTestId('settings-exact-state').innerText(), exact ? /^exact/ : /^by batch shape/);
    // The server loads with the batched kernels; a reload keeps them, and Settings says so.
    assert.equal(info.model.cpu_kernels, 'batched');
    assert.match(await page.getByTestId('settings-kernels').innerText(), /^batched: /);
    // ...with the instruction set this CPU runs them with.
    assert.match(info.model.cpu_instruction_set, /^(AVX-512 VNNI|AVX2)$/);
    assert.equal(await page.getByTestId('settings-instruction-set').innerText(), info.model.cpu_instruction_set);
    assert.equal(info.model.path, before.model.path);
    assert.equal(info.heads_path, before.heads_path);
    assert.equal(info.error, null);
    return info;
  };
  await reload(2048);
  assert.equal(await error.count(), 0, 'the old error is gone');
  await shoot('settings-context');
  // Exact mode off and on again, at the same size.
  await reload(2048, false);
  // Back to the size the server started with, for whatever runs next.
  await reload(1024);
});

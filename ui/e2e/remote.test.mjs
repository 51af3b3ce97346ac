// Remote engines end to end: a second `medusa serve` (API only, no heads) is added in Settings as
// the engine "lab" of the first; Chat answers on its model and says so, Compare sets a Medusa run
// here beside the normal run there of the same prompt, Concurrent runs its lanes there, History
// names the engine of remote runs (and the second server's own history has the same requests), an
// engine that cannot be reached is shown with the reason and a run on one that went away fails
// with it, and Settings removes them. Real servers on the default model, greedy; screenshots go to
// test-artifacts/ui/. A fake plain OpenAI server (which keeps every body it is sent) is offered
// normal decoding only, in every view, and is sent no `mode`.

import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { after, before, test } from 'node:test';
import { chatControl, openPage, openTab, screenshots, startBrowser, startServer } from './harness.mjs';

/** CPU generation is slow and the machine may be busy: generous limits, never timing asserts. */
const QUESTION = 'Name a colour.';
const COMPARED = 'List three fruits.';
const LANES = ['Write a haiku about the sea.', 'Name three animals.'];

let server;
let remote;
/** The fake plain OpenAI server, and the bodies of the generations it was sent. */
let openai;
const PLAIN_MODEL = 'plain-model';
const received = [];
let browser;
let page;
/** The model the remote engine lists first. */
let remoteModel;

/** An OpenAI-compatible server that is not a medusa serve: it lists a model and streams "Blue sky". */
function plainOpenAi() {
  return createServer((req, res) => {
    if (req.method === 'GET' && req.url === '/v1/models') {
      res.writeHead(200, { 'Content-Type': 'application/json' });
      res.end(JSON.stringify({ object: 'list', data: [{ id: PLAIN_MODEL, object: 'model', owned_by: 'someone' }] }));
      return;
    }
    if (req.method === 'POST' && req.url === '/v1/chat/completions') {
      let body = '';
      req.on('data', (chunk) => (body += chunk));
      req.on('end', () => {
        received.push(JSON.parse(body));
        res.writeHead(200, { 'Content-Type': 'text/event-stream' });
        for (const text of ['Blue', ' sky']) res.write(`data: ${JSON.stringify({ choices: [{ index: 0, delta: { content: text } }] })}\n\n`);
        res.write(`data: ${JSON.stringify({ choices: [], usage: { prompt_tokens: 9, completion_tokens: 2, total_tokens: 11 } })}\n\n`);
        res.end('data: [DONE]\n\n');
      });
      return;
    }
    res.writeHead(404).end();
  });
}

before(async () => {
  openai = plainOpenAi();
  await new Promise((resolve) => openai.listen(0, '127.0.0.1', resolve));
  openai.url = `http://127.0.0.1:${openai.address().port}`;
  remote = await startServer({ plain: true });
  server = await startServer();
  const models = await (await fetch(`${remote.url}/v1/models`)).json();
  remoteModel = models.data[0].id;
  browser = await startBrowser();
  page = await openPage(browser, server.url, { viewport: { width: 1100, height: 800 } });
});

after(async () => {
  await browser?.close();
  await server?.stop();
  await remote?.stop();
  openai?.close();
});

async function api(base, path) {
  const response = await fetch(`${base}${path}`);
  assert.equal(response.status, 200, path);
  return response.json();
}

async function runs(base) {
  return (await api(base, '/api/runs?limit=1000')).runs;
}

/** `text` matched literally in a RegExp. */
function escaped(text) {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

/** Waits until `check()` resolves to a truthy value, and answers it. */
async function until(check) {
  for (;;) {
    const value = await check();
    if (value) return value;
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** The last user message of a stored run's prompt. */
function question(run) {
  const users = run.prompt.content.filter((m) => m.role === 'user');
  return users[users.length - 1]?.content;
}

const engine = (name) => page.locator(`[data-testid="remote-engine"][data-name="${name}"]`);

/** The values a mode select offers. */
async function modeOptions(testid) {
  return page.getByTestId(testid).locator('option').evaluateAll((options) => options.map((o) => o.value));
}

async function addRemote(name, url) {
  await openTab(page, 'settings');
  await page.getByTestId('remote-name').fill(name);
  await page.getByTestId('remote-url').fill(url);
  await page.getByTestId('remote-add-button').click();
  await engine(name).waitFor();
}

test('Settings adds the second server as a remote engine and lists its model', async () => {
  await openTab(page, 'settings');
  assert.equal(await page.getByTestId('remote-key').getAttribute('type'), 'password');
  assert.match(await page.getByTestId('settings-remotes').innerText(), /vLLM, SGLang, llama-server or another medusa serve: http:\/\/host:port/);
  await addRemote('lab', remote.url);
  const models = engine('lab').getByTestId('remote-models');
  await models.waitFor();
  assert.equal(await models.innerText(), remoteModel);
  const text = await engine('lab').innerText();
  assert.match(text, new RegExp(escaped(remote.url)));
  assert.match(text, /no key/);
  assert.match(text, /saved/);
  // Adding it again under its name is refused with the backend's message.
  await page.getByTestId('remote-name').fill('lab');
  await page.getByTestId('remote-url').fill(remote.url);
  await page.getByTestId('remote-add-button').click();
  await page.getByTestId('remotes-error').waitFor();
  assert.match(await page.getByTestId('remotes-error').innerText(), /there is a remote engine named 'lab' already/);
  await page.getByTestId('remote-name').fill('');
  await page.getByTestId('remote-url').fill('');
  await page.getByTestId('remotes-refresh').click();
  await page.waitForFunction(() => document.querySelector('[data-testid="remotes-refresh"]')?.textContent?.trim() === 'Refresh');
  assert.equal(await models.innerText(), remoteModel);
  await screenshots(page, 'remote-settings', { fullPage: true });
});

test('after a restart the saved engine is asked again, so its model shows by name', async () => {
  await server.restart();
  await page.goto(server.url);
  await page.locator('[data-testid="status"][data-status="ready"]').waitFor();
  await openTab(page, 'chat');
  await page.locator(`[data-testid="chat-engine"] option[value="lab/${remoteModel}"]`).waitFor({ state: 'attached' });
  assert.doesNotMatch(await page.getByTestId('chat-engine').innerText(), /its first model/);
});

test('Chat answers on the remote engine, greedy, and its figures say where it ran', async () => {
  await openTab(page, 'chat');
  await page.getByTestId('chat-engine').selectOption(`lab/${remoteModel}`);
  // The model served here is set aside while runs go elsewhere.
  assert.equal(await page.getByTestId('chat-model').isDisabled(), true);
  assert.match(await page.getByTestId('chat-model').getAttribute('title'), /^Runs go to the remote engine lab:/);
  // Another medusa serve (without heads) is offered the modes it lists, by their names.
  assert.deepEqual(await modeOptions('chat-mode'), ['normal', 'lookup', 'auto']);
  await (await chatControl(page, 'chat-mode')).selectOption('normal');
  // A remote engine drafts as it was started: no tree or draft length to pick.
  assert.equal(await (await chatControl(page, 'chat-tree')).count(), 0);
  assert.equal(await (await chatControl(page, 'chat-draft-length')).count(), 0);
  await page.getByTestId('chat-sampling-toggle').click();
  const greedy = page.getByTestId('view-chat').getByTestId('sampling-greedy');
  if (await greedy.isEnabled()) await greedy.click();
  await page.getByTestId('view-chat').getByLabel('Max tokens', { exact: true }).fill('24');
  await page.getByTestId('chat-sampling-toggle').click();

  const input = page.getByTestId('chat-input');
  await input.fill(QUESTION);
  await input.press('Enter');
  await page.getByTestId('chat-stats').waitFor();
  const answer = page.locator('[data-testid="chat-message"][data-role="assistant"]');
  assert.notEqual((await answer.locator('.bubble').innerText()).trim(), '');
  assert.equal(await page.getByTestId('chat-stats').getByTestId('run-engine').innerText(), `on lab · ${remoteModel}`);
  await screenshots(page, 'remote-chat');

  const [local] = await runs(server.url);
  assert.equal(local.engine, 'lab');
  assert.equal(local.model.name, remoteModel);
  assert.equal(local.model.path, remote.url);
  assert.equal(local.status, 'finished');
  assert.equal(local.sampling.temperature, 0);
  assert.equal(question(local), QUESTION);
  // The second server ran and recorded the same request, on its own model.
  const [theirs] = await runs(remote.url);
  assert.equal(theirs.engine, null);
  assert.equal(question(theirs), QUESTION);
  assert.equal(theirs.output, local.output);
});

test('Compare sets a Medusa run here beside the normal run of the same prompt on the remote engine', async () => {
  await openTab(page, 'compare');
  await page.getByTestId('compare-input').fill(COMPARED);
  await page.getByTestId('compare-max-tokens').fill('16');
  await page.getByTestId('compare-repeats').fill('1');
  if (await page.getByTestId('compare-lookup').isChecked()) await page.getByTestId('compare-lookup').uncheck();
  if (!(await page.getByTestId('compare-medusa').isChecked())) await page.getByTestId('compare-medusa').check();
  await page.getByTestId('compare-engine-normal').selectOption(`lab/${remoteModel}`);
  assert.equal(await page.getByTestId('compare-engine-medusa').inputValue(), 'local');
  await page.getByTestId('compare-run').click();
  await page.getByTestId('compare-stored').waitFor();

  const normal = page.locator('[data-testid="compare-panel"][data-mode="normal"]');
  const medusa = page.locator('[data-testid="compare-panel"][data-mode="medusa"]');
  assert.equal(await normal.getByTestId('compare-panel-engine').innerText(), `lab · ${remoteModel}`);
  assert.equal(await medusa.getByTestId('compare-panel-engine').count(), 0);
  assert.equal(await normal.getByTestId('run-engine').innerText(), `on lab · ${remoteModel}`);
  const verdict = page.locator('[data-testid="compare-verdict"][data-mode="medusa"]');
  // Captions are set in capitals: innerText has them so.
  assert.match(await verdict.innerText(), new RegExp(`Medusa vs Normal on lab · ${escaped(remoteModel)}`, 'i'));
  await screenshots(page, 'remote-compare', { fullPage: true });

  const [comparison] = (await api(server.url, '/api/comparisons')).comparisons;
  const members = await Promise.all(comparison.runs.map((m) => api(server.url, `/api/runs/${m.run_id}`)));
  const byMode = Object.fromEntries(members.map(({ run }) => [run.mode, run]));
  assert.deepEqual(Object.keys(byMode).sort(), ['medusa', 'normal']);
  assert.equal(byMode.normal.engine, 'lab');
  assert.equal(byMode.medusa.engine, null);
  assert.equal(question(byMode.normal), COMPARED);
  assert.equal(question(byMode.medusa), COMPARED);
  assert.ok((await runs(remote.url)).some((r) => question(r) === COMPARED), 'the remote recorded the compared prompt');
});

test('Concurrent runs its lanes on the remote engine', async () => {
  await openTab(page, 'concurrent');
  await page.getByTestId('concurrent-input').fill(LANES.join('\n'));
  await page.getByTestId('concurrent-max-tokens').fill('8');
  await page.getByTestId('concurrent-engine').selectOption(`lab/${remoteModel}`);
  assert.match(await page.getByTestId('view-concurrent').innerText(), new RegExp(`all on lab · ${escaped(remoteModel)}`));
  await page.getByTestId('concurrent-run').click();
  await page.waitForFunction(
    (n) =>
      [...document.querySelectorAll('[data-testid="concurrent-lane"]')].filter((l) => l.dataset.status === 'finished').length === n,
    LANES.length,
  );
  const places = await page.getByTestId('concurrent-lane-engine').allInnerTexts();
  assert.deepEqual(places, LANES.map(() => `on lab · ${remoteModel}`));
  const theirs = await runs(remote.url);
  for (const prompt of LANES) assert.ok(theirs.some((r) => question(r) === prompt), `the remote ran ${prompt}`);
});

test('A plain OpenAI server is offered normal decoding only, everywhere, and is sent no mode', async () => {
  await addRemote('plain', openai.url);
  assert.equal(await engine('plain').getByTestId('remote-kind').innerText(), 'OpenAI-compatible: normal decoding only');
  assert.match(await engine('lab').getByTestId('remote-kind').innerText(), /^medusa serve: normal, lookup, auto$/);

  await openTab(page, 'chat');
  // Auto here; on the plain server, normal alone, and no tree to pick.
  await page.getByTestId('chat-engine').selectOption('local');
  assert.equal(await page.getByTestId('chat-model').isDisabled(), false);
  await (await chatControl(page, 'chat-mode')).selectOption('auto');
  await page.getByTestId('chat-engine').selectOption(`plain/${PLAIN_MODEL}`);
  assert.deepEqual(await modeOptions('chat-mode'), ['normal']);
  assert.equal(await (await chatControl(page, 'chat-mode')).inputValue(), 'normal');
  assert.equal(await (await chatControl(page, 'chat-tree')).count(), 0);
  const input = page.getByTestId('chat-input');
  await input.fill('What colour is the sky?');
  await input.press('Enter');
  const answer = page.locator('[data-testid="chat-message"][data-role="assistant"]').last();
  await answer.getByTestId('chat-stats').waitFor();
  assert.match(await answer.locator('.bubble').innerText(), /Blue sky\s*$/);
  // The answer's badge says what ran.
  assert.equal(await answer.locator('.mode').textContent(), 'normal');
  assert.equal(received.length, 1);
  const sent = received[0];
  assert.equal(sent.model, PLAIN_MODEL);
  for (const field of ['mode', 'tree', 'draft_length', 'cache_prompt', 'top_k', 'min_p', 'repeat_penalty', 'grammar']) {
    assert.equal(field in sent, false, `${field} sent: ${JSON.stringify(sent)}`);
  }
  const [recorded] = await runs(server.url);
  assert.equal(recorded.engine, 'plain');
  assert.equal(recorded.mode, 'normal');
  await screenshots(page, 'remote-plain-chat');

  // Concurrent: normal alone there too.
  await openTab(page, 'concurrent');
  await page.getByTestId('concurrent-engine').selectOption(`plain/${PLAIN_MODEL}`);
  assert.deepEqual(await modeOptions('concurrent-mode'), ['normal']);
  await page.getByTestId('concurrent-engine').selectOption('local');

  // Compare: the plain server may take the normal run, not a drafting mode's.
  await openTab(page, 'compare');
  const option = (mode) => page.getByTestId(`compare-engine-${mode}`).locator(`option[value="plain/${PLAIN_MODEL}"]`);
  await option('medusa').waitFor({ state: 'attached' });
  assert.equal(await option('medusa').isDisabled(), true);
  assert.match(await option('medusa').getAttribute('title'), /Medusa runs here or on another medusa serve, not on plain/);
  assert.equal(await option('normal').isDisabled(), false);

  // Back to lab for the tests that follow.
  await openTab(page, 'chat');
  await page.getByTestId('chat-engine').selectOption(`lab/${remoteModel}`);
});

test('History names the engine of remote runs', async () => {
  const remoteRuns = (await runs(server.url)).filter((r) => r.engine === 'lab');
  // The chat's answer, the compared normal run and the lanes.
  assert.equal(remoteRuns.length, 2 + LANES.length);
  await openTab(page, 'history');
  for (const run of remoteRuns) {
    const row = page.locator(`[data-testid="history-row"][data-run-id="${run.id}"]`);
    await row.waitFor();
    assert.equal(await row.getByTestId('history-engine').innerText(), 'lab');
  }
  const [chatRun] = remoteRuns.filter((r) => question(r) === QUESTION);
  await page.locator(`[data-testid="history-row"][data-run-id="${chatRun.id}"]`).click();
  const detail = page.locator(`[data-testid="history-detail"][data-run-id="${chatRun.id}"]`);
  await detail.waitFor();
  assert.equal(await detail.getByTestId('history-detail-engine').innerText(), 'lab');
  assert.equal(await detail.getByTestId('history-detail-remote').innerText(), `lab (${remote.url})`);
  assert.match(await detail.innerText(), new RegExp(escaped(remoteModel)));
  // Local runs carry no engine.
  const local = (await runs(server.url)).find((r) => r.engine === null);
  assert.equal(await page.locator(`[data-testid="history-row"][data-run-id="${local.id}"]`).getByTestId('history-engine').count(), 0);
  await screenshots(page, 'remote-history');

  // Filtered by engine: lab's runs only, then this machine's only.
  const rows = page.locator('[data-testid="history-row"]');
  const shownIds = async () => (await rows.evaluateAll((els) => els.map((e) => Number(e.dataset.runId)))).sort();
  await page.getByTestId('history-filter-engine').selectOption('lab');
  const labIds = remoteRuns.map((r) => r.id).sort();
  await page.waitForFunction((n) => document.querySelectorAll('[data-testid="history-row"]').length === n, labIds.length);
  assert.deepEqual(await shownIds(), labIds);
  await page.getByTestId('history-filter-engine').selectOption('local');
  await page.locator(`[data-testid="history-row"][data-run-id="${local.id}"]`).waitFor();
  for (const id of labIds) assert.equal(await page.locator(`[data-testid="history-row"][data-run-id="${id}"]`).count(), 0);
  await page.getByTestId('history-filter-engine').selectOption('');
});

test('An engine that cannot be reached says so, and a run on one that went away fails with the reason', async () => {
  const before = await runs(server.url);
  await addRemote('dead', 'http://127.0.0.1:9');
  assert.match(await engine('dead').getByTestId('remote-error').innerText(), /cannot be reached/);

  await openTab(page, 'chat');
  const dead = page.getByTestId('chat-engine').locator('option[value="dead/"]');
  await dead.waitFor({ state: 'attached' });
  // The page's info follows the backend's: the engine's failure arrives with it.
  await page.waitForFunction(() => document.querySelector('[data-testid="chat-engine"] option[value="dead/"]')?.disabled === true);
  assert.match(await dead.innerText(), /dead: cannot be reached/);
  assert.match(await dead.getAttribute('title'), /remote engine 'dead' cannot be reached at http:\/\/127\.0\.0\.1:9/);

  // The second server stops: "lab" is still chosen (it listed its model), and the run fails.
  await remote.stop();
  assert.equal(await page.getByTestId('chat-engine').inputValue(), `lab/${remoteModel}`);
  const input = page.getByTestId('chat-input');
  await input.fill('Name an animal.');
  await input.press('Enter');
  const error = page.getByTestId('chat-error');
  await error.waitFor();
  assert.match(await error.innerText(), /remote_unreachable: remote engine 'lab' cannot be reached at/);

  // The history keeps every earlier run, and the failed one.
  await openTab(page, 'history');
  for (const run of before) await page.locator(`[data-testid="history-row"][data-run-id="${run.id}"]`).waitFor();
  const failed = await until(async () => {
    const [latest] = await runs(server.url);
    return latest.status !== 'running' && latest;
  });
  assert.equal(failed.status, 'failed');
  assert.match(failed.error, /cannot be reached/);
  assert.equal(failed.engine, 'lab');
  assert.equal((await runs(server.url)).length, before.length + 1);
});

test('Settings removes the remote engines and the pickers go back to this machine', async () => {
  await openTab(page, 'settings');
  for (const name of ['dead', 'lab', 'plain']) {
    await engine(name).getByTestId('remote-remove').click();
    await engine(name).waitFor({ state: 'detached' });
  }
  await page.getByTestId('remotes-empty').waitFor();
  assert.deepEqual(await api(server.url, '/api/remotes'), []);
  await openTab(page, 'chat');
  // With no engine left there is nothing to pick: the picker goes, and answers run here again.
  await page.getByTestId('chat-engine').waitFor({ state: 'detached' });
  // The model served here has heads: Medusa's tree can be picked again.
  await (await chatControl(page, 'chat-mode')).selectOption('medusa');
  await (await chatControl(page, 'chat-tree')).waitFor();
});

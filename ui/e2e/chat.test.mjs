// Chat end to end at the smallest layout the UI supports (800x600): answers rendered as markdown
// with highlighted code and Copy buttons, nothing the model writes made live, Regenerate, editing a
// question, and the system prompt, against a real `medusa serve` on the default model (greedy, so
// its answers repeat) with a real SQLite history. Screenshots go to test-artifacts/ui/.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { screenshots, startBrowser, startServer } from './harness.mjs';

/** CPU generation is slow and the machine may be busy: generous limits, never timing asserts. */
const LONG = 240_000;

let server;
let browser;
let page;

before(async () => {
  server = await startServer();
  browser = await startBrowser();
  const context = await browser.newContext({ viewport: { width: 800, height: 600 } });
  await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: server.url });
  page = await context.newPage();
  page.setDefaultTimeout(LONG);
  await page.goto(server.url);
  await page.getByTestId('tab-chat').click();
  await page.getByTestId('view-chat').waitFor({ state: 'visible' });
  await page.getByTestId('chat-mode').selectOption('normal');
  // Enter sends nothing until the model is in.
  await page.locator('[data-testid="status"][data-status="ready"]').waitFor();
});

after(async () => {
  await browser?.close();
  await server?.stop();
});

async function api(path) {
  const response = await fetch(`${server.url}${path}`, { headers: server.headers });
  assert.equal(response.status, 200, path);
  return response.json();
}

async function runs() {
  return (await api('/api/runs?limit=1000')).runs;
}

async function latestRun() {
  const [latest] = (await api('/api/runs?limit=1')).runs;
  return (await api(`/api/runs/${latest.id}`)).run;
}

const answers = () => page.locator('[data-testid="chat-message"][data-role="assistant"]');
const questions = () => page.locator('[data-testid="chat-message"][data-role="user"]');

/** Waits until `n` answers of this chat have finished (each shows its stats). */
async function finished(n) {
  await page.waitForFunction((n) => document.querySelectorAll('[data-testid="chat-stats"]').length === n, n);
}

async function newChat() {
  const fresh = page.getByTestId('chat-new');
  if (await fresh.isEnabled()) await fresh.click();
  await page.waitForFunction(() => document.querySelectorAll('[data-testid="chat-message"]').length === 0);
}

async function ask(text, answered) {
  const input = page.getByTestId('chat-input');
  await input.fill(text);
  await input.press('Enter');
  await finished(answered);
}

async function clipboard() {
  return page.evaluate(() => navigator.clipboard.readText());
}

/**
 * Nothing in the chat is wider than its place: the view and its message list do not scroll
 * sideways, and each message's buttons, code and text stay inside it.
 */
async function assertFits() {
  const overflow = await page.evaluate(() => {
    const wide = [];
    const view = document.querySelector('[data-testid="view-chat"]');
    if (view.scrollWidth > view.clientWidth) wide.push(`view ${view.scrollWidth} > ${view.clientWidth}`);
    const list = document.querySelector('[data-testid="chat-message"]')?.parentElement;
    if (list && list.scrollWidth > list.clientWidth) wide.push(`messages ${list.scrollWidth} > ${list.clientWidth}`);
    for (const message of document.querySelectorAll('[data-testid="chat-message"]')) {
      const box = message.getBoundingClientRect();
      for (const el of message.querySelectorAll('button, .code-block, [data-testid="chat-markdown"]')) {
        const r = el.getBoundingClientRect();
        if (r.width > 0 && (r.left < box.left - 1 || r.right > box.right + 1)) {
          wide.push(`${el.dataset.testid ?? el.className} ${r.left}–${r.right} outside ${box.left}–${box.right}`);
        }
      }
    }
    return wide;
  });
  assert.deepEqual(overflow, []);
}

function shoot(name) {
  return screenshots(page, name);
}

test('an answer with code renders as markdown with highlighted code and Copy buttons', async () => {
  await newChat();
  // Watch the answer stream: its code block is rendered while the run is still going.
  await page.evaluate(() => {
    window.codeWhileStreaming = false;
    const observer = new MutationObserver(() => {
      if (document.querySelector('[data-testid="chat-stop"]') && document.querySelector('[data-testid="chat-markdown"] pre code')) {
        window.codeWhileStreaming = true;
        observer.disconnect();
      }
    });
    observer.observe(document.body, { subtree: true, childList: true, characterData: true });
  });
  await ask('Write a Python function that adds two numbers. Use a code block.', 1);
  assert.equal(await page.evaluate(() => window.codeWhileStreaming), true, 'a code block while streaming');
  const answer = answers().last();
  const markdown = answer.getByTestId('chat-markdown');
  const code = markdown.locator('pre code.hljs.language-python');
  assert.equal(await code.count(), 1, 'one Python code block');
  assert.ok((await code.locator('span.hljs-keyword').count()) > 0, 'keywords are highlighted');
  const source = await code.textContent();
  assert.match(source, /def \w+\(/);
  // No fence marks are left in the rendered text.
  assert.ok(!(await markdown.innerText()).includes('```'));

  const copyCode = markdown.getByTestId('chat-copy-code');
  await copyCode.click();
  await page.waitForFunction(
    () => document.querySelector('[data-testid="chat-copy-code"]')?.textContent === 'Copied',
  );
  assert.equal(await clipboard(), source);

  // The whole message's markdown source is what the history stored.
  await answer.getByTestId('chat-copy-message').click();
  await answer.getByTestId('chat-copy-message').filter({ hasText: 'Copied' }).waitFor();
  const run = await latestRun();
  assert.equal(await clipboard(), run.output);
  assert.ok(run.output.includes('```python'));

  // The tinted view shows the same answer as text, fences and all; markdown is back when it is off.
  await page.getByTestId('chat-show-drafted').check();
  await answer.getByTestId('tinted-text').waitFor();
  assert.equal(await answer.getByTestId('chat-markdown').count(), 0);
  assert.equal(await answer.getByTestId('tinted-text').textContent(), run.output);
  await page.getByTestId('chat-show-drafted').uncheck();
  await markdown.waitFor();

  await assertFits();
  await shoot('chat-markdown');
});

test('HTML the model writes is shown as text, never made live', async () => {
  await newChat();
  await ask('Write a minimal HTML page with a script tag that shows an alert.', 1);
  const markdown = answers().last().getByTestId('chat-markdown');
  const live = await markdown.evaluate((root) => ({
    scripts: root.querySelectorAll('script, iframe, object, embed, img').length,
    handlers: [...root.querySelectorAll('*')].flatMap((el) =>
      [...el.attributes].filter((a) => a.name.startsWith('on')).map((a) => `${el.tagName} ${a.name}`),
    ),
    links: [...root.querySelectorAll('a[href]')].filter((a) => /^\s*javascript:/i.test(a.getAttribute('href'))).length,
  }));
  assert.deepEqual(live, { scripts: 0, handlers: [], links: 0 });
  // The greedy answer to this question writes a script tag: it is there as text.
  assert.ok((await markdown.textContent()).includes('<script>'), 'the script tag shows as text');
});

test('Regenerate replaces the last answer with a new run of the same conversation', async () => {
  await newChat();
  await ask('Name a fruit.', 1);
  const before = await runs();
  const first = await latestRun();
  // Mark the answer's element: the new answer must be another one.
  await answers().last().evaluate((el) => (el.dataset.old = 'yes'));
  await answers().last().getByTestId('chat-regenerate').click();
  await page.waitForFunction(() => !document.querySelector('[data-old]'));
  await finished(1);
  assert.equal(await answers().count(), 1);
  assert.equal(await questions().count(), 1);
  const after = await runs();
  assert.equal(after.length, before.length + 1);
  const second = await latestRun();
  assert.notEqual(second.id, first.id);
  assert.deepEqual(second.prompt, first.prompt);
  assert.deepEqual(second.prompt, { kind: 'chat', content: [{ role: 'user', content: 'Name a fruit.' }] });
});

test('an edited question replaces itself and everything after it', async () => {
  await newChat();
  await ask('Name a fruit.', 1);
  await ask('Name a colour.', 2);
  assert.equal(await questions().count(), 2);

  await questions().first().getByTestId('chat-edit').click();
  const box = page.getByTestId('chat-edit-input');
  assert.equal(await box.inputValue(), 'Name a fruit.');
  await box.fill('Name an animal.');
  await page.getByTestId('chat-edit-send').click();
  await finished(1);
  assert.deepEqual(
    await page.getByTestId('chat-message').evaluateAll((els) => els.map((e) => e.dataset.role)),
    ['user', 'assistant'],
  );
  assert.equal((await questions().first().innerText()).split('\n')[0], 'Name an animal.');
  const run = await latestRun();
  assert.deepEqual(run.prompt, { kind: 'chat', content: [{ role: 'user', content: 'Name an animal.' }] });
  assert.equal(await answers().first().getByTestId('chat-markdown').count(), 1);

  // Cancel keeps the question as it was.
  await questions().first().getByTestId('chat-edit').click();
  await page.getByTestId('chat-edit-input').fill('Something else.');
  await page.getByTestId('chat-edit-cancel').click();
  assert.equal((await questions().first().innerText()).split('\n')[0], 'Name an animal.');
  await assertFits();
});

test('the system prompt is sent first with every question, and New chat keeps it', async () => {
  await newChat();
  await page.getByTestId('chat-system-prompt-toggle').click();
  await page.getByTestId('chat-system-prompt').fill('You are a pirate.');
  await ask('Say hello.', 1);
  let run = await latestRun();
  assert.deepEqual(run.prompt.content, [
    { role: 'system', content: 'You are a pirate.' },
    { role: 'user', content: 'Say hello.' },
  ]);
  await ask('Say goodbye.', 2);
  run = await latestRun();
  assert.equal(run.prompt.content.length, 4);
  assert.deepEqual(run.prompt.content[0], { role: 'system', content: 'You are a pirate.' });
  assert.deepEqual(run.prompt.content[3], { role: 'user', content: 'Say goodbye.' });
  await assertFits();
  await shoot('chat-system-prompt');

  await newChat();
  assert.equal(await page.getByTestId('chat-system-prompt').inputValue(), 'You are a pirate.');
  // Folded away, the prompt is still summed up in its button.
  await page.getByTestId('chat-system-prompt-toggle').click();
  assert.match(await page.getByTestId('chat-system-prompt-toggle').innerText(), /You are a pirate\./);
});

// Chat end to end at the smallest layout the UI supports (800x600): answers rendered as markdown
// with highlighted code and Copy buttons, nothing the model writes made live, Regenerate, editing a
// question, the system prompt of each conversation, conversations reopened after a reload,
// searched, renamed and deleted, and Continue, against a real `medusa serve` on the default model
// (greedy, so its answers repeat) with a real SQLite history. Screenshots go to test-artifacts/ui/.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, test } from 'node:test';
import { chatControl, LONG, openPage, screenshots, startBrowser, startServer } from './harness.mjs';

/** CPU generation is slow and the machine may be busy: generous limits, never timing asserts. */

let server;
let browser;
let page;

before(async () => {
  server = await startServer();
  browser = await startBrowser();
  page = await openPage(browser, server.url, { ready: false, viewport: { width: 800, height: 600 }, acceptDownloads: true });
  await page.context().grantPermissions(['clipboard-read', 'clipboard-write'], { origin: server.url });
  await page.getByTestId('tab-chat').click();
  await page.getByTestId('view-chat').waitFor({ state: 'visible' });
  await (await chatControl(page, 'chat-mode')).selectOption('normal');
  // Enter sends nothing until the model is in.
  await page.locator('[data-testid="status"][data-status="ready"]').waitFor();
  await greedy();
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

/** Chats start from the model's default sampling; greedy makes the answers repeat. */
async function greedy() {
  await page.getByTestId('chat-sampling-toggle').click();
  const button = page.getByTestId('view-chat').getByTestId('sampling-greedy');
  if (await button.isEnabled()) await button.click();
  assert.equal(await button.isDisabled(), true, 'greedy');
  await page.getByTestId('chat-sampling-toggle').click();
}

/** The maximum number of tokens an answer may have, set in the sampling panel. */
async function maxTokens(n) {
  await page.getByTestId('chat-sampling-toggle').click();
  await page.getByTestId('view-chat').getByLabel('Max tokens', { exact: true }).fill(String(n));
  await page.getByTestId('chat-sampling-toggle').click();
}

/** The list of conversations, opened (at 800 px it folds away behind a button). */
async function conversationList() {
  const list = page.getByTestId('conversation-list');
  if ((await list.count()) === 0) await page.getByTestId('chat-conversations-toggle').click();
  await list.waitFor();
  return list;
}

async function closeList() {
  if ((await page.getByTestId('conversation-list').count()) === 0) return;
  await page.getByTestId('conversation-list-close').click();
  await page.getByTestId('conversation-list').waitFor({ state: 'detached' });
}

/** The id of the conversation the page keeps open. */
async function openConversationId() {
  return Number(await page.evaluate(() => localStorage.getItem('medusa.chat.conversation')));
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
  await (await chatControl(page, 'chat-show-drafted')).check();
  await answer.getByTestId('tinted-text').waitFor();
  assert.equal(await answer.getByTestId('chat-markdown').count(), 0);
  assert.equal(await answer.getByTestId('tinted-text').textContent(), run.output);
  await (await chatControl(page, 'chat-show-drafted')).uncheck();
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
  await maxTokens(24);
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
  await maxTokens(256);
});

test('an edited question replaces itself and everything after it', async () => {
  await newChat();
  await maxTokens(24);
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
  await maxTokens(256);
});

test('the system prompt is sent first with every question and saved with its conversation; New chat starts without one', async () => {
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
  const pirate = await openConversationId();
  assert.equal((await api(`/api/conversations/${pirate}`)).system_prompt, 'You are a pirate.');
  await assertFits();
  await shoot('chat-system-prompt');

  // Changed in an open conversation, the prompt is saved without a question being asked.
  await page.getByTestId('chat-system-prompt').fill('You are a polite pirate.');
  await waitFor(async () => (await api(`/api/conversations/${pirate}`)).system_prompt === 'You are a polite pirate.');

  await newChat();
  assert.equal(await page.getByTestId('chat-system-prompt').inputValue(), '');
  // Reopened, the conversation has its prompt back.
  const list = await conversationList();
  await list.locator(`[data-testid="conversation-item"][data-id="${pirate}"] [data-testid="conversation-open"]`).click();
  await page.waitForFunction(() => document.querySelectorAll('[data-testid="chat-message"]').length === 4);
  assert.equal(await page.getByTestId('chat-system-prompt').inputValue(), 'You are a polite pirate.');
  // Folded away, the prompt is still summed up in its button.
  await page.getByTestId('chat-system-prompt-toggle').click();
  assert.match(await page.getByTestId('chat-system-prompt-toggle').innerText(), /You are a polite pirate\./);
});

/** Polls `check` (an async predicate on the backend's state) until it holds. */
async function waitFor(check, what = 'the condition') {
  const deadline = Date.now() + LONG;
  while (!(await check())) {
    assert.ok(Date.now() < deadline, `timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

test('a tree picked in one mode does not carry over into another', async () => {
  await newChat();
  await (await chatControl(page, 'chat-mode')).selectOption('medusa');
  await (await chatControl(page, 'chat-tree')).selectOption('mc_sim_7b_63');
  await (await chatControl(page, 'chat-mode')).selectOption('auto');
  assert.equal(await (await chatControl(page, 'chat-tree')).inputValue(), 'auto');
  await (await chatControl(page, 'chat-mode')).selectOption('medusa');
  assert.equal(await (await chatControl(page, 'chat-tree')).inputValue(), 'auto');
  await (await chatControl(page, 'chat-mode')).selectOption('normal');
});

test('a chat is reopened after a reload, its answer as markdown and linked to its run', async () => {
  await newChat();
  // Medusa with a tree drafted in full: the reopened answer's run shows who drafted each token.
  // A short answer: each step decodes the whole 63-node tree, about 20 tokens' time here.
  await maxTokens(48);
  await (await chatControl(page, 'chat-mode')).selectOption('medusa');
  await (await chatControl(page, 'chat-tree')).selectOption('mc_sim_7b_63');
  const question = 'Write the word "yes" ten times, separated by spaces, and nothing else.';
  try {
    await ask(question, 1);
  } finally {
    await (await chatControl(page, 'chat-tree')).selectOption('auto');
    await (await chatControl(page, 'chat-mode')).selectOption('normal');
  }
  const run = await latestRun();
  assert.equal(run.mode, 'medusa');
  const id = await openConversationId();
  assert.ok(id > 0, 'the chat was given a conversation');
  const answer = answers().last().getByTestId('chat-markdown');
  const html = await answer.innerHTML();
  const text = await answer.innerText();
  await (await chatControl(page, 'chat-show-drafted')).check();
  const liveTinted = await answers().last().getByTestId('tinted-text').innerHTML();
  await (await chatControl(page, 'chat-show-drafted')).uncheck();
  await answer.waitFor();

  await page.reload();
  await page.getByTestId('view-chat').waitFor({ state: 'visible' });
  await page.waitForFunction(() => document.querySelectorAll('[data-testid="chat-message"]').length === 2);
  assert.equal((await questions().first().innerText()).split('\n')[0], question);
  const restored = answers().last().getByTestId('chat-markdown');
  assert.equal(await restored.innerHTML(), html, 'rendered as it was live');
  assert.equal(await restored.innerText(), text);
  // The stored answer is the run's output, as Copy shows.
  await answers().last().getByTestId('chat-copy-message').click();
  await answers().last().getByTestId('chat-copy-message').filter({ hasText: 'Copied' }).waitFor();
  assert.equal(await clipboard(), run.output);

  // It reopens as it was left: its run's figures shown, the mode and sampling it was written with.
  const stats = answers().last().getByTestId('chat-stats');
  await stats.waitFor();
  assert.match(await stats.innerText(), new RegExp(`run #${run.id}`));
  assert.match(await stats.innerText(), /tokens\/step/);
  assert.equal(await answers().last().getByTestId('chat-run-link').count(), 0, 'no link left to load it');
  assert.equal(await (await chatControl(page, 'chat-mode')).inputValue(), 'medusa');
  assert.equal(await (await chatControl(page, 'chat-tree')).inputValue(), 'mc_sim_7b_63', 'and the tree it was asked with');
  assert.equal(await page.getByTestId('chat-restore-note').count(), 0, 'both still offered: nothing to say');
  await (await chatControl(page, 'chat-mode')).selectOption('normal');

  // Tinted by who drafted each token, as live; a tinted token opens its step.
  await (await chatControl(page, 'chat-show-drafted')).check();
  const tinted = answers().last().getByTestId('tinted-text');
  await tinted.waitFor();
  assert.equal(await tinted.textContent(), run.output);
  assert.equal(await tinted.innerHTML(), liveTinted, 'tinted as it was live');
  const drafted = tinted.getByTestId('drafted-token').filter({ hasText: /\S/ });
  assert.ok((await drafted.count()) > 0, 'tinted drafted tokens');
  await drafted.first().click();
  const inspector = answers().last().getByTestId('step-inspector');
  await inspector.waitFor();
  assert.ok((await inspector.locator('[data-testid="step-tree-node"][data-kind="draft"][data-accepted="true"]').count()) >= 1);
  await inspector.getByTestId('step-inspector-close').click();
  await (await chatControl(page, 'chat-show-drafted')).uncheck();
  await restored.waitFor();

  // The list shows it, highlighted.
  const list = await conversationList();
  const item = list.locator(`[data-testid="conversation-item"][data-id="${id}"]`);
  // Named after the first question, cut short.
  const title = (await api(`/api/conversations/${id}`)).title;
  assert.ok(question.startsWith(title.replace(/…$/, '')), title);
  assert.equal(await item.getByTestId('conversation-title').getAttribute('title'), title);
  assert.equal(await item.getByTestId('conversation-open').getAttribute('aria-current'), 'true');
  assert.match(await item.getByTestId('conversation-time').innerText(), /just now|min ago/);
  await assertFits();
  await shoot('chat-conversations');
  await closeList();
  await greedy();
  await maxTokens(256);
});

test('a chat picked from the list goes back to its own mode and tree, whatever was picked last', async () => {
  await newChat();
  await maxTokens(12);
  await (await chatControl(page, 'chat-mode')).selectOption('medusa');
  await (await chatControl(page, 'chat-tree')).selectOption('chain-2');
  await ask('Say hi.', 1);
  const medusaChat = await openConversationId();
  await newChat();
  await (await chatControl(page, 'chat-mode')).selectOption('lookup');
  await ask('Say bye.', 1);
  const lookupChat = await openConversationId();
  await newChat();
  // Picked last: auto with a named tree, which neither chat used.
  await (await chatControl(page, 'chat-mode')).selectOption('auto');
  await (await chatControl(page, 'chat-tree')).selectOption('mc_sim_7b_63');

  const pick = async (id) => {
    const list = await conversationList();
    await list.locator(`[data-testid="conversation-item"][data-id="${id}"] .pick`).click();
    await finished(1);
    await closeList();
  };
  await pick(medusaChat);
  await page.waitForFunction(() => document.querySelector('[data-testid="chat-mode"]').value === 'medusa');
  assert.equal(await (await chatControl(page, 'chat-tree')).inputValue(), 'chain-2');
  await pick(lookupChat);
  await page.waitForFunction(() => document.querySelector('[data-testid="chat-mode"]').value === 'lookup');
  assert.equal(await (await chatControl(page, 'chat-tree')).count(), 0, 'lookup drafts no tree');
  await pick(medusaChat);
  await page.waitForFunction(() => document.querySelector('[data-testid="chat-mode"]').value === 'medusa');
  assert.equal(await (await chatControl(page, 'chat-tree')).inputValue(), 'chain-2');
  assert.equal(await page.getByTestId('chat-restore-note').count(), 0);
  await shoot('chat-reopened-mode');

  // Asked in another browser, the tree is known only by its paths: a chain is still named.
  await page.evaluate(() => localStorage.removeItem('medusa.chat.runTrees'));
  await pick(lookupChat);
  await page.waitForFunction(() => document.querySelector('[data-testid="chat-mode"]').value === 'lookup');
  await pick(medusaChat);
  await page.waitForFunction(() => document.querySelector('[data-testid="chat-mode"]').value === 'medusa');
  assert.equal(await (await chatControl(page, 'chat-tree')).inputValue(), 'chain-2');
  await (await chatControl(page, 'chat-mode')).selectOption('normal');
  await newChat();
  await maxTokens(256);
});

test('a chat is found by a word of its answer, renamed, and deleted while its runs stay', async () => {
  await newChat();
  await ask('Name a large animal that lives in the ocean.', 1);
  const run = await latestRun();
  const id = await openConversationId();
  const word = run.output
    .split(/[^A-Za-z]+/)
    .filter((w) => w.length >= 5 && !/large|animal|lives|ocean/i.test(w))
    .sort((a, b) => b.length - a.length)[0];
  assert.ok(word, `a word to search for in ${JSON.stringify(run.output)}`);

  const list = await conversationList();
  // Nothing is cut off: the list lies within the view.
  const [view, panel] = await Promise.all([page.getByTestId('view-chat').boundingBox(), list.boundingBox()]);
  assert.ok(panel.x >= view.x - 1 && panel.x + panel.width <= view.x + view.width + 1, 'the list fits across');
  assert.ok(panel.y >= view.y - 1 && panel.y + panel.height <= view.y + view.height + 1, 'the list fits down');

  await list.getByTestId('conversation-search').fill(word.toLowerCase());
  const item = list.locator(`[data-testid="conversation-item"][data-id="${id}"]`);
  const snippet = item.getByTestId('conversation-snippet');
  await snippet.waitFor();
  assert.match(await snippet.innerText(), new RegExp(word, 'i'));
  await list.getByTestId('conversation-search').fill('zzzznothingmatches');
  await item.waitFor({ state: 'detached' });
  await list.getByTestId('conversation-search').fill('');
  await item.waitFor();

  // Rename: Esc cancels, a title the backend refuses says why, Enter saves.
  await item.getByTestId('conversation-menu').click();
  await item.getByTestId('conversation-rename').click();
  const input = item.getByTestId('conversation-rename-input');
  await input.fill('Not kept');
  await input.press('Escape');
  await input.waitFor({ state: 'detached' });
  assert.equal(await item.getByTestId('conversation-title').innerText(), 'Name a large animal that lives in the ocean.');
  await item.getByTestId('conversation-rename').click();
  await input.fill('x'.repeat(201));
  await input.press('Enter');
  assert.match(await item.getByTestId('conversation-rename-error').innerText(), /200 characters/);
  await input.fill('Sea creatures');
  await input.press('Enter');
  await input.waitFor({ state: 'detached' });
  assert.equal(await item.getByTestId('conversation-title').innerText(), 'Sea creatures');
  assert.equal((await api(`/api/conversations/${id}`)).title, 'Sea creatures');

  // Export, as JSON and as Markdown.
  await item.getByTestId('conversation-menu').click();
  const [json] = await Promise.all([page.waitForEvent('download'), item.getByTestId('conversation-export-json').click()]);
  assert.match(json.suggestedFilename(), /\.json$/);
  const exported = JSON.parse(readFileSync(await json.path(), 'utf8'));
  assert.equal(exported.title, 'Sea creatures');
  assert.deepEqual(
    exported.messages.map((m) => [m.role, m.content]),
    [
      ['user', 'Name a large animal that lives in the ocean.'],
      ['assistant', run.output],
    ],
  );
  assert.equal(await list.getByTestId('conversation-notice').innerText(), `Saved ${json.suggestedFilename()}`);
  const [markdown] = await Promise.all([page.waitForEvent('download'), item.getByTestId('conversation-export-markdown').click()]);
  assert.match(markdown.suggestedFilename(), /\.md$/);
  const text = readFileSync(await markdown.path(), 'utf8');
  assert.ok(text.includes('Sea creatures') && text.includes('Name a large animal that lives in the ocean.'), text);
  assert.ok(text.includes(run.output.trim()), 'the answer is in the Markdown');
  await item.getByTestId('conversation-menu').click();

  // From the keyboard: Tab reaches a chat's ⋯ after the chat, the right arrow opens its actions
  // too, and Esc closes them, the focus back on ⋯.
  const focused = (testId) => item.getByTestId(testId).evaluate((el) => el === document.activeElement);
  await item.getByTestId('conversation-open').focus();
  await page.keyboard.press('Tab');
  assert.ok(await focused('conversation-menu'), 'Tab reaches the ⋯ button');
  await page.keyboard.press('Enter');
  await item.getByTestId('conversation-rename').focus();
  await page.keyboard.press('Escape');
  assert.equal(await item.getByTestId('conversation-rename').count(), 0, 'Esc closes the actions');
  assert.ok(await focused('conversation-menu'), 'the focus goes back to ⋯');
  await item.getByTestId('conversation-open').focus();
  await page.keyboard.press('ArrowRight');
  assert.ok(await focused('conversation-rename'), 'its first action has the focus');

  // Delete asks first, and says the runs stay.
  await item.getByTestId('conversation-delete').click();
  assert.match(await item.innerText(), /Its runs stay in History/);
  await shoot('chat-conversation-delete');
  await item.getByTestId('conversation-delete-confirm').click();
  await item.waitFor({ state: 'detached' });
  // It was open: the chat starts anew.
  await page.waitForFunction(() => document.querySelectorAll('[data-testid="chat-message"]').length === 0);
  assert.equal(await page.evaluate(() => localStorage.getItem('medusa.chat.conversation')), null);
  const gone = await fetch(`${server.url}/api/conversations/${id}`, { headers: server.headers });
  assert.equal(gone.status, 404);
  assert.ok((await runs()).some((r) => r.id === run.id), 'the run stays in the history');
  assert.ok(!(await api('/api/conversations')).conversations.some((c) => c.id === id));
  await closeList();
});

test('Continue writes on from an answer that ran out of tokens, onto the same message', async () => {
  await newChat();
  await maxTokens(8);
  try {
    await ask('Tell me a long story about a dragon.', 1);
    const first = await latestRun();
    assert.equal(first.stop_reason, 'max_tokens');
    const answer = answers().last();
    assert.match(await answer.getByTestId('chat-stats').innerText(), /max tokens/);
    await answer.getByTestId('chat-stats').evaluate((el) => (el.dataset.old = 'yes'));
    await answer.getByTestId('chat-continue').click();
    // The button goes while it runs: the question box keeps the keyboard in the chat.
    assert.ok(await page.getByTestId('chat-input').evaluate((el) => el === document.activeElement), 'the question box has the focus');
    await page.locator('[data-testid="chat-stats"]:not([data-old])').waitFor();
    assert.equal(await answers().count(), 1, 'the same message');
    assert.equal(await questions().count(), 1);

    const second = await latestRun();
    assert.notEqual(second.id, first.id);
    assert.ok(second.output.length > 0, 'the continuation wrote something');
    // The figures cover the whole answer too, not only the continuation.
    assert.equal(
      await answer.getByTestId('chat-whole-answer').innerText(),
      `Whole answer: ${first.tokens_generated + second.tokens_generated} tokens by 2 runs, ${(
        ((first.tokens_generated + second.tokens_generated) * 1000) /
        (first.total_ms + second.total_ms)
      ).toFixed(1)} tok/s · above: the last run, which continued it`,
    );
    assert.deepEqual(second.prompt.content, [
      { role: 'user', content: 'Tell me a long story about a dragon.' },
      { role: 'assistant', content: first.output },
    ]);
    await answer.getByTestId('chat-copy-message').click();
    await answer.getByTestId('chat-copy-message').filter({ hasText: 'Copied' }).waitFor();
    assert.equal(await clipboard(), first.output + second.output);
    const stored = await api(`/api/conversations/${await openConversationId()}`);
    assert.equal(stored.messages.length, 2);
    assert.equal(stored.messages[1].content, first.output + second.output);
    assert.equal(stored.messages[1].run_id, second.id);
    await assertFits();
  } finally {
    await maxTokens(256);
  }
});

test('a JSON answer follows the schema typed into the sampling panel, and a broken schema is caught before sending', async () => {
  await newChat();
  const panel = page.getByTestId('view-chat');
  await page.getByTestId('chat-sampling-toggle').click();
  await panel.getByTestId('json-answer').check();
  await panel.getByTestId('json-schema').fill('{"type": "object", "properties": {"name": {"type": "string"');
  assert.match(await panel.getByRole('alert').innerText(), /^the JSON schema is not JSON: /);
  await panel
    .getByTestId('json-schema')
    .fill('{"type": "object", "additionalProperties": false, "properties": {"name": {"type": "string", "maxLength": 20}, "legs": {"type": "integer"}}, "required": ["name", "legs"]}');
  assert.equal(await panel.getByRole('alert').count(), 0);
  await page.getByTestId('chat-sampling-toggle').click();
  try {
    await ask('Give the name and age of a cat as JSON.', 1);
    const run = await latestRun();
    const cat = JSON.parse(run.output);
    assert.deepEqual(Object.keys(cat).sort(), ['legs', 'name']);
    assert.equal(typeof cat.name, 'string');
    assert.ok(Number.isInteger(cat.legs), run.output);
    await shoot('chat-json-answer');
  } finally {
    await page.getByTestId('chat-sampling-toggle').click();
    await panel.getByTestId('json-answer').uncheck();
    await page.getByTestId('chat-sampling-toggle').click();
  }
});

test('Compare holds every mode to the JSON schema, and greedy outputs stay identical', async () => {
  await page.getByTestId('tab-compare').click();
  const view = page.getByTestId('view-compare');
  await page.getByTestId('compare-input').fill('Give the name and age of a cat as JSON.');
  await page.getByTestId('compare-max-tokens').fill('64');
  await page.getByTestId('compare-repeats').fill('1');
  await view.getByTestId('json-answer').check();
  await view.getByTestId('json-schema').fill('{"type": "object", "properties": {"name"');
  assert.match(await view.getByRole('alert').innerText(), /^the JSON schema is not JSON: /);
  assert.ok(await page.getByTestId('compare-run').isDisabled(), 'a broken schema is not sent');
  await view
    .getByTestId('json-schema')
    .fill('{"type": "object", "additionalProperties": false, "properties": {"name": {"type": "string", "maxLength": 20}, "legs": {"type": "integer"}}, "required": ["name", "legs"]}');
  try {
    await page.getByTestId('compare-run').click();
    await page.getByTestId('compare-stored').waitFor({ timeout: LONG });
    const compared = (await api('/api/comparisons')).comparisons[0];
    const outputs = await Promise.all(compared.runs.map(async (m) => [m.mode, (await api(`/api/runs/${m.run_id}`)).run.output]));
    assert.ok(outputs.length >= 2, JSON.stringify(outputs));
    for (const [mode, output] of outputs) {
      const cat = JSON.parse(output);
      assert.deepEqual(Object.keys(cat).sort(), ['legs', 'name'], `${mode}: ${output}`);
      assert.equal(output, outputs[0][1], `${mode} answers as normal does`);
    }
    await shoot('compare-json-answer');
  } finally {
    await view.getByTestId('json-answer').uncheck();
    await page.getByTestId('tab-chat').click();
  }
});

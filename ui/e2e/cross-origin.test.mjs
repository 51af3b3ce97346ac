// A page of another site, open in the user's browser, must not be able to use the local server:
// not to start runs, load a model, import, cancel or compare, nor to read the history. A real
// `medusa serve`, a real "attacker" page on another loopback port and headless Chromium.

import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import { after, before, test } from 'node:test';
import { startBrowser, startServer } from './harness.mjs';

let server;
let attacker;
let browser;
let page;
let live;
/** What the medusa server answered to the page's requests, as Chromium's network stack saw it. */
const answered = [];
const seeded = [];

/** One HTTP request from Node, with exactly the headers given (a browser would add others). */
function send(url, { method = 'GET', headers = {}, body } = {}) {
  return new Promise((resolve, reject) => {
    if (body !== undefined) headers = { ...headers, 'Content-Length': Buffer.byteLength(body) };
    const request = http.request(url, { method, headers }, (response) => {
      let text = '';
      response.setEncoding('utf8');
      response.on('data', (chunk) => (text += chunk));
      response.on('end', () =>
        resolve({ status: response.statusCode, headers: response.headers, text }),
      );
    });
    request.on('error', reject);
    request.end(body);
  });
}

async function getJson(path) {
  const answer = await send(`${server.url}${path}`);
  assert.equal(answer.status, 200, `${path}: ${answer.text}`);
  return JSON.parse(answer.text);
}

/** Starts a streamed run from Node; resolves once the server has said its id. */
function startLiveRun(body) {
  return new Promise((resolve, reject) => {
    const request = http.request(
      `${server.url}/api/generate`,
      { method: 'POST', headers: { 'Content-Type': 'application/json' } },
      (response) => {
        if (response.statusCode !== 200) {
          reject(new Error(`/api/generate answered ${response.statusCode}`));
        }
        const run = { request, finished: false };
        run.ended = new Promise((r) => response.on('end', r));
        let buffer = '';
        response.setEncoding('utf8');
        response.on('data', (chunk) => {
          buffer += chunk;
          for (let end; (end = buffer.indexOf('\n\n')) >= 0; buffer = buffer.slice(end + 2)) {
            for (const line of buffer.slice(0, end).split('\n')) {
              if (!line.startsWith('data:')) continue;
              const event = JSON.parse(line.slice(5));
              if (event.type === 'started') resolve(Object.assign(run, { id: event.run_id }));
              if (event.type === 'finished' || event.type === 'failed') run.finished = true;
            }
          }
        });
      },
    );
    request.on('error', reject);
    request.end(JSON.stringify(body));
  });
}

/**
 * The attacker's page. Its forms post JSON-looking text/plain bodies (the field's name carries
 * the JSON up to a dummy key, `=` and the value close it), the one kind of cross-site POST a page
 * can make without script, each into its own iframe.
 */
function attackerPage(target, modelPath) {
  const forms = [
    ['/api/model', { model: '/etc/passwd' }],
    // A file the server may load: without the checks this would start a reload without heads.
    ['/api/model', { model: modelPath }],
    ['/v1/chat/completions', { messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }],
  ];
  return `<!doctype html><title>attacker</title><h1>Nothing to see here</h1>
${forms
  .map(([path, body], i) => {
    const json = JSON.stringify({ ...body, pad: '' });
    const [name, value] = [json.slice(0, -2), json.slice(-2)]; // `…,"pad":"` and `"}`
    return `<iframe name="sink-${i}"></iframe>
<form method="POST" enctype="text/plain" action="${target}${path}" target="sink-${i}">
<input type="hidden" name='${name}' value='${value}'></form>`;
  })
  .join('\n')}`;
}

before(async () => {
  server = await startServer();
  // Two tiny runs of one prompt, from Node like any local client: something to read, cancel and
  // compare.
  for (let i = 0; i < 2; i++) {
    const answer = await send(`${server.url}/generate/normal`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ prompt: 'Hello', max_length: 1 }),
    });
    assert.equal(answer.status, 200, answer.text);
    seeded.push(JSON.parse(answer.text).run_id);
  }
  const { model } = await getJson('/api/info');

  attacker = http.createServer((_, response) => {
    response.writeHead(200, { 'Content-Type': 'text/html; charset=utf-8' });
    response.end(attackerPage(server.url, model.path));
  });
  await new Promise((r) => attacker.listen(0, '127.0.0.1', r));
  browser = await startBrowser();
  page = await browser.newPage();
  page.on('response', (response) => {
    const url = new URL(response.url());
    if (url.origin !== server.url) return;
    answered.push({
      method: response.request().method(),
      path: url.pathname + url.search,
      status: response.status(),
    });
  });
  await page.goto(`http://127.0.0.1:${attacker.address().port}/`);
});

after(async () => {
  live?.request.destroy();
  await browser?.close();
  await new Promise((r) => (attacker ? attacker.close(r) : r()));
  await server?.stop();
});

async function snapshot() {
  const { runs } = await getJson('/api/runs?limit=1000');
  const { comparisons } = await getJson('/api/comparisons');
  const info = await getJson('/api/info');
  return {
    runs: Object.fromEntries(runs.map((r) => [r.id, r.status])),
    comparisons: comparisons.length,
    model: info.model?.path,
    heads: info.heads_path,
    loading: info.loading,
    error: info.error,
  };
}

test('a page of another site cannot change anything through the API', async () => {
  // A run in progress, so that a cancel getting through would show. Its grammar allows no end
  // before 150 words (some 450 tokens), which outlasts the page's requests (well under a second)
  // on any machine; a sampled count could end after a few words.
  live = await startLiveRun({
    prompt: 'Count from one to two hundred in words, separated by commas.',
    mode: 'normal',
    max_tokens: 640,
    grammar: 'root ::= ([a-z]{8} ", "){150}',
  });
  const baseline = await snapshot();
  assert.equal(baseline.runs[live.id], 'running');
  assert.ok(baseline.model && baseline.heads, JSON.stringify(baseline));
  assert.equal(baseline.loading, null);

  // A document that would import: a seeded run under a new uid.
  const exported = await getJson('/api/runs/export?format=json');
  exported.runs = exported.runs.filter((r) => r.run.id === seeded[0]);
  exported.runs[0].run.uid = randomUUID();
  const posts = [
    ['/v1/chat/completions', { messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }],
    ['/api/generate', { prompt: 'hi', max_tokens: 2 }],
    ['/api/model', { model: '/etc/passwd' }],
    ['/api/model', { model: baseline.model }],
    ['/api/runs/import', exported],
    [`/api/runs/${live.id}/cancel`, {}],
    [`/api/runs/${seeded[0]}/cancel`, {}],
    ['/api/comparisons', { run_ids: seeded }],
  ].map(([path, body]) => [path, JSON.stringify(body)]);

  const outcomes = await page.evaluate(
    async ({ target, posts }) => {
      const settle = (promise) =>
        promise.then(
          (r) => ({ type: r.type, status: r.status }),
          (e) => ({ error: e.name }),
        );
      // What a page may send without asking the server first: no-cors, a "simple" content type.
      const simple = posts.map(([path, body]) =>
        settle(
          fetch(target + path, {
            method: 'POST',
            mode: 'no-cors',
            headers: { 'Content-Type': 'text/plain' },
            body,
          }),
        ),
      );
      // Real JSON needs a CORS preflight, which this origin does not pass.
      const json = settle(
        fetch(`${target}/api/generate`, {
          method: 'POST',
          headers: { 'Content-Type': 'application/json' },
          body: posts[1][1],
        }),
      );
      return { simple: await Promise.all(simple), json: await json };
    },
    { target: server.url, posts },
  );
  // The run was still going when its cancel arrived, so the check below means something.
  assert.equal(live.finished, false, 'the live run ended before the page tried to cancel it');
  // The page learns nothing from its no-cors requests…
  for (const outcome of outcomes.simple) assert.deepEqual(outcome, { type: 'opaque', status: 0 });
  // …and its JSON request is never sent.
  assert.deepEqual(outcomes.json, { error: 'TypeError' });

  // Forms, submitted into iframes; each load event means the answer came back.
  const loads = await page.evaluate(() =>
    Promise.all(
      [...document.forms].map(
        (form) =>
          new Promise((resolve) => {
            const frame = document.querySelector(`iframe[name="${form.target}"]`);
            const timer = setTimeout(() => resolve('timeout'), 15_000);
            frame.addEventListener(
              'load',
              () => {
                clearTimeout(timer);
                resolve('load');
              },
              { once: true },
            );
            form.submit();
          }),
      ),
    ),
  );
  assert.deepEqual(loads, ['load', 'load', 'load']);

  // Every POST reached the server, and the server refused each one.
  const postsAnswered = answered.filter((a) => a.method === 'POST');
  for (const [path] of posts) {
    assert.ok(postsAnswered.some((a) => a.path === path), `${path} never reached the server`);
  }
  // 8 no-cors fetches and 3 forms; the preflighted JSON fetch never went out.
  assert.equal(postsAnswered.length, posts.length + 3, JSON.stringify(postsAnswered));
  for (const a of postsAnswered) assert.equal(a.status, 403, JSON.stringify(a));

  // The live run ends on its own, not cancelled.
  await live.ended;
  const later = await snapshot();
  assert.equal(later.runs[live.id], 'finished');
  // No run was started or imported, nothing else changed status, no comparison was made, and the
  // same model is loaded with no load under way.
  assert.deepEqual(later, { ...baseline, runs: { ...baseline.runs, [live.id]: 'finished' } });
  for (const id of seeded) assert.equal(later.runs[id], 'finished');
});

test('a page of another site cannot read the API', async () => {
  const reads = await page.evaluate(async (target) => {
    const results = {};
    for (const path of ['/api/runs/export?format=json', '/api/info']) {
      const cors = await fetch(target + path).then(
        async (r) => ({ status: r.status, body: await r.text() }),
        (e) => ({ error: e.name }),
      );
      const opaque = await fetch(target + path, { mode: 'no-cors' }).then(
        async (r) => ({ type: r.type, status: r.status, body: await r.text() }),
        (e) => ({ error: e.name }),
      );
      results[path] = { cors, opaque };
    }
    return results;
  }, server.url);
  const nothing = { cors: { error: 'TypeError' }, opaque: { type: 'opaque', status: 0, body: '' } };
  assert.deepEqual(reads, { '/api/runs/export?format=json': nothing, '/api/info': nothing });
  // The server does answer reads addressed to a loopback name, as it must for its own UI, but
  // with no CORS header that would let another origin's page see them.
  const origin = `http://127.0.0.1:${attacker.address().port}`;
  for (const path of Object.keys(reads)) {
    const answer = await send(`${server.url}${path}`, { headers: { Origin: origin } });
    assert.equal(answer.status, 200);
    assert.equal(answer.headers['access-control-allow-origin'], undefined);
  }
});

test('a page of another site cannot open the event socket', async () => {
  const before = await snapshot();
  // Browsers let any page open a WebSocket to any host: the server must refuse the handshake.
  const outcome = await page.evaluate(
    (target) =>
      new Promise((resolve) => {
        const socket = new WebSocket(`${target.replace('http', 'ws')}/api/events`);
        let opened = false;
        socket.onopen = () => {
          opened = true;
          const request = { messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 };
          socket.send(JSON.stringify({ type: 'generate', id: 1, request }));
        };
        socket.onclose = (event) => resolve({ opened, code: event.code });
        setTimeout(() => resolve({ opened, code: 'timeout' }), 10_000);
      }),
    server.url,
  );
  assert.deepEqual(outcome, { opened: false, code: 1006 });
  assert.deepEqual(await snapshot(), before, 'no run was started');
});

test('the server refuses the requests the browser sent, and other names for itself', async () => {
  const before = await snapshot();
  const origin = `http://127.0.0.1:${attacker.address().port}`;
  const error = (answer) => {
    const body = JSON.parse(answer.text);
    assert.equal(typeof body.error?.message, 'string', answer.text);
    return body.error.code;
  };
  const body = JSON.stringify({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 });
  const jsonPaths = [
    '/v1/chat/completions',
    '/api/generate',
    '/api/model',
    '/api/runs/import',
    '/api/comparisons',
  ];

  // Sent by a page of another site: refused whatever the content type.
  for (const path of [...jsonPaths, `/api/runs/${seeded[0]}/cancel`]) {
    for (const type of ['text/plain', 'application/json']) {
      const answer = await send(`${server.url}${path}`, {
        method: 'POST',
        headers: { Origin: origin, 'Content-Type': type },
        body,
      });
      assert.equal(answer.status, 403, `${path} ${type}: ${answer.text}`);
      assert.equal(error(answer), 'forbidden_origin');
    }
  }
  // Without Origin (not a page), a JSON endpoint still takes JSON only: a form or no-cors fetch
  // whose Origin got lost would still get nowhere.
  for (const path of jsonPaths) {
    const answer = await send(`${server.url}${path}`, {
      method: 'POST',
      headers: { 'Content-Type': 'text/plain' },
      body,
    });
    assert.equal(answer.status, 415, `${path}: ${answer.text}`);
    assert.equal(error(answer), 'unsupported_media_type');
  }
  // The preflight for a JSON POST is not granted, so a browser never sends it.
  const preflight = await send(`${server.url}/api/generate`, {
    method: 'OPTIONS',
    headers: {
      Origin: origin,
      'Access-Control-Request-Method': 'POST',
      'Access-Control-Request-Headers': 'content-type',
    },
  });
  assert.equal(preflight.headers['access-control-allow-origin'], undefined);
  // DNS rebinding: this server's address under another name. Reads are refused too.
  const rebound = await send(`${server.url}/api/runs/export?format=json`, {
    headers: { Host: 'attacker.example' },
  });
  assert.equal(rebound.status, 403, rebound.text);
  assert.equal(error(rebound), 'forbidden_host');

  assert.deepEqual(await snapshot(), before);
});

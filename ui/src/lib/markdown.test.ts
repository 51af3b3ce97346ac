// @vitest-environment jsdom
// DOMPurify needs a DOM: these run in jsdom, the rest of the unit tests in plain Node.
import { describe, expect, it } from 'vitest';
import { escapeHtml, highlight, renderMarkdown, sanitize } from './markdown';

/** The parsed result, to query like the page does. */
function dom(html: string): HTMLElement {
  const div = document.createElement('div');
  div.innerHTML = html;
  return div;
}

const copyButton =
  '<button type="button" class="copy-code" data-testid="chat-copy-code" title="Copy this code">Copy</button>';

describe('renderMarkdown', () => {
  it('renders inline markdown and blocks', () => {
    expect(renderMarkdown('# Title\n\nSome **bold**, *em* and `code`.\n\n- one\n- two')).toBe(
      '<h1>Title</h1>\n<p>Some <strong>bold</strong>, <em>em</em> and <code>code</code>.</p>\n' +
        '<ul>\n<li>one</li>\n<li>two</li>\n</ul>\n',
    );
  });

  it('keeps the line breaks the model writes', () => {
    expect(renderMarkdown('Monday\nTuesday\n\nDone.')).toBe('<p>Monday<br>Tuesday</p>\n<p>Done.</p>\n');
  });

  it('highlights a fenced code block in a registered language, with a Copy button', () => {
    expect(renderMarkdown('```python\ndef f(a, b):\n    return a + b\n```\n\nDone.')).toBe(
      `<div class="code-block"><div class="code-head"><span class="code-lang">python</span>${copyButton}</div>` +
        '<pre><code class="hljs language-python"><span class="hljs-keyword">def</span> ' +
        '<span class="hljs-title function_">f</span>(<span class="hljs-params">a, b</span>):\n' +
        '    <span class="hljs-keyword">return</span> a + b</code></pre></div>\n<p>Done.</p>\n',
    );
  });

  it('renders an unclosed fence, as while an answer streams, as a code block in progress', () => {
    expect(renderMarkdown('Here:\n\n```rust\nfn main() {\n    let x = 1;')).toBe(
      `<p>Here:</p>\n<div class="code-block"><div class="code-head"><span class="code-lang">rust</span>${copyButton}</div>` +
        '<pre><code class="hljs language-rust"><span class="hljs-keyword">fn</span> ' +
        '<span class="hljs-title function_">main</span>() {\n    <span class="hljs-keyword">let</span> ' +
        '<span class="hljs-variable">x</span> = <span class="hljs-number">1</span>;</code></pre></div>\n',
    );
    // Only the fence so far: an empty block.
    expect(dom(renderMarkdown('```py')).querySelector('pre code')?.textContent).toBe('');
  });

  it('shows code in an unknown or no language as escaped text', () => {
    expect(renderMarkdown('```brainfuck\n<b>+</b>\n```')).toBe(
      `<div class="code-block"><div class="code-head"><span class="code-lang">brainfuck</span>${copyButton}</div>` +
        '<pre><code class="hljs">&lt;b&gt;+&lt;/b&gt;</code></pre></div>\n',
    );
    expect(dom(renderMarkdown('```\nx < y && z\n```')).querySelector('pre code')?.textContent).toBe('x < y && z');
  });

  it('shows the HTML the model writes as text, never as markup', () => {
    const html = renderMarkdown('Hi <img src=x onerror=alert(1)> and <script>alert(2)</script>.');
    expect(html).toBe(
      '<p>Hi &lt;img src=x onerror=alert(1)&gt; and &lt;script&gt;alert(2)&lt;/script&gt;.</p>\n',
    );
    const block = dom(renderMarkdown('<div onclick="steal()">\n<script>alert(3)</script>\n</div>'));
    expect(block.querySelectorAll('script, div, [onclick]')).toHaveLength(0);
    expect(block.textContent).toBe('<div onclick="steal()">\n<script>alert(3)</script>\n</div>\n');
  });

  it('leaves no scripts, handlers or javascript: links in anything it renders', () => {
    const html = renderMarkdown(
      [
        '[click](javascript:alert(1)) <a href="javascript:alert(2)">a</a> <svg onload=alert(3)>',
        '<iframe src="https://example.com"></iframe> <style>body{display:none}</style>',
        '`<script>alert(4)</script>` [x](https://example.com "<b onmouseover=alert(5)>")',
      ].join('\n\n'),
    );
    const root = dom(html);
    expect(root.querySelectorAll('script, iframe, style, svg, img')).toHaveLength(0);
    for (const el of root.querySelectorAll('*')) {
      for (const attr of el.attributes) expect(attr.name.startsWith('on'), `${el.tagName} ${attr.name}`).toBe(false);
    }
    expect([...root.querySelectorAll('a')].map((a) => a.getAttribute('href'))).toEqual([null, 'https://example.com']);
  });

  it('opens links outside the app and turns images into links', () => {
    expect(renderMarkdown('[docs](https://example.com/a?b=1&c=2 "Docs") ![a chart](https://example.com/c.png)')).toBe(
      '<p><a href="https://example.com/a?b=1&amp;c=2" title="Docs" target="_blank" rel="noopener noreferrer">docs</a> ' +
        '<a href="https://example.com/c.png" target="_blank" rel="noopener noreferrer">a chart</a></p>\n',
    );
  });

  it('renders GFM tables', () => {
    const table = dom(renderMarkdown('| a | b |\n|---|---|\n| 1 | 2 |')).querySelector('table');
    expect([...table!.querySelectorAll('th, td')].map((c) => c.textContent)).toEqual(['a', 'b', '1', '2']);
  });
});

describe('sanitize', () => {
  it('removes scripts, event handlers, javascript: URLs, styles, images and forms', () => {
    expect(
      sanitize(
        '<p onclick="x()" style="color:red">a</p><script>alert(1)</script><img src=x onerror=alert(2)>' +
          '<a href="javascript:alert(3)">b</a><form action="/x"><button>c</button></form>',
      ),
      // A forbidden element's text stays, as inert markup.
    ).toBe('<p>a</p><a>b</a><button>c</button>');
  });

  it('keeps the markup the renderer writes', () => {
    const html =
      `<div class="code-block"><div class="code-head"><span class="code-lang">js</span>${copyButton}</div>` +
      '<pre><code class="hljs language-js"><span class="hljs-keyword">let</span></code></pre></div>' +
      '<a href="https://example.com" target="_blank" rel="noopener noreferrer">x</a>';
    expect(sanitize(html)).toBe(html);
  });
});

describe('highlight', () => {
  it('knows the registered languages by their usual names', () => {
    for (const lang of ['python', 'py', 'javascript', 'js', 'typescript', 'ts', 'rust', 'rs', 'bash', 'sh', 'json', 'c', 'cpp', 'c++', 'java', 'sql', 'html', 'xml', 'css']) {
      expect(highlight('x', lang).language, lang).toBe(lang);
    }
  });

  it('reads the first word of the info string, in any case', () => {
    expect(highlight('let x = 1;', 'JavaScript title="a.js"')).toEqual({
      html: '<span class="hljs-keyword">let</span> x = <span class="hljs-number">1</span>;',
      language: 'javascript',
    });
  });

  it('escapes code in languages it does not know', () => {
    expect(highlight('<a href="x">&</a>', 'haskell')).toEqual({
      html: '&lt;a href=&quot;x&quot;&gt;&amp;&lt;/a&gt;',
      language: null,
    });
    expect(highlight('a', undefined)).toEqual({ html: 'a', language: null });
  });
});

describe('escapeHtml', () => {
  it('escapes the five special characters', () => {
    expect(escapeHtml(`<a href="x" title='y'>&</a>`)).toBe('&lt;a href=&quot;x&quot; title=&#39;y&#39;&gt;&amp;&lt;/a&gt;');
  });
});

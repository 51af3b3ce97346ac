// Markdown of a model's answer as HTML that is safe to insert. The model's text is untrusted:
// HTML it writes is shown as text, never as markup (and DOMPurify sanitizes the result besides, in
// case marked ever lets something through). Code blocks are highlighted by highlight.js with a few
// common languages registered by hand, which keeps the bundle small. Answers are re-rendered as
// they stream, so an unclosed code fence renders as a code block holding what came so far.

import DOMPurify from 'dompurify';
import hljs from 'highlight.js/lib/core';
import bash from 'highlight.js/lib/languages/bash';
import c from 'highlight.js/lib/languages/c';
import cpp from 'highlight.js/lib/languages/cpp';
import css from 'highlight.js/lib/languages/css';
import java from 'highlight.js/lib/languages/java';
import javascript from 'highlight.js/lib/languages/javascript';
import json from 'highlight.js/lib/languages/json';
import python from 'highlight.js/lib/languages/python';
import rust from 'highlight.js/lib/languages/rust';
import sql from 'highlight.js/lib/languages/sql';
import typescript from 'highlight.js/lib/languages/typescript';
import xml from 'highlight.js/lib/languages/xml';
import { Marked, type Tokens } from 'marked';

// Each brings its usual aliases (py, js, ts, rs, sh, html, …).
for (const [name, language] of Object.entries({
  bash, c, cpp, css, java, javascript, json, python, rust, sql, typescript, xml,
})) {
  hljs.registerLanguage(name, language);
}

export function escapeHtml(text: string): string {
  return text
    .replaceAll('&', '&amp;')
    .replaceAll('<', '&lt;')
    .replaceAll('>', '&gt;')
    .replaceAll('"', '&quot;')
    .replaceAll("'", '&#39;');
}

/** The code highlighted as `lang` (first word of the fence's info string) when registered, else escaped. */
export function highlight(code: string, lang: string | undefined): { html: string; language: string | null } {
  const name = lang?.trim().split(/\s+/)[0]?.toLowerCase() ?? '';
  const language = name === '' ? undefined : hljs.getLanguage(name);
  if (!language) return { html: escapeHtml(code), language: null };
  return { html: hljs.highlight(code, { language: name, ignoreIllegals: true }).value, language: name };
}

const marked = new Marked({
  gfm: true,
  // Models mean a line break when they write one ("one per line"), as chat UIs take it.
  breaks: true,
  async: false,
  renderer: {
    // Raw HTML from the model is text to show, not markup.
    html({ text, block }: Tokens.HTML | Tokens.Tag) {
      return block ? `<p>${escapeHtml(text)}</p>\n` : escapeHtml(text);
    },
    code({ text, lang }: Tokens.Code) {
      const { html, language } = highlight(text, lang);
      const label = language ?? lang?.trim().split(/\s+/)[0] ?? '';
      return (
        `<div class="code-block"><div class="code-head"><span class="code-lang">${escapeHtml(label)}</span>` +
        `<button type="button" class="copy-code" data-testid="chat-copy-code" title="Copy this code">Copy</button></div>` +
        `<pre><code class="hljs${language ? ` language-${language}` : ''}">${html}</code></pre></div>\n`
      );
    },
    // Links open outside the app (in the desktop app a click would otherwise leave the UI).
    link({ href, title, tokens }: Tokens.Link) {
      const inner = this.parser.parseInline(tokens);
      const titled = title ? ` title="${escapeHtml(title)}"` : '';
      return `<a href="${escapeHtml(href)}"${titled} target="_blank" rel="noopener noreferrer">${inner}</a>`;
    },
    // An image would be fetched as soon as it is shown: a link lets the person choose.
    image({ href, text }: Tokens.Image) {
      return `<a href="${escapeHtml(href)}" target="_blank" rel="noopener noreferrer">${escapeHtml(text || href)}</a>`;
    },
  },
});

/** `html` without scripts, event handlers, `javascript:` links, styles, images or forms. */
export function sanitize(html: string): string {
  // Without a DOM (never in the app) DOMPurify cannot sanitize: show the markup as text.
  if (!DOMPurify.isSupported) return escapeHtml(html);
  return DOMPurify.sanitize(html, {
    USE_PROFILES: { html: true },
    ADD_ATTR: ['target'],
    FORBID_TAGS: ['style', 'img', 'form'],
    FORBID_ATTR: ['style'],
  });
}

/** `source` (markdown) as sanitized HTML. */
export function renderMarkdown(source: string): string {
  return sanitize(marked.parse(source) as string);
}

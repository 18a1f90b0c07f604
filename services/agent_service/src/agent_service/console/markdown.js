import { el } from "./dom.js";

// Markdown, safely, for the console (an ES module, no build step).
// A small subset (paragraphs, headings, lists, fenced and inline code, bold, italics, http(s) links),
// built as DOM nodes whose text is set with createTextNode: model or tool output that contains HTML is
// shown as the characters it is, never interpreted.

// Inline markup is found in one pass over the line (each position looks ahead through tables of where the next
// backtick, star and closing bracket are), so its cost grows with the line's length, never with its square: a
// line of 16,000 "[" is as cheap as any other. A line longer than MAX_INLINE_CHARS is parsed up to there only.
const MAX_INLINE_CHARS = 10000;

// For every position of ``text``, where the next character that ``is`` says yes to is, at or after it (-1: none).
function nextWhere(text, is) {
  const next = new Int32Array(text.length + 2).fill(-1);
  for (let i = text.length - 1; i >= 0; i--) next[i] = is(text[i]) ? i : next[i + 1];
  return next;
}

const URL_SCHEME = /^https?:\/\//;

// The inline tokens of ``text`` in order, {start, end, kind, inner, href}: what matching
// (`[^`]+`)|(\*\*[^*]+\*\*)|(\*[^*\s][^*]*\*)|(\[[^\]]+\]\((https?:\/\/[^\s)]+)\)) again and again would find.
function inlineTokens(text) {
  const ticks = nextWhere(text, (c) => c === "`");
  const stars = nextWhere(text, (c) => c === "*");
  const closes = nextWhere(text, (c) => c === "]");
  const urlStops = nextWhere(text, (c) => c === ")" || /\s/.test(c));
  // The end of the link "(http...)" after the "](" at ``at``, or -1.
  const urlEnd = (at) => {
    const scheme = URL_SCHEME.exec(text.slice(at + 2, at + 10));
    if (!scheme) return -1;
    const first = at + 2 + scheme[0].length;
    const stop = urlStops[first];
    return stop > first && text[stop] === ")" ? stop + 1 : -1;
  };
  const tokens = [];
  let i = 0;
  while (i < text.length) {
    const ch = text[i];
    let token = null;
    if (ch === "`") {
      const close = ticks[i + 1];
      if (close > i + 1) token = { end: close + 1, kind: "code", inner: text.slice(i + 1, close) };
    } else if (ch === "*") {
      if (text[i + 1] === "*") {
        const close = stars[i + 2];
        if (close > i + 2 && text[close + 1] === "*") {
          token = { end: close + 2, kind: "strong", inner: text.slice(i + 2, close) };
        }
      }
      if (!token && i + 1 < text.length && text[i + 1] !== "*" && !/\s/.test(text[i + 1])) {
        const close = stars[i + 2];
        if (close > i + 1) token = { end: close + 1, kind: "em", inner: text.slice(i + 1, close) };
      }
    } else if (ch === "[") {
      const close = closes[i + 1];
      if (close > i + 1 && text[close + 1] === "(") {
        const end = urlEnd(close);
        if (end > 0) token = { end, kind: "link", inner: text.slice(i + 1, close), href: text.slice(close + 2, end - 1) };
      }
    }
    if (token) {
      tokens.push({ start: i, ...token });
      i = token.end;
    } else {
      i++;
    }
  }
  return tokens;
}

function renderInline(text, parent) {
  const line = String(text);
  const parsed = line.slice(0, MAX_INLINE_CHARS);
  let shown = 0;
  for (const token of inlineTokens(parsed)) {
    if (token.start > shown) parent.appendChild(document.createTextNode(parsed.slice(shown, token.start)));
    if (token.kind === "code") {
      parent.appendChild(el("code", null, token.inner));
    } else if (token.kind === "strong" || token.kind === "em") {
      const node = el(token.kind);
      renderInline(token.inner, node); // holds no star: only code and links can be inside
      parent.appendChild(node);
    } else {
      const link = el("a", null, token.inner);
      link.href = token.href; // only http(s): nothing else is taken as a link
      link.rel = "noopener noreferrer";
      link.target = "_blank";
      parent.appendChild(link);
    }
    shown = token.end;
  }
  if (shown < line.length) parent.appendChild(document.createTextNode(line.slice(shown)));
}

export function renderMarkdown(source) {
  const root = el("div", "markdown");
  const lines = String(source).replace(/\r\n?/g, "\n").split("\n");
  let paragraph = [];
  let list = null;
  const flushParagraph = () => {
    if (paragraph.length) {
      const p = el("p");
      paragraph.forEach((line, index) => {
        if (index) p.appendChild(el("br"));
        renderInline(line, p);
      });
      root.appendChild(p);
      paragraph = [];
    }
  };
  const flushList = () => {
    list = null;
  };
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    const fence = /^```(\S*)\s*$/.exec(line);
    if (fence) {
      flushParagraph();
      flushList();
      const code = [];
      i++;
      while (i < lines.length && !/^```\s*$/.test(lines[i])) code.push(lines[i++]);
      const pre = el("pre");
      pre.appendChild(el("code", null, code.join("\n")));
      root.appendChild(pre);
      continue;
    }
    const heading = /^(#{1,6})\s+(.*)$/.exec(line);
    const bullet = /^\s*[-*+]\s+(.*)$/.exec(line);
    const numbered = /^\s*\d+[.)]\s+(.*)$/.exec(line);
    if (heading) {
      flushParagraph();
      flushList();
      const h = el("h" + Math.min(heading[1].length + 2, 6));
      renderInline(heading[2], h);
      root.appendChild(h);
    } else if (bullet || numbered) {
      flushParagraph();
      const tag = bullet ? "ul" : "ol";
      if (!list || list.tagName.toLowerCase() !== tag) {
        list = el(tag);
        root.appendChild(list);
      }
      const item = el("li");
      renderInline((bullet || numbered)[1], item);
      list.appendChild(item);
    } else if (!line.trim()) {
      flushParagraph();
      flushList();
    } else {
      flushList();
      paragraph.push(line);
    }
  }
  flushParagraph();
  return root;
}

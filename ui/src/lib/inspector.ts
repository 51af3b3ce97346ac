// The step inspector's logic: where a step's drafted tree is drawn, which nodes lie on the
// accepted path, and the per-run figures beside it (accepted lengths, acceptance per head and
// rank, why steps drafted nothing). Pure, so it is unit-tested directly.
//
// Everything here reads structural types that both the live `StepEvent` and the stored
// `StepRecord` satisfy (inspector.test.ts checks it): a stored node's `source` is a plain string.

import { headOf } from './run';
import { counted } from './words';

/** A token and its text. */
export interface TreeToken {
  token: number;
  text: string;
}

/** One drafted token, as `DraftNode` and `DraftNodeRecord` both have it. */
export interface TreeNode {
  token: number;
  text: string;
  /** Index into the tree's nodes; null hangs from the root. */
  parent: number | null;
  source: string;
  /** Rank among its proposer's guesses: 0 is a head's top-1; for lookup, which earlier match. */
  rank: number;
  /** A second drafter that proposed the same token here (live auto runs; stored runs lack it). */
  also_proposed_by?: string | null;
  accepted: boolean;
}

/** A step's drafted tree (`StepTree`, `StepTreeRecord`): parents come before children. */
export interface DraftTree {
  root: TreeToken;
  nodes: readonly TreeNode[];
  model_token: TreeToken;
}

/** Why a step drafted nothing (`DraftSkip`, `DraftSkipRecord`). */
export interface SkipInfo {
  reason: string;
  message: string;
}

/** One drafter's evidence in a step (`DrafterEvidence`, `DrafterEvidenceRecord`). */
export interface EvidenceInfo {
  drafter: string;
  class: number;
  accepted: number;
  tried: number;
  cautious_rate: number;
  proposed: number;
  drafted: number;
}

/** What the draft budget weighed for a step (`DraftDecision`, `DraftDecisionRecord`). */
export interface DecisionInfo {
  expected_tokens: number;
  step_ms: number;
  plain_ms: number;
  evidence: readonly EvidenceInfo[];
}

/** What the inspector reads of a step. `tree` is null for runs stored before trees were kept. */
export interface InspectedStep {
  tree_size: number;
  tree_depth: number;
  accepted_len: number;
  tokens: readonly number[];
  draft_ms: number;
  verify_ms: number;
  tree: DraftTree | null;
  skip: SkipInfo | null;
  /** Absent where no budget decided (a tree drafted in full, older runs). */
  decision?: DecisionInfo | null;
}

// ---------------------------------------------------------------------------------------------
// Layout

export type NodeKind = 'root' | 'draft' | 'model';

export interface LaidOutNode {
  /** `root`, `model`, or the drafted node's index as `n<i>`. */
  key: string;
  kind: NodeKind;
  /** Index into the tree's nodes for drafts; null for the root and the model's token. */
  index: number | null;
  token: number;
  text: string;
  /** `model` for the model's token and the root; a drafted node's proposer otherwise. */
  source: string;
  /** A drafted node's second proposer, if two drafters guessed it; else null. */
  also: string | null;
  rank: number | null;
  /** Column: 0 for the root, 1 for what hangs from it, and so on. */
  depth: number;
  /** Row, in leaf slots: leaves take 0, 1, 2, …; a parent sits midway between its first and last child. */
  slot: number;
  /**
   * On the emitted path: the root, the accepted drafts and the model's token. A drafted node is
   * on it only when it was accepted and its parent is on it too.
   */
  accepted: boolean;
  /** Judged by the model: hangs from a node on the path. False under a rejected parent. */
  tried: boolean;
  /** Guesses under this rejected node left out of the layout (collapsed); 0 when none. */
  hidden: number;
}

export interface LaidOutEdge {
  from: string;
  to: string;
  /** Both ends on the emitted path. */
  accepted: boolean;
}

export interface TreeLayout {
  nodes: LaidOutNode[];
  edges: LaidOutEdge[];
  /** Deepest column used (0 for a lone root). */
  depth: number;
  /** Leaf slots used: the layout is `slots` rows tall. */
  slots: number;
}

/**
 * Positions for drawing a step's tree: the root in column 0, each node one column right of its
 * parent, and the model's own token as a child of the last accepted node (the root when nothing
 * was accepted), listed before that node's drafted children so it sits next to the guesses it
 * beat. Rows follow a simple tidy layout: leaves take consecutive slots in depth-first order
 * (children in the order the tree lists them), each parent is centred over its first and last
 * child, so subtrees never overlap.
 */
export function layoutTree(tree: DraftTree, options: { collapseRejected?: boolean } = {}): TreeLayout {
  const { children, rootChildren, onPath, last } = structure(tree);
  const descendants = (indices: readonly number[]): number =>
    indices.reduce((sum, i) => sum + 1 + descendants(children[i]), 0);
  const nodes: LaidOutNode[] = [];
  const edges: LaidOutEdge[] = [];
  let nextSlot = 0;
  let deepest = 0;

  const draftNode = (i: number, depth: number, tried: boolean): LaidOutNode => {
    const d = tree.nodes[i];
    return {
      key: `n${i}`,
      kind: 'draft',
      index: i,
      token: d.token,
      text: d.text,
      source: d.source,
      also: d.also_proposed_by ?? null,
      rank: d.rank,
      depth,
      slot: 0,
      accepted: onPath[i],
      tried,
      hidden: 0,
    };
  };

  const childrenOf = (node: LaidOutNode): LaidOutNode[] => {
    if (node.kind === 'model') return [];
    const indices = node.kind === 'root' ? rootChildren : children[node.index!];
    if (options.collapseRejected && !node.accepted) {
      // Nothing under a rejected guess was judged: folded into a count on it.
      node.hidden = descendants(indices);
      return [];
    }
    const drafted = indices.map((i) => draftNode(i, node.depth + 1, node.accepted));
    if (node.index !== last) return drafted;
    const model: LaidOutNode = {
      key: 'model',
      kind: 'model',
      index: null,
      token: tree.model_token.token,
      text: tree.model_token.text,
      source: 'model',
      also: null,
      rank: null,
      depth: node.depth + 1,
      slot: 0,
      accepted: true,
      tried: true,
      hidden: 0,
    };
    return [model, ...drafted];
  };

  /** Places `node` and its subtree, depth first; returns its slot. */
  const place = (node: LaidOutNode): number => {
    nodes.push(node);
    deepest = Math.max(deepest, node.depth);
    const kids = childrenOf(node);
    if (kids.length === 0) {
      node.slot = nextSlot++;
    } else {
      const slots = kids.map((kid) => {
        edges.push({ from: node.key, to: kid.key, accepted: kid.accepted });
        return place(kid);
      });
      node.slot = (slots[0] + slots[slots.length - 1]) / 2;
    }
    return node.slot;
  };

  place({
    key: 'root',
    kind: 'root',
    index: null,
    token: tree.root.token,
    text: tree.root.text,
    source: 'model',
    also: null,
    rank: null,
    depth: 0,
    slot: 0,
    accepted: true,
    tried: true,
    hidden: 0,
  });
  return { nodes, edges, depth: deepest, slots: nextSlot };
}

/**
 * The tree's links: each node's children, the root's, which nodes lie on the accepted path (from
 * the root, always into the first accepted child) and its last node (null: the root).
 */
function structure(tree: DraftTree) {
  const n = tree.nodes.length;
  const children: number[][] = Array.from({ length: n }, () => []);
  const rootChildren: number[] = [];
  tree.nodes.forEach((node, i) => {
    // A parent must come before its child; a node breaking that is hung from the root, not lost.
    const p = node.parent;
    if (p !== null && p >= 0 && p < i) children[p].push(i);
    else rootChildren.push(i);
  });
  const onPath = new Array<boolean>(n).fill(false);
  let last: number | null = null;
  for (let level = rootChildren; ; ) {
    const next = level.find((i) => tree.nodes[i].accepted);
    if (next === undefined) break;
    onPath[next] = true;
    last = next;
    level = children[next];
  }
  return { children, rootChildren, onPath, last };
}

/**
 * Where the step stopped: the last node on the accepted path (null: the root), the drafted
 * guesses under it that the model turned down, and the token it chose instead.
 */
export function firstRejection(tree: DraftTree): { after: number | null; rejected: TreeNode[]; model: TreeToken } {
  const { children, rootChildren, last } = structure(tree);
  const under = last === null ? rootChildren : children[last];
  return { after: last, rejected: under.map((i) => tree.nodes[i]), model: tree.model_token };
}

// ---------------------------------------------------------------------------------------------
// Labels

const CONTROL_PICTURES: Record<string, string> = { ' ': '␣', '\n': '↵', '\t': '⇥', '\r': '␍' };

/**
 * A token's text with its whitespace made visible: `␣` for spaces, `↵` for newlines, `⇥` for
 * tabs, control characters as their Unicode control pictures; `∅` for an empty text.
 */
export function visibleText(text: string): string {
  if (text === '') return '∅';
  let out = '';
  for (const ch of text) {
    const code = ch.codePointAt(0)!;
    if (ch in CONTROL_PICTURES) out += CONTROL_PICTURES[ch];
    else if (code < 0x20) out += String.fromCodePoint(0x2400 + code);
    else if (code === 0x7f) out += '␡';
    else out += ch;
  }
  return out;
}

/** `text` cut to `max` characters (code points), an ellipsis marking the cut. */
export function clip(text: string, max: number): string {
  const chars = [...text];
  return chars.length <= max ? text : chars.slice(0, Math.max(1, max - 1)).join('') + '…';
}

/**
 * A drafter's full name: "Medusa head 2", "prompt lookup", "draft model", "EAGLE drafter" (heads are
 * 0-based inside).
 */
export function drafterName(source: string): string {
  const head = headOf(source);
  if (head !== null) return `Medusa head ${head + 1}`;
  if (source === 'draft_model') return 'draft model';
  if (source === 'eagle') return 'EAGLE drafter';
  return source === 'lookup' ? 'prompt lookup' : source;
}

/** A source's short name, for legends: "head 2", "lookup", "draft", "model". */
export function sourceName(source: string): string {
  const head = headOf(source);
  if (source === 'draft_model') return 'draft';
  return head === null ? source : `head ${head + 1}`;
}

/**
 * Who proposed a drafted token, for people: "Medusa head 2, rank 3", "prompt lookup, match 1",
 * and a second proposer after it: "prompt lookup, match 1; also Medusa head 2" (the second's rank
 * is not known).
 */
export function proposerText(source: string, rank: number, also: string | null = null): string {
  // Ranks are 0-based inside, 1-based on screen (rank 1 is a head's best guess).
  const first =
    headOf(source) !== null
      ? `${drafterName(source)}, rank ${rank + 1}`
      : source === 'lookup'
        ? `prompt lookup, match ${rank + 1}`
        : source === 'draft_model'
          ? 'draft model'
          : source === 'eagle'
            ? `EAGLE drafter, rank ${rank + 1}`
          : `${source}, rank ${rank + 1}`;
  return also ? `${first}; also ${drafterName(also)}` : first;
}

export interface SourceLegendEntry {
  /** `model`, `lookup`, `medusa_head_K`, or `both` for tokens two drafters proposed. */
  key: string;
  /** Whose colour the swatch takes (for `both`, the first proposer of its first such node). */
  source: string;
  /** For `both`: the second proposer of that node, whose colour fills the swatch's other half. */
  also: string | null;
  /** "model", "lookup", "head 2", "both". */
  label: string;
  /** In words, for a tooltip. */
  title: string;
  /** Nodes it covers: the model's one token, or drafted nodes (a shared one counts for each of its proposers and for `both`). */
  count: number;
}

/**
 * The legend of who proposed a step's tokens: the model (its own token), each drafter present
 * (heads in order, then lookup), and `both` when two drafters proposed the same token.
 */
export function sourceLegend(tree: DraftTree): SourceLegendEntry[] {
  const counts = new Map<string, number>();
  const pairs = new Map<string, [string, string]>();
  let shared = 0;
  for (const node of tree.nodes) {
    counts.set(node.source, (counts.get(node.source) ?? 0) + 1);
    const also = node.also_proposed_by;
    if (!also) continue;
    counts.set(also, (counts.get(also) ?? 0) + 1);
    shared += 1;
    const pair = `${node.source}\u0000${also}`;
    if (!pairs.has(pair)) pairs.set(pair, [node.source, also]);
  }
  const model: SourceLegendEntry = {
    key: 'model',
    source: 'model',
    also: null,
    label: 'model',
    title: "the model's own token",
    count: 1,
  };
  const drafters = [...counts.entries()]
    .sort(([a], [b]) => {
      const [ka, na] = sourceOrder(a);
      const [kb, nb] = sourceOrder(b);
      return ka - kb || na.localeCompare(nb);
    })
    .map(([source, count]) => ({
      key: source,
      source,
      also: null,
      label: sourceName(source),
      title: `proposed by ${drafterName(source)}`,
      count,
    }));
  const out = [model, ...drafters];
  const [first] = pairs.values();
  if (first) {
    const names = [...pairs.values()].map(([a, b]) => `${drafterName(a)} and ${drafterName(b)}`);
    out.push({
      key: 'both',
      source: first[0],
      also: first[1],
      label: 'both',
      title: `proposed by two drafters: ${names.join('; ')}`,
      count: shared,
    });
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Per-run figures

/** Steps per accepted length, for lengths 1 (only the model's own token) to the longest seen. */
export function acceptedLengthHistogram(
  steps: readonly Pick<InspectedStep, 'accepted_len'>[],
): { length: number; count: number }[] {
  const counts: number[] = [];
  for (const s of steps) {
    const len = Math.max(1, s.accepted_len);
    counts[len] = (counts[len] ?? 0) + 1;
  }
  const out: { length: number; count: number }[] = [];
  for (let len = 1; len < counts.length; len++) out.push({ length: len, count: counts[len] ?? 0 });
  return out;
}

export interface HeadRankAcceptance {
  source: string;
  rank: number;
  /** Nodes of this source and rank in all trees. */
  drafted: number;
  /**
   * Of them, those that had a chance: hanging from the root or from an accepted parent. A node
   * under a rejected parent was never judged on its own, so it counts as drafted, not tried.
   */
  tried: number;
  accepted: number;
}

/** Sort order of sources: heads by number, then lookup, the draft model, EAGLE, anything else by name. */
function sourceOrder(source: string): [number, string] {
  const head = headOf(source);
  if (head !== null) return [head, ''];
  return [source === 'lookup' ? 1e6 : source === 'draft_model' ? 1.5e6 : source === 'eagle' ? 1.7e6 : 2e6, source];
}

/**
 * Acceptance per proposer and rank over every drafted node of `steps`, sorted by source (heads
 * in order, then lookup) and rank. Steps without a tree (stored before trees were kept) add
 * nothing.
 */
export function acceptanceByHeadAndRank(steps: readonly Pick<InspectedStep, 'tree'>[]): HeadRankAcceptance[] {
  const rows = new Map<string, HeadRankAcceptance>();
  for (const step of steps) {
    const nodes = step.tree?.nodes ?? [];
    nodes.forEach((node) => {
      const key = `${node.source}\u0000${node.rank}`;
      let row = rows.get(key);
      if (!row) {
        row = { source: node.source, rank: node.rank, drafted: 0, tried: 0, accepted: 0 };
        rows.set(key, row);
      }
      row.drafted += 1;
      const parent = node.parent === null ? null : nodes[node.parent];
      if (parent === null || parent?.accepted) {
        row.tried += 1;
        if (node.accepted) row.accepted += 1;
      }
    });
  }
  return [...rows.values()].sort((a, b) => {
    const [ka, na] = sourceOrder(a.source);
    const [kb, nb] = sourceOrder(b.source);
    return ka - kb || na.localeCompare(nb) || a.rank - b.rank;
  });
}

/**
 * The rows of `acceptanceByHeadAndRank` summed per proposer, all ranks together (rank -1), in
 * the same order: the table's "all" column.
 */
export function acceptanceByProposer(rows: readonly HeadRankAcceptance[]): HeadRankAcceptance[] {
  const sums = new Map<string, HeadRankAcceptance>();
  for (const r of rows) {
    let sum = sums.get(r.source);
    if (!sum) {
      sum = { source: r.source, rank: -1, drafted: 0, tried: 0, accepted: 0 };
      sums.set(r.source, sum);
    }
    sum.drafted += r.drafted;
    sum.tried += r.tried;
    sum.accepted += r.accepted;
  }
  return [...sums.values()];
}

/**
 * Per depth (index d for depth d + 1), Medusa head d's guesses judged and kept, all ranks
 * together: what the inspector's table says of the head that drafts that depth. Null where the
 * head drafted nothing.
 */
export function headGuessesByDepth(
  rows: readonly HeadRankAcceptance[],
  depths: number,
): ({ accepted: number; tried: number } | null)[] {
  const byHead = new Map(acceptanceByProposer(rows).map((r) => [headOf(r.source), r]));
  return Array.from({ length: depths }, (_, d) => {
    const r = byHead.get(d);
    return r ? { accepted: r.accepted, tried: r.tried } : null;
  });
}

/**
 * Which step (index into `steps`) emitted generated token `tokenIndex` (0-based). The first
 * generated token comes from reading the prompt, before any step: null, as is an index past the
 * steps. Each step emits `accepted_len` tokens in order.
 */
export function stepAtToken(steps: readonly Pick<InspectedStep, 'accepted_len'>[], tokenIndex: number): number | null {
  if (!Number.isInteger(tokenIndex) || tokenIndex < 1) return null;
  let end = 1;
  for (let i = 0; i < steps.length; i++) {
    end += steps[i].accepted_len;
    if (tokenIndex < end) return i;
  }
  return null;
}

export interface SkipGroup {
  reason: string;
  /** Steps that drafted nothing for this reason. */
  count: number;
  /** The first such step's message. */
  message: string;
}

/** Why steps drafted nothing, grouped by reason, the most frequent first. */
export function skipGroups(steps: readonly Pick<InspectedStep, 'skip'>[]): SkipGroup[] {
  const groups = new Map<string, SkipGroup>();
  for (const { skip } of steps) {
    if (!skip) continue;
    const group = groups.get(skip.reason);
    if (group) group.count += 1;
    else groups.set(skip.reason, { reason: skip.reason, count: 1, message: skip.message });
  }
  // A stable sort keeps first-seen order among equal counts.
  return [...groups.values()].sort((a, b) => b.count - a.count);
}

/** A reason group in words: "Drafted nothing at 46 of 47 steps: <the first message>". */
export function skipText(group: SkipGroup, steps: number): string {
  return `Drafted nothing at ${group.count} of ${counted(steps, 'step')}: ${group.message}`;
}

/**
 * Why a run drafted little: its steps' most frequent reason for drafting nothing, when more than
 * half of its steps drafted nothing; else null (a run of one token has no steps).
 */
export function undraftedText(steps: readonly Pick<InspectedStep, 'skip' | 'tree_size'>[]): string | null {
  const undrafted = steps.filter((s) => s.tree_size === 0);
  if (undrafted.length * 2 <= steps.length) return null;
  const [most] = skipGroups(undrafted);
  return most ? skipText(most, steps.length) : null;
}

/**
 * What a lookup proposal's evidence class stands for (the engine's `lookup.rs`): classes 0-4 are
 * matches in the request's own text by length, 5-8 guesses remembered from earlier requests, by
 * the length of the context they followed and how often it was seen.
 */
export function lookupEvidence(cls: number): string {
  const matches = ['2', '3-4', '5-8', '9-16', '17+'].map((n) => `a match of ${n} tokens`);
  const remembered = ['2', '4'].flatMap((n) => [
    `remembered after ${n} tokens`,
    `remembered after ${n} tokens seen 3+ times`,
  ]);
  return matches[cls] ?? remembered[cls - matches.length] ?? `class ${cls}`;
}

/**
 * Why the budget drafted what it did, in words: the tokens and times it expected, and what each
 * drafter's acceptance rested on.
 */
export function decisionText(decision: DecisionInfo): string {
  const drafted = decision.evidence.some((e) => e.drafted > 0);
  const verdict = drafted
    ? `Drafted: expected ${decision.expected_tokens.toFixed(2)} tokens in ${decision.step_ms.toFixed(1)} ms, against 1 in ${decision.plain_ms.toFixed(1)} ms without drafting.`
    : `Decoded plainly: no draft was expected to beat 1 token in ${decision.plain_ms.toFixed(1)} ms.`;
  const evidence = decision.evidence.map((e) => {
    const seen = e.tried === 0 ? 'no evidence yet' : `${e.accepted} of ${e.tried} accepted`;
    const cls = e.drafter === 'lookup' ? ` (${lookupEvidence(e.class)})` : '';
    return (
      `${e.drafter === 'medusa' ? 'Medusa heads' : drafterName(e.drafter)}${cls}: ${seen}, planned at ${(e.cautious_rate * 100).toFixed(0)}%; ` +
      `drafted ${e.drafted} of ${e.proposed}`
    );
  });
  return [verdict, ...evidence].join(' ');
}

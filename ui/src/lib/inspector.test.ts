import { describe, expect, expectTypeOf, it } from 'vitest';
import {
  decisionText,
  lookupEvidence,
  acceptanceByHeadAndRank,
  acceptedLengthHistogram,
  clip,
  drafterName,
  firstRejection,
  layoutTree,
  proposerText,
  undraftedText,
  skipGroups,
  skipText,
  sourceLegend,
  sourceName,
  stepAtToken,
  visibleText,
  type DraftTree,
  type InspectedStep,
  type TreeNode,
} from './inspector';
import type { StepEvent, StepRecord } from './api/types';

function node(text: string, parent: number | null, source: string, rank: number, accepted = false): TreeNode {
  return { token: text.length * 100 + rank, text, parent, source, rank, accepted };
}

/** root → a (accepted) → c; root → b. The model chose M after a. */
const small: DraftTree = {
  root: { token: 1, text: 'The' },
  nodes: [
    node(' cat', null, 'medusa_head_0', 0, true),
    node(' dog', null, 'medusa_head_0', 1),
    node(' ran', 0, 'medusa_head_1', 0),
  ],
  model_token: { token: 9, text: ' sat' },
};

/**
 * Three levels: x and y hang from the root; x (accepted) has x1 (accepted) and x2; x1 has x1a and
 * x1b; y has y1. The model's token follows x1.
 */
const deep: DraftTree = {
  root: { token: 1, text: 'r' },
  nodes: [
    node('x', null, 'medusa_head_0', 0, true),
    node('y', null, 'medusa_head_0', 1),
    node('x1', 0, 'medusa_head_1', 0, true),
    node('x2', 0, 'medusa_head_1', 1),
    node('y1', 1, 'medusa_head_1', 0),
    node('x1a', 2, 'medusa_head_2', 0),
    node('x1b', 2, 'medusa_head_2', 1),
  ],
  model_token: { token: 2, text: 'M' },
};

function positions(tree: DraftTree) {
  const layout = layoutTree(tree);
  return {
    nodes: layout.nodes.map((n) => [n.key, n.depth, n.slot, n.accepted]),
    edges: layout.edges.map((e) => [e.from, e.to, e.accepted]),
    depth: layout.depth,
    slots: layout.slots,
  };
}

describe('InspectedStep', () => {
  it('is what live and stored steps both are', () => {
    expectTypeOf<StepEvent>().toExtend<InspectedStep>();
    expectTypeOf<StepRecord>().toExtend<InspectedStep>();
  });
});

describe('layoutTree', () => {
  it('puts the model token after the accepted node and centres parents over their children', () => {
    expect(positions(small)).toEqual({
      // Depth-first: a's leaves (the model's token first) take slots 0 and 1, b takes 2.
      nodes: [
        ['root', 0, 1.25, true],
        ['n0', 1, 0.5, true],
        ['model', 2, 0, true],
        ['n2', 2, 1, false],
        ['n1', 1, 2, false],
      ],
      edges: [
        ['root', 'n0', true],
        ['n0', 'model', true],
        ['n0', 'n2', false],
        ['root', 'n1', false],
      ],
      depth: 2,
      slots: 3,
    });
  });

  it('lays out three levels without overlapping subtrees', () => {
    expect(positions(deep)).toEqual({
      nodes: [
        ['root', 0, 3, true],
        ['n0', 1, 2, true],
        ['n2', 2, 1, true],
        ['model', 3, 0, true],
        ['n5', 3, 1, false],
        ['n6', 3, 2, false],
        ['n3', 2, 3, false],
        ['n1', 1, 4, false],
        ['n4', 2, 4, false],
      ],
      edges: [
        ['root', 'n0', true],
        ['n0', 'n2', true],
        ['n2', 'model', true],
        ['n2', 'n5', false],
        ['n2', 'n6', false],
        ['n0', 'n3', false],
        ['root', 'n1', false],
        ['n1', 'n4', false],
      ],
      depth: 3,
      slots: 5,
    });
  });

  it('folds what hangs under a rejected guess into a count on it', () => {
    const layout = layoutTree(deep, { collapseRejected: true });
    expect(layout.nodes.map((n) => [n.key, n.hidden])).toEqual([
      ['root', 0],
      ['n0', 0],
      ['n2', 0],
      ['model', 0],
      ['n5', 0],
      ['n6', 0],
      ['n3', 0],
      ['n1', 1],
    ]);
    expect(layout.slots).toBe(5);
    expect(layout.edges.map((e) => e.to)).not.toContain('n4');
  });

  it('hangs the model token from the root when nothing was drafted or accepted', () => {
    const empty: DraftTree = { root: { token: 1, text: 'a' }, nodes: [], model_token: { token: 2, text: 'b' } };
    expect(positions(empty)).toEqual({
      nodes: [
        ['root', 0, 0, true],
        ['model', 1, 0, true],
      ],
      edges: [['root', 'model', true]],
      depth: 1,
      slots: 1,
    });
    const rejected: DraftTree = { ...empty, nodes: [node('x', null, 'lookup', 0)] };
    expect(positions(rejected).nodes).toEqual([
      ['root', 0, 0.5, true],
      ['model', 1, 0, true],
      ['n0', 1, 1, false],
    ]);
  });

  it('keeps an accepted node under a rejected parent off the path', () => {
    const odd: DraftTree = {
      ...small,
      nodes: [node('a', null, 'medusa_head_0', 0), node('b', 0, 'medusa_head_1', 0, true)],
    };
    const layout = layoutTree(odd);
    expect(layout.nodes.filter((n) => n.accepted).map((n) => n.key)).toEqual(['root', 'model']);
    expect(layout.edges.find((e) => e.to === 'model')!.from).toBe('root');
  });

  it('marks nodes under a rejected parent as never tried', () => {
    const tried = layoutTree(deep).nodes.filter((n) => !n.tried).map((n) => n.key);
    expect(tried).toEqual(['n4']);
  });

  it('carries each node’s token, text and proposer', () => {
    const n2 = layoutTree(small).nodes.find((n) => n.key === 'n2')!;
    expect(n2).toMatchObject({ kind: 'draft', index: 2, token: 400, text: ' ran', source: 'medusa_head_1', rank: 0 });
    const model = layoutTree(small).nodes.find((n) => n.kind === 'model')!;
    expect(model).toMatchObject({ token: 9, text: ' sat', rank: null });
  });
});

describe('firstRejection', () => {
  it('names the guesses the model turned down and what it chose', () => {
    expect(firstRejection(small)).toEqual({ after: 0, rejected: [small.nodes[2]], model: small.model_token });
    expect(firstRejection(deep).rejected.map((n) => n.text)).toEqual(['x1a', 'x1b']);
    expect(firstRejection({ ...small, nodes: [] })).toEqual({ after: null, rejected: [], model: small.model_token });
  });
});

describe('labels', () => {
  it('makes whitespace visible and never drops characters', () => {
    expect(visibleText(' the\n')).toBe('␣the↵');
    expect(visibleText('\t\r\u0000\u007f')).toBe('⇥␍␀␡');
    expect(visibleText('')).toBe('∅');
    expect(visibleText('<b>é</b>')).toBe('<b>é</b>');
  });

  it('clips long labels by characters', () => {
    expect(clip('abcdef', 6)).toBe('abcdef');
    expect(clip('abcdefg', 6)).toBe('abcde…');
    expect(clip('😀😀😀', 2)).toBe('😀…');
  });

  it('names proposers with 1-based heads and ranks', () => {
    expect(proposerText('medusa_head_1', 2)).toBe('Medusa head 2, rank 3');
    expect(proposerText('lookup', 0)).toBe('prompt lookup, match 1');
    expect(proposerText('draft_model', 0, 'lookup')).toBe('draft model; also prompt lookup');
  });

  it('names a second proposer after the first', () => {
    expect(proposerText('lookup', 0, 'medusa_head_1')).toBe('prompt lookup, match 1; also Medusa head 2');
    expect(proposerText('medusa_head_0', 1, 'lookup')).toBe('Medusa head 1, rank 2; also prompt lookup');
    expect(proposerText('lookup', 2, null)).toBe('prompt lookup, match 3');
  });

  it('names drafters in full and in short', () => {
    expect(drafterName('medusa_head_0')).toBe('Medusa head 1');
    expect(drafterName('lookup')).toBe('prompt lookup');
    expect(sourceName('medusa_head_4')).toBe('head 5');
    expect(sourceName('lookup')).toBe('lookup');
    expect(sourceName('model')).toBe('model');
    expect(drafterName('draft_model')).toBe('draft model');
    expect(drafterName('eagle')).toBe('EAGLE drafter');
    expect(proposerText('eagle', 2)).toBe('EAGLE drafter, rank 3');
    expect(sourceName('draft_model')).toBe('draft');
  });
});

/**
 * An auto step: lookup's a → b (a also head 1's top guess, accepted), head 1's second guess c,
 * head 2's d under a (b also head 2's guess).
 */
const merged: DraftTree = {
  root: { token: 1, text: 'r' },
  nodes: [
    { ...node('a', null, 'lookup', 0, true), also_proposed_by: 'medusa_head_0' },
    { ...node('b', 0, 'lookup', 0), also_proposed_by: 'medusa_head_1' },
    node('c', null, 'medusa_head_0', 1),
    node('d', 0, 'medusa_head_1', 1),
  ],
  model_token: { token: 2, text: 'M' },
};

describe('sourceLegend', () => {
  it('lists the model, each drafter present and the tokens two drafters proposed', () => {
    expect(sourceLegend(merged)).toEqual([
      { key: 'model', source: 'model', also: null, label: 'model', title: "the model's own token", count: 1 },
      { key: 'medusa_head_0', source: 'medusa_head_0', also: null, label: 'head 1', title: 'proposed by Medusa head 1', count: 2 },
      { key: 'medusa_head_1', source: 'medusa_head_1', also: null, label: 'head 2', title: 'proposed by Medusa head 2', count: 2 },
      { key: 'lookup', source: 'lookup', also: null, label: 'lookup', title: 'proposed by prompt lookup', count: 2 },
      {
        key: 'both',
        source: 'lookup',
        also: 'medusa_head_0',
        label: 'both',
        title: 'proposed by two drafters: prompt lookup and Medusa head 1; prompt lookup and Medusa head 2',
        count: 2,
      },
    ]);
  });

  it('has no `both` when every token had one proposer', () => {
    expect(sourceLegend(small).map((e) => [e.label, e.count])).toEqual([
      ['model', 1],
      ['head 1', 2],
      ['head 2', 1],
    ]);
    expect(sourceLegend({ ...small, nodes: [] }).map((e) => e.key)).toEqual(['model']);
  });

  it('carries the second proposer into the layout', () => {
    const nodes = layoutTree(merged).nodes;
    expect(nodes.find((n) => n.key === 'n0')).toMatchObject({ source: 'lookup', also: 'medusa_head_0' });
    expect(nodes.find((n) => n.key === 'n2')).toMatchObject({ source: 'medusa_head_0', also: null });
    expect(nodes.find((n) => n.key === 'model')).toMatchObject({ source: 'model', also: null });
  });
});

describe('acceptedLengthHistogram', () => {
  it('counts steps per accepted length from 1 to the longest', () => {
    const steps = [3, 1, 1, 4, 1, 3].map((accepted_len) => ({ accepted_len }));
    expect(acceptedLengthHistogram(steps)).toEqual([
      { length: 1, count: 3 },
      { length: 2, count: 0 },
      { length: 3, count: 2 },
      { length: 4, count: 1 },
    ]);
    expect(acceptedLengthHistogram([])).toEqual([]);
  });
});

describe('acceptanceByHeadAndRank', () => {
  it('counts a node as tried only when it hangs from the root or an accepted parent', () => {
    const lookup: DraftTree = {
      root: { token: 1, text: 'a' },
      nodes: [node('p', null, 'lookup', 0, true), node('q', 0, 'lookup', 0)],
      model_token: { token: 3, text: 'z' },
    };
    const rows = acceptanceByHeadAndRank([{ tree: lookup }, { tree: deep }, { tree: null }, { tree: small }]);
    expect(rows).toEqual([
      { source: 'medusa_head_0', rank: 0, drafted: 2, tried: 2, accepted: 2 },
      { source: 'medusa_head_0', rank: 1, drafted: 2, tried: 2, accepted: 0 },
      // y1 hangs from the rejected y: drafted, never tried.
      { source: 'medusa_head_1', rank: 0, drafted: 3, tried: 2, accepted: 1 },
      { source: 'medusa_head_1', rank: 1, drafted: 1, tried: 1, accepted: 0 },
      { source: 'medusa_head_2', rank: 0, drafted: 1, tried: 1, accepted: 0 },
      { source: 'medusa_head_2', rank: 1, drafted: 1, tried: 1, accepted: 0 },
      { source: 'lookup', rank: 0, drafted: 2, tried: 2, accepted: 1 },
    ]);
  });

  it('orders heads numerically', () => {
    const tree: DraftTree = {
      ...small,
      nodes: [node('a', null, 'medusa_head_10', 0), node('b', null, 'medusa_head_2', 0)],
    };
    expect(acceptanceByHeadAndRank([{ tree }]).map((r) => r.source)).toEqual(['medusa_head_2', 'medusa_head_10']);
  });
});

describe('stepAtToken', () => {
  // Token 0 comes from the prompt; step 0 emits tokens 1-3, step 1 token 4, step 2 tokens 5-6.
  const steps = [{ accepted_len: 3 }, { accepted_len: 1 }, { accepted_len: 2 }];

  it('finds the step that emitted a token', () => {
    expect([1, 2, 3, 4, 5, 6].map((t) => stepAtToken(steps, t))).toEqual([0, 0, 0, 1, 2, 2]);
  });

  it('has no step for the prompt’s token or past the steps', () => {
    expect(stepAtToken(steps, 0)).toBeNull();
    expect(stepAtToken(steps, 7)).toBeNull();
    expect(stepAtToken([], 1)).toBeNull();
    expect(stepAtToken(steps, -1)).toBeNull();
  });
});

describe('skipGroups', () => {
  it('groups steps that drafted nothing by reason, keeping the first message', () => {
    const skip = (reason: string, message: string) => ({ skip: { reason, message } });
    expect(
      skipGroups([
        skip('no_room', 'full'),
        { skip: null },
        skip('not_worth_it', 'first'),
        skip('not_worth_it', 'second'),
      ]),
    ).toEqual([
      { reason: 'not_worth_it', count: 2, message: 'first' },
      { reason: 'no_room', count: 1, message: 'full' },
    ]);
  });
});

describe('skipText', () => {
  it('says how many steps drafted nothing and why', () => {
    expect(skipText({ reason: 'not_worth_it', count: 46, message: 'auto drafting: too dear' }, 47)).toBe(
      'Drafted nothing at 46 of 47 steps: auto drafting: too dear',
    );
    expect(skipText({ reason: 'no_room', count: 1, message: 'full' }, 1)).toBe('Drafted nothing at 1 of 1 step: full');
  });
});

describe('undraftedText', () => {
  const step = (tree_size: number, skip: { reason: string; message: string } | null) => ({ tree_size, skip });
  const dear = { reason: 'not_worth_it', message: 'the budget found no draft that pays here' };
  const full = { reason: 'no_room', message: 'one token from the end' };
  it('says why a run that drafted at few of its steps drafted nothing there', () => {
    expect(undraftedText([step(0, dear), step(0, dear), step(0, full)])).toBe(
      'Drafted nothing at 2 of 3 steps: the budget found no draft that pays here',
    );
    expect(undraftedText([step(0, dear), step(3, null), step(0, dear)])).toBe(
      'Drafted nothing at 2 of 3 steps: the budget found no draft that pays here',
    );
  });
  it('says nothing where most steps drafted, or no step said why', () => {
    expect(undraftedText([step(0, full), step(4, null)])).toBeNull();
    expect(undraftedText([])).toBeNull();
    expect(undraftedText([step(0, null)])).toBeNull();
  });
});

describe('decisionText', () => {
  it('says what a drafting step expected and what it rested on', () => {
    expect(
      decisionText({
        expected_tokens: 1.734,
        step_ms: 14.25,
        plain_ms: 8.5,
        evidence: [
          { drafter: 'lookup', class: 3, accepted: 41, tried: 50, cautious_rate: 0.731, proposed: 9, drafted: 4 },
          { drafter: 'medusa', class: 0, accepted: 0, tried: 0, cautious_rate: 0, proposed: 16, drafted: 0 },
        ],
      }),
    ).toBe(
      'Drafted: expected 1.73 tokens in 14.3 ms, against 1 in 8.5 ms without drafting. ' +
        'prompt lookup (a match of 9-16 tokens): 41 of 50 accepted, planned at 73%; drafted 4 of 9 ' +
        'Medusa heads: no evidence yet, planned at 0%; drafted 0 of 16',
    );
  });

  it('names what a lookup proposal rested on: its own match or what earlier requests wrote', () => {
    expect([0, 4, 5, 8, 9].map(lookupEvidence)).toEqual([
      'a match of 2 tokens',
      'a match of 17+ tokens',
      'remembered after 2 tokens',
      'remembered after 4 tokens seen 3+ times',
      'class 9',
    ]);
  });

  it('says why a step decoded plainly', () => {
    expect(
      decisionText({
        expected_tokens: 1,
        step_ms: 8.5,
        plain_ms: 8.5,
        evidence: [{ drafter: 'lookup', class: 0, accepted: 2, tried: 9, cautious_rate: 0.081, proposed: 3, drafted: 0 }],
      }),
    ).toBe(
      'Decoded plainly: no draft was expected to beat 1 token in 8.5 ms. ' +
        'prompt lookup (a match of 2 tokens): 2 of 9 accepted, planned at 8%; drafted 0 of 3',
    );
  });
});

import { describe, expect, it } from 'vitest';
import { acceptanceText } from './figures';
import { acceptanceByHeadAndRank, acceptanceByProposer, headGuessesByDepth, type InspectedStep } from './inspector';
import {
  draftDepthText,
  draftDepthTitle,
  draftedText,
  draftedTitle,
  runFigures,
  stepFigures,
  tokensPerStepText,
} from './runFigures';

type Node = [source: string, rank: number, parent: number | null, accepted: boolean];

/** A stored Medusa step: heads 1 and 2 (0 and 1 inside) drafting a tree two deep. */
function step(nodes: Node[], accepted_len: number): InspectedStep & { depth_hits: boolean[] } {
  const tree_depth = 2;
  return {
    tree_size: nodes.length,
    tree_depth,
    accepted_len,
    depth_hits: Array.from({ length: tree_depth }, (_, d) => accepted_len - 1 > d),
    tokens: [],
    draft_ms: 1,
    verify_ms: 10,
    skip: null,
    tree: {
      root: { token: 1, text: 'a' },
      model_token: { token: 2, text: 'b' },
      nodes: nodes.map(([source, rank, parent, accepted], i) => ({ token: 10 + i, text: `t${i}`, source, rank, parent, accepted })),
    },
  };
}

const H1 = 'medusa_head_0';
const H2 = 'medusa_head_1';
const STEPS = [
  // Both depths kept; head 2's rank-1 guess under head 1's rejected second guess was never judged.
  step([[H1, 0, null, true], [H1, 1, null, false], [H2, 0, 0, true], [H2, 1, 0, false], [H2, 0, 1, false]], 3),
  // Nothing kept: head 2's guesses hang under rejected parents.
  step([[H1, 0, null, false], [H1, 1, null, false], [H2, 0, 0, false], [H2, 0, 1, false]], 1),
  // Depth 1 kept, depth 2 not.
  step([[H1, 0, null, true], [H2, 0, 0, false], [H2, 1, 0, false]], 2),
];

describe('stepFigures', () => {
  it('counts steps, tokens, trees, depths and steps kept per depth from the steps', () => {
    expect(stepFigures(STEPS)).toEqual({
      from: 'steps',
      steps: 3,
      tokens: 6,
      tokensPerStep: 2,
      drafted: 12,
      draftDepth: 6,
      accepted: 3,
      byDepth: [
        { depth: 1, kept: 2, drafted: 3, rate: 2 / 3 },
        { depth: 2, kept: 1, drafted: 3, rate: 1 / 3 },
      ],
    });
  });

  it('yields one token per step before any step', () => {
    expect(stepFigures([])).toEqual({
      from: 'steps',
      steps: 0,
      tokens: 0,
      tokensPerStep: 1,
      drafted: 0,
      draftDepth: 0,
      accepted: 0,
      byDepth: [],
    });
  });
});

describe('runFigures', () => {
  // A summary stored before the prompt stopped counting as a step: 7 tokens over 4 "steps".
  const summary = {
    steps: 4,
    mean_accepted: 1.75,
    acceptance_by_depth: [0.5, 0.25],
    draft_tokens: 6,
    accepted_draft_tokens: 3,
  };

  it('takes the steps over the summary when the run recorded them', () => {
    expect(runFigures(summary, STEPS)).toEqual(stepFigures(STEPS));
    expect(tokensPerStepText(runFigures(summary, STEPS))).toBe('2.00 over 3 steps');
  });

  it('falls back on the summary without steps', () => {
    expect(runFigures(summary, [])).toEqual({
      from: 'summary',
      steps: 4,
      tokens: null,
      tokensPerStep: 1.75,
      drafted: null,
      draftDepth: 6,
      accepted: 3,
      byDepth: [
        { depth: 1, kept: null, drafted: null, rate: 0.5 },
        { depth: 2, kept: null, drafted: null, rate: 0.25 },
      ],
    });
    const plain = { steps: null, mean_accepted: null, acceptance_by_depth: null, draft_tokens: null, accepted_draft_tokens: null };
    expect(runFigures(plain, []).tokensPerStep).toBe(1);
    expect(tokensPerStepText(runFigures({ ...plain, steps: 1, mean_accepted: 3 }, []))).toBe('3.00 over 1 step');
    expect(runFigures(null, []).steps).toBe(0);
  });
});

describe('the two drafted counts', () => {
  const figures = stepFigures(STEPS);

  it('name the trees and the depths apart', () => {
    expect(draftedText(figures)).toBe('12 tokens (4.0 per step), 3 accepted');
    expect(draftDepthText(figures)).toBe('6, 3 accepted');
    expect(draftedText(runFigures({ steps: 2, mean_accepted: 1, acceptance_by_depth: [], draft_tokens: 0, accepted_draft_tokens: 0 }, []))).toBeNull();
    expect(draftDepthText(stepFigures([]))).toBeNull();
  });

  it('say in their hover text how they relate', () => {
    expect(draftedTitle(figures)).toBe(
      'drafted: every token of the drafted trees, rejected branches included. A step keeps at most one guess per depth, so its 12 tokens over 6 depths gave at most 6 to accept; 3 were.',
    );
    expect(draftDepthTitle(figures)).toBe(
      "draft depth: one drafted token per depth each step's tree reached (llama-server's draft_n), the most the steps could have kept; the trees held 12 tokens at these 6 depths.",
    );
  });
});

describe('steps kept per depth against accepted of tried', () => {
  const rows = acceptanceByHeadAndRank(STEPS);

  it('are two counts of the same guesses', () => {
    expect(acceptanceByProposer(rows)).toEqual([
      { source: H1, rank: -1, drafted: 5, tried: 5, accepted: 2 },
      { source: H2, rank: -1, drafted: 7, tried: 4, accepted: 1 },
    ]);
    expect(headGuessesByDepth(rows, 3)).toEqual([{ accepted: 2, tried: 5 }, { accepted: 1, tried: 4 }, null]);
  });

  it('relate in the bar hover text', () => {
    const [, second] = stepFigures(STEPS).byDepth;
    expect(acceptanceText('head 2', second, { accepted: 1, tried: 4 })).toBe(
      'head 2: steps kept, 1 of 3 steps (33.3%) that drafted 2 deep kept their guess at depth 2. ' +
        'Each depth counts every step that reached it, also those whose shallower guess was rejected, so a deeper one can be higher. ' +
        "Accepted of tried (the step inspector's table) counts guesses the model judged instead, only those under an accepted parent: 1 of 4 (25.0%).",
    );
  });
});

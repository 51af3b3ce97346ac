import { describe, expect, it } from 'vitest';
import type { Mode, PlaygroundRequest, RemoteEngineInfo } from './api/types';
import {
  draftedText,
  keptTarget,
  kindText,
  LOCAL_KEY,
  onTarget,
  placeText,
  runTarget,
  shortReason,
  targetFromKey,
  targetGroups,
  targetKey,
  targetLabel,
  targetModes,
  targetProblem,
  unaskedRemotes,
} from './engines';

function remote(fields: Partial<RemoteEngineInfo>): RemoteEngineInfo {
  return {
    name: 'lab',
    url: 'http://gpu-box:8000',
    has_key: false,
    saved: true,
    models: [],
    kind: null,
    modes: ['normal'],
    error: null,
    ...fields,
  };
}

const unreachable = {
  code: 'remote_unreachable',
  message: "remote engine 'dead' cannot be reached at http://127.0.0.1:9: connection refused",
};

describe('targetKey and targetFromKey', () => {
  it('round-trip the model served here and remote models, slashes in model names included', () => {
    expect(targetKey(null)).toBe(LOCAL_KEY);
    expect(targetFromKey(LOCAL_KEY)).toBeNull();
    expect(targetKey({ engine: 'lab', model: 'org/Model-7B' })).toBe('lab/org/Model-7B');
    expect(targetFromKey('lab/org/Model-7B')).toEqual({ engine: 'lab', model: 'org/Model-7B' });
    expect(targetKey({ engine: 'lab', model: null })).toBe('lab/');
    expect(targetFromKey('lab/')).toEqual({ engine: 'lab', model: null });
  });
});

describe('labels', () => {
  it('name the engine and its model', () => {
    expect(placeText({ engine: 'lab', model: 'SmolLM2-135M-Instruct' })).toBe('lab · SmolLM2-135M-Instruct');
    expect(placeText({ engine: 'lab', model: null })).toBe('lab');
    expect(targetLabel(null)).toBe('This machine');
    expect(targetLabel({ engine: 'lab', model: 'm' })).toBe('lab · m');
  });

  it('shorten the reasons engines fail for menus', () => {
    expect(shortReason(unreachable)).toBe('cannot be reached');
    expect(shortReason({ code: 'remote_unauthorized', message: 'x' })).toBe('refused the API key');
    expect(shortReason({ code: 'remote_timeout', message: 'x' })).toBe('did not answer in time');
    expect(shortReason({ code: 'remote_malformed', message: 'x' })).toBe('not an OpenAI-compatible server');
    expect(shortReason({ code: 'remote_refused', message: "remote engine 'lab' answered HTTP 500: boom" })).toBe(
      "remote engine 'lab' answered HTTP 500: boom",
    );
  });
});

describe('targetGroups', () => {
  it('lists each engine’s models, disables one that listed none with its reason, and offers one not asked yet', () => {
    const groups = targetGroups([
      remote({ models: ['a', 'b'] }),
      remote({ name: 'dead', url: 'http://127.0.0.1:9', error: unreachable }),
      remote({ name: 'fresh', url: 'http://h:1' }),
    ]);
    expect(groups).toEqual([
      {
        engine: 'lab',
        label: 'lab',
        options: [
          { key: 'lab/a', label: 'lab · a', disabled: false, title: 'a on http://gpu-box:8000' },
          { key: 'lab/b', label: 'lab · b', disabled: false, title: 'b on http://gpu-box:8000' },
        ],
      },
      {
        engine: 'dead',
        label: 'dead',
        options: [{ key: 'dead/', label: 'dead: cannot be reached', disabled: true, title: unreachable.message }],
      },
      {
        engine: 'fresh',
        label: 'fresh',
        options: [
          { key: 'fresh/', label: 'fresh · its first model', disabled: false, title: 'Not asked yet: a run asks http://h:1 for its models' },
        ],
      },
    ]);
  });

  it('finds the engines not asked yet, to ask them once', () => {
    const engines = [
      remote({ models: ['a'] }),
      remote({ name: 'dead', error: unreachable }),
      remote({ name: 'fresh', url: 'http://h:1' }),
    ];
    expect(unaskedRemotes(engines)).toEqual(['fresh']);
    expect(unaskedRemotes([])).toEqual([]);
  });

  it('keeps the models of an engine that failed after listing them, saying so', () => {
    const [group] = targetGroups([remote({ models: ['a'], error: unreachable })]);
    expect(group.label).toBe('lab (cannot be reached when last asked)');
    expect(group.options).toEqual([{ key: 'lab/a', label: 'lab · a', disabled: false, title: unreachable.message }]);
  });
});

describe('keptTarget', () => {
  const lab = remote({ models: ['a', 'b'] });

  it('keeps a listed model and the model served here', () => {
    expect(keptTarget(null, [lab])).toBeNull();
    expect(keptTarget({ engine: 'lab', model: 'b' }, [lab])).toEqual({ engine: 'lab', model: 'b' });
  });

  it('falls back to the model served here when the engine is gone or offers nothing', () => {
    expect(keptTarget({ engine: 'lab', model: 'a' }, [])).toBeNull();
    expect(keptTarget({ engine: 'lab', model: null }, [remote({ error: unreachable })])).toBeNull();
  });

  it('moves to the first model when the chosen one is not listed, or models become known', () => {
    expect(keptTarget({ engine: 'lab', model: 'gone' }, [lab])).toEqual({ engine: 'lab', model: 'a' });
    expect(keptTarget({ engine: 'lab', model: null }, [lab])).toEqual({ engine: 'lab', model: 'a' });
    expect(keptTarget({ engine: 'lab', model: 'x' }, [remote({})])).toEqual({ engine: 'lab', model: null });
  });
});

describe('targetProblem', () => {
  it('is the remote engine’s last error', () => {
    expect(targetProblem(null, [remote({ error: unreachable })])).toBeNull();
    expect(targetProblem({ engine: 'lab', model: 'a' }, [remote({ models: ['a'], error: unreachable })])).toBe(unreachable.message);
    expect(targetProblem({ engine: 'lab', model: 'a' }, [remote({ models: ['a'] })])).toBeNull();
  });
});

describe('onTarget', () => {
  const request: PlaygroundRequest = {
    messages: [{ role: 'user', content: 'Hi' }],
    mode: 'medusa',
    tree: 'chain-2',
    draft_length: 4,
    max_draft_tokens: 8,
    max_tokens: 32,
    conversation_id: 3,
  };

  it('leaves a request for the model served here as it is', () => {
    expect(onTarget(request, null)).toBe(request);
  });

  it('names the engine and its model, and drops what only the model served here drafts', () => {
    expect(onTarget(request, { engine: 'lab', model: 'm' })).toEqual({
      messages: [{ role: 'user', content: 'Hi' }],
      mode: 'medusa',
      max_tokens: 32,
      conversation_id: 3,
      engine: 'lab',
      model: 'm',
    });
    expect(onTarget({ prompt: 'x' }, { engine: 'lab', model: null })).toEqual({ prompt: 'x', engine: 'lab' });
    // The request given is not changed.
    expect(request.tree).toBe('chain-2');
  });
});

describe('runTarget and draftedText', () => {
  it('say where a stored run ran', () => {
    const model = { name: 'SmolLM2', path: 'http://gpu-box:8000', file_type: '', identity: '' };
    expect(runTarget({ engine: 'lab', model })).toEqual({ engine: 'lab', model: 'SmolLM2' });
    expect(runTarget({ engine: null, model })).toBeNull();
  });

  it('count drafted and accepted tokens only when some were drafted', () => {
    expect(draftedText(40, 31)).toBe('drafted 40, accepted 31');
    expect(draftedText(5, null)).toBe('drafted 5, accepted 0');
    expect(draftedText(0, 0)).toBeNull();
    expect(draftedText(null, null)).toBeNull();
    expect(draftedText(undefined, undefined)).toBeNull();
  });
});

describe('what each engine runs', () => {
  const plain = remote({ name: 'plain', models: ['gpt-x'], kind: 'openai', modes: ['normal'] });
  const medusa = remote({ name: 'twin', models: ['SmolLM2'], kind: 'medusa_serve', modes: ['normal', 'lookup', 'auto'] });
  const info = { modes: ['normal', 'medusa', 'lookup', 'auto'] as Mode[], remotes: [plain, medusa] };

  it('offers the loaded model’s modes here, a medusa serve’s own, and normal elsewhere', () => {
    expect(targetModes(null, info)).toEqual(['normal', 'medusa', 'lookup', 'auto']);
    expect(targetModes({ engine: 'twin', model: 'SmolLM2' }, info)).toEqual(['normal', 'lookup', 'auto']);
    expect(targetModes({ engine: 'plain', model: 'gpt-x' }, info)).toEqual(['normal']);
    // Gone, or not known yet: normal decoding only.
    expect(targetModes({ engine: 'gone', model: null }, info)).toEqual(['normal']);
    expect(targetModes(null, null)).toEqual([]);
  });

  it('says what an engine is', () => {
    expect(kindText(medusa)).toBe('medusa serve: normal, lookup, auto');
    expect(kindText(plain)).toBe('OpenAI-compatible: normal decoding only');
    expect(kindText(remote({ kind: 'extended' }))).toBe('llama-server, vLLM or SGLang: normal decoding only');
    expect(kindText(remote({}))).toBeNull();
  });

  it('disables, for a mode placed on an engine, the engines that do not run it, saying why', () => {
    const [plainGroup, medusaGroup] = targetGroups([plain, medusa], 'lookup');
    expect(plainGroup.label).toBe('plain (normal decoding only)');
    expect(plainGroup.options).toEqual([
      { key: 'plain/gpt-x', label: 'plain · gpt-x', disabled: true, title: 'Prompt lookup runs here or on another medusa serve, not on plain' },
    ]);
    expect(medusaGroup.options[0]).toMatchObject({ key: 'twin/SmolLM2', disabled: false, title: 'SmolLM2 on http://gpu-box:8000 (medusa serve: normal, lookup, auto)' });
    // Normal runs anywhere.
    expect(targetGroups([plain], 'normal')[0].options[0].disabled).toBe(false);
    expect(targetGroups([plain])[0].options[0].disabled).toBe(false);
  });

  it('moves a mode placed on an engine that does not run it back here', () => {
    expect(keptTarget({ engine: 'plain', model: 'gpt-x' }, [plain], 'medusa')).toBeNull();
    expect(keptTarget({ engine: 'plain', model: 'gpt-x' }, [plain], 'normal')).toEqual({ engine: 'plain', model: 'gpt-x' });
    expect(keptTarget({ engine: 'twin', model: 'SmolLM2' }, [medusa], 'auto')).toEqual({ engine: 'twin', model: 'SmolLM2' });
    // An engine not asked yet may run it: it is asked when the run starts.
    const unasked = remote({ name: 'new' });
    expect(keptTarget({ engine: 'new', model: null }, [unasked], 'medusa')).toEqual({ engine: 'new', model: null });
  });
});

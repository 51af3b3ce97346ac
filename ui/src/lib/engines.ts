// Where runs go: the model served here, or a model of a remote engine (vLLM, SGLang, llama-server,
// another `medusa serve`). The pickers' options, the request fields each choice sends, and how runs
// say where they ran. Pure, so it is unit-tested directly.

import { MODE_LABELS as MODE_NAMES } from './modes';
import type { ApiErrorBody, Info, Mode, PlaygroundRequest, RemoteEngineInfo, RunRecord } from './api/types';

/** A remote engine's model; `model` null: the first the engine lists (it was not asked yet). */
export interface RemoteTarget {
  engine: string;
  model: string | null;
}

/** Where runs go: a remote engine's model, or null for the model served here. */
export type RunTarget = RemoteTarget | null;

/** The pickers' value for the model served here. */
export const LOCAL_KEY = 'local';

/** A target as a picker's value. Engine names hold no '/', so the first one ends the name. */
export function targetKey(target: RunTarget): string {
  return target ? `${target.engine}/${target.model ?? ''}` : LOCAL_KEY;
}

/** The target a picker's value stands for. */
export function targetFromKey(key: string): RunTarget {
  const slash = key.indexOf('/');
  if (slash <= 0) return null;
  const model = key.slice(slash + 1);
  return { engine: key.slice(0, slash), model: model === '' ? null : model };
}

/** "lab · SmolLM2-135M-Instruct", or the engine alone when its model is not known. */
export function placeText(target: RemoteTarget): string {
  return target.model ? `${target.engine} · ${target.model}` : target.engine;
}

/** A picker's text for `target`. */
export function targetLabel(target: RunTarget): string {
  return target ? placeText(target) : 'This machine';
}

/** Why an engine could not be asked, short enough for a menu; the full message goes in its title. */
export function shortReason(error: ApiErrorBody): string {
  switch (error.code) {
    case 'remote_unreachable':
      return 'cannot be reached';
    case 'remote_unauthorized':
      return 'refused the API key';
    case 'remote_timeout':
      return 'did not answer in time';
    case 'remote_malformed':
      return 'not an OpenAI-compatible server';
    case 'remote_no_models':
      return 'lists no models';
    default:
      return error.message;
  }
}

/**
 * What a remote engine is, for Settings and the pickers' titles: another `medusa serve` runs the
 * modes it lists; any other engine decodes as it was started (normal decoding, asked for in
 * OpenAI's fields).
 */
export function kindText(remote: Pick<RemoteEngineInfo, 'kind' | 'modes'>): string | null {
  switch (remote.kind) {
    case 'medusa_serve':
      return `medusa serve: ${remote.modes.join(', ')}`;
    case 'extended':
      return 'llama-server, vLLM or SGLang: normal decoding only';
    case 'openai':
      return 'OpenAI-compatible: normal decoding only';
    default:
      return null;
  }
}

/**
 * The modes a run on `target` may ask for: the loaded model's (`info.modes`) here; on a remote
 * engine, the modes it lists (another `medusa serve`), else normal decoding alone.
 */
export function targetModes(target: RunTarget, info: Pick<Info, 'modes' | 'remotes'> | null): Mode[] {
  if (!target) return info?.modes ?? [];
  return info?.remotes.find((r) => r.name === target.engine)?.modes ?? ['normal'];
}

/** Whether `remote` runs `mode` (null: any mode, as when no mode is being chosen). */
function runsMode(remote: RemoteEngineInfo, mode: Mode | null): boolean {
  return mode === null || remote.modes.includes(mode);
}

export interface TargetOption {
  key: string;
  label: string;
  disabled: boolean;
  title: string;
}

export interface TargetGroup {
  engine: string;
  label: string;
  options: TargetOption[];
}

/** The remote engines the backend has not asked for their models yet (as after a restart). */
export function unaskedRemotes(remotes: readonly RemoteEngineInfo[]): string[] {
  return remotes.filter((r) => r.models.length === 0 && !r.error).map((r) => r.name);
}

/**
 * The remote engines' choices, one group per engine: each model it listed; an engine that listed
 * none is one disabled choice saying why, or, when it was not asked yet, its first model (a run
 * asks it). An engine that failed after listing models keeps them: it may be back.
 */
export function targetGroups(remotes: readonly RemoteEngineInfo[], mode: Mode | null = null): TargetGroup[] {
  return remotes.map((r) => {
    const reason = r.error ? shortReason(r.error) : null;
    // An engine that does not run the mode being placed is offered, disabled, with the reason.
    const cannot = runsMode(r, mode) ? null : `${MODE_NAMES[mode!]} runs here or on another medusa serve, not on ${r.name}`;
    const kind = kindText(r);
    if (r.models.length > 0) {
      return {
        engine: r.name,
        label: reason ? `${r.name} (${reason} when last asked)` : cannot ? `${r.name} (normal decoding only)` : r.name,
        options: r.models.map((model) => ({
          key: targetKey({ engine: r.name, model }),
          label: placeText({ engine: r.name, model }),
          disabled: cannot !== null,
          title: cannot ?? (r.error ? r.error.message : `${model} on ${r.url}${kind ? ` (${kind})` : ''}`),
        })),
      };
    }
    const key = targetKey({ engine: r.name, model: null });
    const option: TargetOption = r.error
      ? { key, label: `${r.name}: ${reason}`, disabled: true, title: r.error.message }
      : { key, label: `${r.name} · its first model`, disabled: false, title: `Not asked yet: a run asks ${r.url} for its models` };
    return { engine: r.name, label: r.name, options: [option] };
  });
}

/**
 * What a picker keeps of `target` once the engines change: the model served here when its engine
 * is gone or can offer nothing; the engine's first model when it no longer lists the chosen one,
 * or now lists models where none were known.
 */
export function keptTarget(target: RunTarget, remotes: readonly RemoteEngineInfo[], mode: Mode | null = null): RunTarget {
  if (!target) return null;
  const remote = remotes.find((r) => r.name === target.engine);
  if (!remote) return null;
  // Known not to run the mode (an engine not asked yet may, and is asked when the run starts).
  if (remote.kind && !runsMode(remote, mode)) return null;
  if (remote.models.length === 0) return remote.error ? null : { engine: remote.name, model: null };
  if (target.model !== null && remote.models.includes(target.model)) return target;
  return { engine: remote.name, model: remote.models[0] };
}

/** The engine's last problem when `target` is a remote one that failed when last asked. */
export function targetProblem(target: RunTarget, remotes: readonly RemoteEngineInfo[]): string | null {
  if (!target) return null;
  return remotes.find((r) => r.name === target.engine)?.error?.message ?? null;
}

/**
 * `request` run on `target`: a remote engine is named with its model, and the drafting fields
 * only the model served here honours (tree, draft length, max draft tokens) are left out, as the
 * backend refuses them for a remote run. The mode stays: another `medusa serve` decodes in it,
 * and the backend sends none to other engines.
 */
export function onTarget(request: PlaygroundRequest, target: RunTarget): PlaygroundRequest {
  if (!target) return request;
  const remote: PlaygroundRequest = { ...request, engine: target.engine };
  delete remote.tree;
  delete remote.draft_length;
  delete remote.max_draft_tokens;
  if (target.model) remote.model = target.model;
  return remote;
}

/** Where a stored run ran: its remote engine and model, or null for the model served here. */
export function runTarget(run: Pick<RunRecord, 'engine' | 'model'>): RunTarget {
  return run.engine ? { engine: run.engine, model: run.model.name } : null;
}

/** "drafted 40, accepted 31" when tokens were drafted (and reported), else null. */
export function draftedText(drafted: number | null | undefined, accepted: number | null | undefined): string | null {
  return drafted && drafted > 0 ? `drafted ${drafted}, accepted ${accepted ?? 0}` : null;
}

/**
 * A run's summary count of drafted tokens in words: a remote engine's as it reported them
 * ("drafted 40, accepted 31"), a local run's as what it is, one per depth each step's tree
 * reached ("draft depth 19, 10 accepted"); null when nothing was drafted (or reported).
 */
export function summaryDraftText(
  run: Pick<RunRecord, 'engine' | 'draft_tokens' | 'accepted_draft_tokens'>,
): string | null {
  if (run.engine) return draftedText(run.draft_tokens, run.accepted_draft_tokens);
  return run.draft_tokens && run.draft_tokens > 0 ? `draft depth ${run.draft_tokens}, ${run.accepted_draft_tokens ?? 0} accepted` : null;
}

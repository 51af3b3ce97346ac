// The backend's data as the UI sees it. The HTTP API (`medusa serve`) and the desktop app's Tauri
// commands answer the same JSON, so one set of types serves both transports.

export type Mode = 'normal' | 'medusa' | 'lookup';
export type RunStatus = 'running' | 'finished' | 'failed' | 'cancelled' | 'interrupted';
export type ExportFormat = 'json' | 'jsonl' | 'csv';
/** Who proposed a token: the base model, Medusa head k (0-based: head k guesses k+2 tokens ahead), or prompt lookup. */
export type TokenSource = 'model' | 'lookup' | `medusa_head_${number}`;

export interface ChatMessage {
  role: 'system' | 'user' | 'assistant';
  content: string;
}

export interface SamplingParams {
  /** 0 is greedy. */
  temperature: number;
  top_k: number;
  top_p: number;
  min_p: number;
  repeat_penalty: number;
  repeat_last_n: number;
  /** null: a fresh seed, reported back in the summary. */
  seed: number | null;
}

/** Body of a generation: `prompt` (raw continuation) or `messages` (chat template), not both. */
export interface GenerateRequest {
  prompt?: string;
  messages?: ChatMessage[];
  mode?: Mode;
  /** Default 256. */
  max_tokens?: number;
  stop?: string[];
  sampling?: Partial<SamplingParams>;
  /** Cap on drafted tokens per step (speculative modes). */
  max_draft_tokens?: number;
}

export interface StartedEvent {
  type: 'started';
  run_id: number;
  prompt_tokens: number;
}

export interface TextEvent {
  type: 'text';
  text: string;
  token_ids: number[];
  /** One per token in token_ids. */
  sources: TokenSource[];
}

/** One speculative step (medusa and lookup modes only). */
export interface StepEvent {
  type: 'step';
  index: number;
  /** Drafted nodes, the root not counted. */
  tree_size: number;
  tree_depth: number;
  /** Tokens this step emitted, the model's own token included (>= 1). */
  accepted_len: number;
  tokens: number[];
  sources: TokenSource[];
  /** Per depth of the drafted tree: whether its token was accepted. */
  depth_hits: boolean[];
  draft_ms: number;
  verify_ms: number;
}

export interface RunSummary {
  text: string;
  prompt_tokens: number;
  tokens_generated: number;
  queue_ms: number;
  ttft_ms: number;
  total_ms: number;
  tokens_per_second: number;
  decode_tokens_per_second: number;
  stop_reason: string;
  /** u64 on the backend: may be rounded above 2^53, display only. */
  seed: number;
  token_ids: number[];
  mode: Mode;
  steps: number;
  /** Tokens emitted per step, the model's own included: 1.0 for plain decoding. */
  mean_accepted: number;
  /** Per tree depth (head), the share of steps reaching that depth whose guess was accepted. */
  acceptance_by_head: number[];
  draft_ms: number;
  verify_ms: number;
}

export interface FinishedEvent extends RunSummary {
  type: 'finished';
  run_id: number;
}

export interface FailedEvent {
  type: 'failed';
  run_id: number;
  code: string;
  message: string;
}

export type RunEvent = StartedEvent | TextEvent | StepEvent | FinishedEvent | FailedEvent;

/** Every error the backend answers: HTTP bodies `{"error": {...}}`, Tauri command rejections. */
export interface ApiErrorBody {
  code: string;
  message: string;
}

export interface HeadsInfo {
  head_count: number;
  layers_per_head: number;
  /** Weight format of the projection to the vocabulary, e.g. "q8_0". */
  projection_type: string;
  /** Whether the heads share the model's own output projection. */
  shared_projection: boolean;
  /** Whether the heads also read the root token (the model's own next token). */
  root_token_input: boolean;
  /** Tokens the heads can guess, when restricted to a frequent subset of the vocabulary. */
  vocab_subset: number | null;
  /** Medusa choices: per path, the rank in each head's top-k. */
  default_tree: number[][];
  base: Record<string, unknown>;
}

export interface ModelInfo {
  path: string;
  name: string;
  architecture: string;
  file_type: string;
  file_size_bytes: number;
  n_params: number;
  n_layer: number;
  n_embd: number;
  n_vocab: number;
  n_ctx_train: number;
  n_ctx: number;
  parallel: number;
  n_batch: number;
  threads: number;
  has_chat_template: boolean;
  heads: HeadsInfo | null;
  medusa_tree: number[][] | null;
  medusa_plan: MedusaPlan | null;
}

/** How Medusa mode's tree was settled on this machine: given, stored with the heads, or sized
 *  from the heads' held-out accuracy and the decode costs measured here (none: plain decoding). */
export interface MedusaPlan {
  origin: 'given' | 'stored' | 'tuned';
  tree: number[][] | null;
  expected_tokens_per_step: number | null;
  predicted_speedup: number | null;
  decision: string;
}

export interface EngineMetrics {
  slots: number;
  active: number;
  queued: number;
  steps: number;
  batch_tokens: number;
  tokens_emitted: number;
  last_batch_tokens: number;
  last_occupancy: number;
  requests_finished: number;
  requests_failed: number;
  idle_sequences_in_kv: number;
}

/** A model being loaded (in the background) to replace the current one, if any. */
export interface LoadingStatus {
  model: string;
  heads: string | null;
  /** e.g. "fetching", "loading model", "loading heads", "calibrating". */
  stage: string;
  /** 0..1 when known. */
  progress: number | null;
  elapsed_ms: number;
}

/**
 * `GET /api/info` / Tauri `info`. `model` is null until a first model has loaded; while another
 * loads, the current one keeps serving and `loading` says what is coming. `error` is the last
 * load failure (the previous model, if any, stays in use).
 */
export interface Info {
  model: ModelInfo | null;
  heads: HeadsInfo | null;
  heads_path: string | null;
  /** The Medusa tree in use (paths of ranks), null without heads. */
  tree: number[][] | null;
  modes: Mode[];
  metrics: EngineMetrics | null;
  database: string;
  loading: LoadingStatus | null;
  error: ApiErrorBody | null;
}

export interface ModelRef {
  name: string;
  path: string;
  file_type: string;
  identity: string;
}

export type PromptRecord =
  | { kind: 'text'; content: string }
  | { kind: 'chat'; content: ChatMessage[] };

export interface RunRecord {
  id: number;
  uid: string;
  created_at: string;
  finished_at: string | null;
  status: RunStatus;
  mode: Mode;
  model: ModelRef;
  heads: { path: string; identity: string } | null;
  tree: unknown;
  prompt: PromptRecord;
  sampling: Partial<SamplingParams>;
  max_tokens: number;
  stop: string[];
  comparison_id: number | null;
  queue_ms: number | null;
  output: string | null;
  stop_reason: string | null;
  prompt_tokens: number | null;
  tokens_generated: number | null;
  ttft_ms: number | null;
  total_ms: number | null;
  tokens_per_second: number | null;
  steps: number | null;
  mean_accepted: number | null;
  acceptance_by_head: number[] | null;
  seed: number | null;
  error: string | null;
}

export interface StepRecord {
  step_index: number;
  tree_size: number;
  tree_depth: number;
  accepted_len: number;
  tokens: number[];
  sources: string[];
  depth_hits: boolean[];
  draft_ms: number;
  verify_ms: number;
}

export interface RunWithSteps {
  run: RunRecord;
  steps: StepRecord[];
}

export interface ComparisonMember {
  run_id: number;
  mode: Mode;
  status: RunStatus;
  tokens_per_second: number | null;
  /** This run's tokens/s over the normal run's; null for the baseline itself. */
  speedup: number | null;
  /** Whether the output equals the baseline's; null for the baseline itself. */
  output_identical: boolean | null;
  /** Character index of the first difference from the baseline, null when identical. */
  first_difference: number | null;
}

export interface Comparison {
  id: number;
  created_at: string;
  prompt: PromptRecord;
  runs: ComparisonMember[];
  /** Best speed-up over the baseline. */
  speedup: number | null;
  outputs_identical: boolean | null;
  first_difference: number | null;
}

export type SortKey =
  | 'created_at'
  | 'tokens_per_second'
  | 'total_ms'
  | 'ttft_ms'
  | 'tokens_generated'
  | 'mean_accepted';

export interface RunQuery {
  mode?: Mode;
  model?: string;
  status?: RunStatus;
  /** RFC 3339. */
  since?: string;
  until?: string;
  limit?: number;
  offset?: number;
  sort?: SortKey;
  order?: 'asc' | 'desc';
}

export interface LoadModelRequest {
  /** A GGUF path on the machine running the backend. */
  model: string;
  /** A `*.medusa.gguf` heads file; null for none. */
  heads?: string | null;
  /** Tree name (`mc_sim_7b_63`, `chain-N`) or a JSON file; null for the heads' default. */
  tree?: string | null;
}

/** One tree size as the tuner predicts it. */
export interface TunedSize {
  nodes: number;
  depth: number;
  /** Expected tokens per step, the model's own included. */
  expected_tokens: number;
  step_ms: number;
  tokens_per_second: number;
  predicted_speedup: number;
}

/** `POST /api/tune` / Tauri `tune`: heads accuracy, decode costs and each tree size's speed. */
export interface TuneReport {
  decode_ms_by_tokens: [number, number][];
  ms_per_head: number;
  positions: number[];
  head_top1_accuracy: number[];
  head_accuracy_by_rank: number[][];
  plain_tokens_per_second: number;
  budgets: TunedSize[];
  /** Per budget: tokens per step its tree would have yielded on the tuning prompts. */
  measured_tokens_per_step: number[];
  /** The Medusa paper's 63-node tree on the same prompts, for heads deep enough for it. */
  reference_tree: { name: string; nodes: number; measured_tokens_per_step: number } | null;
  chosen: {
    nodes: number;
    expected_tokens_per_step: number;
    predicted_speedup: number;
    tree: number[][];
  } | null;
  decision: string;
}
